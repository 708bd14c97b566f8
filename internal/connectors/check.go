package connectors

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/lookout-dev/lookout/internal/config"
)

// errNoIO is what a connector built by Check gets if it tries to reach
// the network: a check builds, it never fetches.
var errNoIO = errors.New("a configuration check does no I/O")

// Check decodes the block of every source of cfg with its connector's
// Decoder and builds it with its Constructor, without I/O: the
// connector's HTTP client and dialer refuse to connect. It is the
// connectors' part of the one validation path (a definitions.Check), for
// a binary that validates sources it does not run: the api checks a
// source created through it like `syncer check` checks a file. A source
// without a block is decoded too (its required keys are reported), which
// config.Load leaves to the build. Problems are located errors
// (src.Errorf: file or definition, line, key), joined.
func Check(cfg *config.Config) error {
	var errs []error
	for _, src := range cfg.Sources {
		if _, ok := lookup(src.Connector); !ok {
			continue // config reports the unknown name
		}
		if _, err := New(src, checkEnv(cfg.Dir)); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// checkEnv is the Env of a check: nothing in it reaches out.
func checkEnv(dir string) Env {
	return Env{
		Dir:    dir,
		HTTP:   &http.Client{Transport: noIO{}},
		Dial:   func(context.Context, string, string) (net.Conn, error) { return nil, errNoIO },
		Logger: slog.New(slog.DiscardHandler),
		Now:    time.Now,
	}
}

// noIO is an http.RoundTripper that refuses every request.
type noIO struct{}

func (noIO) RoundTrip(r *http.Request) (*http.Response, error) {
	return nil, fmt.Errorf("%s %s: %w", r.Method, r.URL.Redacted(), errNoIO)
}
