package connectors

import (
	"log/slog"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/lookout-dev/lookout/internal/config"
)

// Decoder reads a source's connector block into the connector's settings
// S: strictly (src.DecodeBlock: an unknown key or a wrong type is an
// error), with the connector's defaults applied, and validated. Every
// problem is an error at the line of its key, src.Errorf("http.url",
// "is required"), so that it reads
//
//	sources/acme.yaml:12: http.url is required
//
// Problems are joined (errors.Join) so that all of them are reported at
// once. A Decoder does no I/O: the config check runs it.
type Decoder[S any] func(src *config.Source) (S, error)

// Constructor builds the connector of src from the settings its Decoder
// returned. It compiles what the settings name (expressions) and reports
// problems as src.Errorf(key, ...) too.
type Constructor[S any] func(src *config.Source, settings S, env Env) (Connector, error)

// driver is one registered connector type, its settings type erased.
type driver struct {
	check func(src *config.Source) error
	build func(src *config.Source, env Env) (Connector, error)
}

var (
	mu      sync.RWMutex
	drivers = map[string]driver{}
	hosts   = map[string]config.RateLimit{}
)

func init() {
	config.UseConnectors(registry{})
}

// Register makes a connector type available by name: decode reads its
// block of a source file (the key named like the connector: http: for
// connector: http) and build makes the connector. Call it from the
// connector package's init; a binary links the connector by importing its
// package (internal/connectors/all links every one). It panics on an empty
// name, a nil decoder or constructor, or a name registered twice, like
// database/sql.Register.
func Register[S any](name string, decode Decoder[S], build Constructor[S]) {
	mu.Lock()
	defer mu.Unlock()
	if name == "" {
		panic("connectors: Register with an empty name")
	}
	if decode == nil {
		panic("connectors: Register " + name + " with a nil decoder")
	}
	if build == nil {
		panic("connectors: Register " + name + " with a nil constructor")
	}
	if _, dup := drivers[name]; dup {
		panic("connectors: Register called twice for " + name)
	}
	drivers[name] = driver{
		check: func(src *config.Source) error {
			_, err := decode(src)
			return err
		},
		build: func(src *config.Source, env Env) (Connector, error) {
			settings, err := decode(src)
			if err != nil {
				return nil, err
			}
			return build(src, settings, env)
		},
	}
}

// RegisterHostLimit declares the documented request budget of an
// upstream host a connector calls (api.notion.com: 3 requests per second).
// The syncer's shared per-host budget uses it for that host unless
// lookout.yaml's hosts: lists the host; defaults.host_rate_limit applies
// to hosts nobody declared. Call it from the connector package's init; it
// panics on an empty host, a budget that is not positive, or a host
// declared twice with different budgets.
func RegisterHostLimit(host string, rl config.RateLimit) {
	mu.Lock()
	defer mu.Unlock()
	host = strings.ToLower(host)
	if host == "" {
		panic("connectors: RegisterHostLimit with an empty host")
	}
	if rl.PerSecond <= 0 || rl.Burst < 1 {
		panic("connectors: RegisterHostLimit " + host + " with a budget that is not positive")
	}
	if old, dup := hosts[host]; dup && old != rl {
		panic("connectors: RegisterHostLimit called twice for " + host)
	}
	hosts[host] = rl
}

// HostLimit returns the budget a connector declared for host, if any.
func HostLimit(host string) (config.RateLimit, bool) {
	mu.RLock()
	defer mu.RUnlock()
	rl, ok := hosts[strings.ToLower(host)]
	return rl, ok
}

// Names lists the registered connector types, sorted.
func Names() []string {
	mu.RLock()
	defer mu.RUnlock()
	names := make([]string, 0, len(drivers))
	for n := range drivers {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}

func lookup(name string) (driver, bool) {
	mu.RLock()
	defer mu.RUnlock()
	d, ok := drivers[name]
	return d, ok
}

// New builds the connector src names: it decodes the source's block with
// the connector's Decoder and builds it with its Constructor.
func New(src *config.Source, env Env) (Connector, error) {
	d, ok := lookup(src.Connector)
	if !ok {
		return nil, src.Errorf("connector", "%q is not known (known: %s)", src.Connector, strings.Join(Names(), ", "))
	}
	if env.Now == nil {
		env.Now = time.Now
	}
	if env.Logger == nil {
		env.Logger = slog.Default()
	}
	if env.Dial == nil {
		env.Dial = (&net.Dialer{Timeout: src.Timeout}).DialContext
	}
	if env.HTTP == nil {
		env.HTTP = &http.Client{Timeout: src.Timeout}
	}
	return d.build(src, env)
}

// registry is what config.Load consults (see config.ConnectorRegistry):
// the registered names and their decoders.
type registry struct{}

func (registry) Names() []string { return Names() }

func (registry) HostLimit(host string) (config.RateLimit, bool) { return HostLimit(host) }

func (registry) Check(src *config.Source) error {
	d, ok := lookup(src.Connector)
	if !ok {
		return nil // config reports the unknown name
	}
	return d.check(src)
}
