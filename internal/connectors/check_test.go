package connectors_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/lookout-dev/lookout/internal/config"
	"github.com/lookout-dev/lookout/internal/connectors"
)

// proberSettings is the prober: block of a connector whose constructor
// tries to reach its URL, over HTTP and by a dial.
type proberSettings struct {
	URL  string `yaml:"url"`
	Bad  bool   `yaml:"bad"`
	Addr string `yaml:"addr"`
}

func init() {
	connectors.Register("prober", func(src *config.Source) (*proberSettings, error) {
		s := &proberSettings{}
		if err := src.DecodeBlock(s); err != nil {
			return nil, err
		}
		if s.URL == "" {
			return nil, src.Errorf("prober.url", "is required")
		}
		return s, nil
	}, func(src *config.Source, s *proberSettings, env connectors.Env) (connectors.Connector, error) {
		if s.Bad {
			return nil, src.Errorf("prober.bad", "the constructor refuses this block")
		}
		resp, err := env.HTTP.Get(s.URL)
		if err != nil {
			return nil, fmt.Errorf("probe %s: %w", s.URL, err)
		}
		resp.Body.Close()
		if _, err := env.Dial(context.Background(), "tcp", s.Addr); err != nil {
			return nil, fmt.Errorf("dial %s: %w", s.Addr, err)
		}
		return widget{}, nil
	})
}

// Check decodes and builds each source's connector, reporting what the
// decoder and the constructor refuse, located; a constructor that tries
// to reach the network is refused: a check does no I/O.
func TestCheckBuildsWithoutIO(t *testing.T) {
	t.Parallel()
	var hits atomic.Int32
	upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { hits.Add(1) }))
	defer upstream.Close()
	src := func(name, block string) *config.Source {
		t.Helper()
		s, err := config.ParseSource("sources/"+name+".yaml", []byte("name: "+name+"\nconnector: prober\nevery: 1m\nprober:\n"+block), &config.Global{})
		if err != nil {
			t.Fatalf("parse %s: %v", name, err)
		}
		return s
	}
	err := connectors.Check(&config.Config{Sources: []*config.Source{
		src("reach", "  url: "+upstream.URL+"\n  addr: "+strings.TrimPrefix(upstream.URL, "http://")+"\n"),
		src("refused", "  url: https://x.test\n  bad: true\n"),
	}})
	if err == nil {
		t.Fatal("Check passed a constructor that reaches the network and one that refuses its block")
	}
	for _, want := range []string{
		"probe " + upstream.URL + ": Get",
		"a configuration check does no I/O",
		"sources/refused.yaml:6: prober.bad the constructor refuses this block",
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error lacks %q:\n%v", want, err)
		}
	}
	if n := hits.Load(); n != 0 {
		t.Errorf("the upstream got %d request(s) from a check", n)
	}
	if err := connectors.Check(&config.Config{Sources: []*config.Source{src("fine", "  url: https://x.test\n  bad: false\n")}}); err == nil || !strings.Contains(err.Error(), "does no I/O") {
		t.Errorf("a check dialled or fetched: %v", err)
	}
}
