package service

import (
	"context"
	"errors"
	"log/slog"
	"slices"
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
