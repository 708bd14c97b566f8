package notify

import (
	"errors"
	"log/slog"
	"reflect"
	"slices"
	"strings"
	"sync"

	"github.com/lookout-dev/lookout/internal/config"
	"github.com/lookout-dev/lookout/internal/egress"
	"github.com/lookout-dev/lookout/internal/redact"
)

// Decoder reads the keys of a sink's type into the type's settings S:
// strictly (s.DecodeBlock: an unknown key, a key only another type reads,
// or a wrong type is an error), with the type's defaults applied, and
// validated. Every problem is an error at the line of its key,
// s.Errorf("url", "is required for a webhook sink"), so that it reads
//
//	lookout.yaml:12: sinks.hook.url is required for a webhook sink
//
// Problems are joined (errors.Join) so that all of them are reported at
// once. A Decoder does no I/O: the config check runs it.
type Decoder[S any] func(s *config.Sink) (S, error)

// Env is what a sink's Constructor may use besides its settings.
type Env struct {
	// Egress is lookout.yaml's egress policy: HTTP sinks dial through it.
	Egress egress.Policy
	// Logger is the logger of the sink (with its name).
	Logger *slog.Logger
	// Redactor hides secrets in logs and stored errors: a sink adds the
	// credentials it finds in its settings (a url sink's token) that were
	// not written as ${ENV}. Defaults to nil: Add does nothing.
	Redactor *redact.Redactor
}

// Constructor builds the sink s declares from the settings its Decoder
// returned.
type Constructor[S any] func(s *config.Sink, settings S, env Env) (Sink, error)

// kind is one registered sink type, its settings type erased.
type kind struct {
	keys  []string
	check func(s *config.Sink) error
	build func(s *config.Sink, env Env) (Sink, error)
}

var (
	kindsMu sync.RWMutex
	kinds   = map[string]kind{}
)

func init() {
	config.UseSinks(registry{})
}

// Register makes a sink type available by name: decode reads the keys a
// sink of that type has besides the common ones (type, timeout,
// max_attempts, concurrency, title, body) and build makes the sink. Call
// it from the sink type's package init (internal/notify/<type>); a binary
// links the type by importing its package (internal/notify/all links every
// one). It panics on an empty name, a nil decoder or constructor, or a
// name registered twice, like database/sql.Register.
func Register[S any](name string, decode Decoder[S], build Constructor[S]) {
	kindsMu.Lock()
	defer kindsMu.Unlock()
	if name == "" {
		panic("notify: Register with an empty name")
	}
	if decode == nil {
		panic("notify: Register " + name + " with a nil decoder")
	}
	if build == nil {
		panic("notify: Register " + name + " with a nil constructor")
	}
	if _, dup := kinds[name]; dup {
		panic("notify: Register called twice for " + name)
	}
	kinds[name] = kind{
		keys: config.BlockKeys(reflect.TypeFor[S]()),
		check: func(s *config.Sink) error {
			_, err := decode(s)
			return err
		},
		build: func(s *config.Sink, env Env) (Sink, error) {
			settings, err := decode(s)
			if err != nil {
				return nil, err
			}
			return build(s, settings, env)
		},
	}
}

// Kinds lists the registered sink types, sorted.
func Kinds() []string {
	kindsMu.RLock()
	defer kindsMu.RUnlock()
	names := make([]string, 0, len(kinds))
	for n := range kinds {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}

// KindKeys lists the keys of a registered sink type (the yaml names of
// its settings' fields), sorted; nil for a type not registered.
func KindKeys(name string) []string {
	k, _ := lookupKind(name)
	return slices.Clone(k.keys)
}

func lookupKind(name string) (kind, bool) {
	kindsMu.RLock()
	defer kindsMu.RUnlock()
	k, ok := kinds[name]
	return k, ok
}

// NewSink builds the sink s declares: it decodes the sink's keys with its
// type's Decoder and builds it with its Constructor.
func NewSink(s *config.Sink, env Env) (Sink, error) {
	k, ok := lookupKind(s.Type)
	if !ok {
		return nil, s.Errorf("type", "%q is not supported by this build (known: %s)", s.Type, strings.Join(Kinds(), ", "))
	}
	if env.Logger == nil {
		env.Logger = slog.Default()
	}
	return k.build(s, env)
}

// BuildSinks builds every sink of the global configuration; webhook and
// Slack sinks connect under g's egress policy. Errors name the sink's key
// in lookout.yaml.
func BuildSinks(g *config.Global, logger *slog.Logger) (map[string]Sink, error) {
	policy := g.Egress.Policy()
	out := map[string]Sink{}
	var errs []error
	names := make([]string, 0, len(g.Sinks))
	for name := range g.Sinks {
		names = append(names, name)
	}
	slices.Sort(names)
	for _, name := range names {
		sc := g.Sinks[name]
		s, err := NewSink(sc, Env{Egress: policy, Logger: logger.With("sink", name), Redactor: g.Redactor()})
		var ce *config.Error
		switch {
		case err == nil:
			out[name] = s
		case errors.As(err, &ce):
			errs = append(errs, err)
		default:
			errs = append(errs, g.Errorf("sinks."+name, "%v", err))
		}
	}
	return out, errors.Join(errs...)
}

// registry is what config.Load consults (see config.SinkRegistry): the
// registered sink types, their keys and their decoders.
type registry struct{}

func (registry) Names() []string { return Kinds() }

func (registry) Keys(name string) []string { return KindKeys(name) }

func (registry) Check(s *config.Sink) error {
	k, ok := lookupKind(s.Type)
	if !ok {
		return nil // config reports the unknown name
	}
	return k.check(s)
}
