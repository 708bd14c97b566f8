package service

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"

	"go.uber.org/goleak"

	"github.com/lookout-dev/lookout/internal/testsignal"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// fake is a service that records its starts and stops in a shared log and
// runs a Loop that returns fail's value when it is closed.
type fake struct {
	name     string
	log      *events
	startErr error
	fail     chan error
	loop     Loop
}

type events struct {
	mu   sync.Mutex
	list []string
}

func (e *events) add(s string) { e.mu.Lock(); e.list = append(e.list, s); e.mu.Unlock() }

func (e *events) get() []string { e.mu.Lock(); defer e.mu.Unlock(); return slices.Clone(e.list) }

func newFake(name string, log *events) *fake {
	return &fake{name: name, log: log, fail: make(chan error, 1)}
}

func (f *fake) Start(ctx context.Context) error {
	if f.startErr != nil {
		return f.startErr
	}
	f.log.add("start " + f.name)
	return f.loop.Start(ctx, func(ctx context.Context) error {
		select {
		case <-ctx.Done():
			return nil
		case err := <-f.fail:
			return err
		}
	})
}

func (f *fake) Stop() error {
	err := f.loop.Stop()
	f.log.add("stop " + f.name)
	return err
}

func (f *fake) Done() <-chan struct{} { return f.loop.Done() }

// startThree starts a supervisor of three fakes, a, b and c, and returns
// their log, b and the supervisor.
func startThree(t *testing.T) (*events, *fake, *Supervisor) {
	t.Helper()
	log := &events{}
	a, b, c := newFake("a", log), newFake("b", log), newFake("c", log)
	s := NewSupervisor(slog.New(slog.DiscardHandler), a, b, c)
	if err := s.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	return log, b, s
}

func TestSupervisorStartsInOrderStopsInReverse(t *testing.T) {
	t.Parallel()
	log, _, s := startThree(t)
	if err := s.Start(context.Background()); err == nil {
		t.Error("a second Start succeeded")
	}
	if err := s.Stop(); err != nil {
		t.Fatal(err)
	}
	if err := s.Stop(); err != nil {
		t.Fatalf("second Stop: %v", err)
	}
	want := []string{"start a", "start b", "start c", "stop c", "stop b", "stop a"}
	if got := log.get(); !slices.Equal(got, want) {
		t.Errorf("events %v, want %v", got, want)
	}
	select {
	case <-s.Done():
	default:
		t.Error("Done is open after Stop")
	}
}

func TestSupervisorStartFailureStopsTheStarted(t *testing.T) {
	t.Parallel()
	var log events
	a, b, c := newFake("a", &log), newFake("b", &log), newFake("c", &log)
	boom := errors.New("boom")
	b.startErr = boom
	s := NewSupervisor(slog.New(slog.DiscardHandler), a, b, c)
	if err := s.Start(context.Background()); !errors.Is(err, boom) {
		t.Fatalf("Start = %v, want b's error", err)
	}
	want := []string{"start a", "stop a"}
	if got := log.get(); !slices.Equal(got, want) {
		t.Errorf("events %v, want %v (c never started)", got, want)
	}
	if err := s.Stop(); err != nil {
		t.Errorf("Stop after a failed Start: %v", err)
	}
}

func TestSupervisorStopsTheOthersWhenOneFails(t *testing.T) {
	t.Parallel()
	log, b, s := startThree(t)
	boom := errors.New("lost the database")
	b.fail <- boom
	testsignal.Receive(t, s.Done(), "the supervisor to stop every service")
	want := []string{"start a", "start b", "start c", "stop c", "stop b", "stop a"}
	if got := log.get(); !slices.Equal(got, want) {
		t.Errorf("events %v, want %v", got, want)
	}
	if err := s.Stop(); !errors.Is(err, boom) {
		t.Errorf("Stop = %v, want the failed service's error", err)
	}
}

func TestSupervisorStopBeforeStart(t *testing.T) {
	t.Parallel()
	var log events
	s := NewSupervisor(slog.New(slog.DiscardHandler), newFake("a", &log))
	if err := s.Stop(); err != nil {
		t.Fatal(err)
	}
	if err := s.Start(context.Background()); err == nil {
		t.Error("Start after Stop succeeded")
	}
	if got := log.get(); len(got) != 0 {
		t.Errorf("events %v, want none", got)
	}
}

// lockedBuffer is a log destination shared by goroutines.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}
func (l *lockedBuffer) String() string { l.mu.Lock(); defer l.mu.Unlock(); return l.b.String() }

// A clean stop logs no ERROR (each service's Done closing during Stop
// once logged "service ended before stop" for each), and the line a
// failure logs has no key twice under a daemon's logger (the binaries'
// loggers carry "service").
func TestSupervisorCleanStopLogsNoError(t *testing.T) {
	t.Parallel()
	for i := range 20 { // the watchers raced Stop: make a loss likely
		var buf lockedBuffer
		logger := slog.New(slog.NewJSONHandler(&buf, nil)).With("service", "syncer")
		var log events
		fakes := []*fake{newFake("a", &log), newFake("b", &log), newFake("c", &log)}
		s := NewSupervisor(logger, fakes[0], fakes[1], fakes[2])
		// As a daemon stops: its context cancelled (SIGTERM), which ends
		// the loops, then Stop.
		ctx, cancel := context.WithCancel(context.Background())
		if err := s.Start(ctx); err != nil {
			t.Fatal(err)
		}
		if i%2 == 0 {
			cancel()
			for _, f := range fakes {
				testsignal.Receive(t, f.Done(), "the loop to end with its context")
			}
		}
		if err := s.Stop(); err != nil {
			t.Fatal(err)
		}
		cancel()
		if strings.Contains(buf.String(), `"level":"ERROR"`) {
			t.Fatalf("a clean stop logged an error:\n%s", buf.String())
		}
	}
	var buf lockedBuffer
	logger := slog.New(slog.NewJSONHandler(&buf, nil)).With("service", "syncer")
	var log events
	b := newFake("b", &log)
	s := NewSupervisor(logger, newFake("a", &log), b)
	if err := s.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	b.fail <- errors.New("lost the database")
	testsignal.Receive(t, s.Done(), "the supervisor to stop every service")
	if err := s.Stop(); err == nil || !strings.Contains(err.Error(), "lost the database") {
		t.Errorf("Stop = %v, want the failure", err)
	}
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	if len(lines) != 1 || !strings.Contains(lines[0], `"level":"ERROR"`) || !strings.Contains(lines[0], `"ended_service":"*service.fake"`) {
		t.Fatalf("want one ERROR line naming the service that ended, got:\n%s", buf.String())
	}
	if dup := duplicateKey(t, lines[0]); dup != "" {
		t.Errorf("key %q twice in %s", dup, lines[0])
	}
}

// duplicateKey returns a key that occurs twice in one object of the JSON
// line, or "".
func duplicateKey(t *testing.T, line string) string {
	t.Helper()
	dec := json.NewDecoder(strings.NewReader(line))
	var walk func() string
	walk = func() string {
		tok, err := dec.Token()
		if err != nil {
			t.Fatalf("%s: %v", line, err)
		}
		switch tok {
		case json.Delim('{'):
			seen := map[string]bool{}
			for dec.More() {
				k, _ := dec.Token()
				if seen[k.(string)] {
					return k.(string)
				}
				seen[k.(string)] = true
				if d := walk(); d != "" {
					return d
				}
			}
			_, _ = dec.Token()
		case json.Delim('['):
			for dec.More() {
				if d := walk(); d != "" {
					return d
				}
			}
			_, _ = dec.Token()
		}
		return ""
	}
	return walk()
}
