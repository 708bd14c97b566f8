package service

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
)

// Service is a long-lived part of a daemon: Start backgrounds it and
// fails fast, Stop is idempotent, tolerates a service never started, and
// blocks until its work ended.
type Service interface {
	Start(ctx context.Context) error
	Stop() error
}

// Supervisor starts a set of services in order and stops them in reverse
// order, all of them, when one fails: when one's Start fails, or when one
// that reports its end (a Done() <-chan struct{}, as Loop has) ends before
// Stop while the context of Start is live; that end is logged at ERROR,
// and Stop returns the service's error. A service ended by Stop or by the end of the
// context (a shutdown) is no failure and logs nothing. River's queue
// maintainer is the model.
type Supervisor struct {
	services []Service
	logger   *slog.Logger
	done     chan struct{}
	watchers sync.WaitGroup

	mu      sync.Mutex
	started []Service
	stopped bool
	cancel  context.CancelFunc // ends the watchers
	err     error
}

// NewSupervisor returns a supervisor of services, started in this order.
func NewSupervisor(logger *slog.Logger, services ...Service) *Supervisor {
	return &Supervisor{services: services, logger: logger, done: make(chan struct{})}
}

// Start starts every service in order. When one fails to start, it stops
// those already started and returns the error. It fails if called twice
// or after Stop.
func (s *Supervisor) Start(ctx context.Context) error {
	s.mu.Lock()
	if s.cancel != nil || s.stopped {
		s.mu.Unlock()
		return errors.New("supervisor already started")
	}
	wctx, cancel := context.WithCancel(context.Background())
	s.cancel = cancel
	for _, svc := range s.services {
		if err := svc.Start(ctx); err != nil {
			err = errors.Join(fmt.Errorf("start %T: %w", svc, err), s.stopLocked())
			s.mu.Unlock()
			s.watchers.Wait()
			return err
		}
		s.started = append(s.started, svc)
		if d, ok := svc.(interface{ Done() <-chan struct{} }); ok {
			s.watchers.Go(func() {
				select {
				case <-wctx.Done():
					return
				case <-d.Done():
				}
				s.mu.Lock()
				stopping := s.stopped
				s.mu.Unlock()
				if stopping || ctx.Err() != nil {
					// Stop, or the daemon's context ending (a shutdown),
					// ended it: not a failure.
					return
				}
				// Its error is Stop's, returned by the supervisor's Stop.
				s.logger.Error("service ended before stop; stopping the others", "ended_service", fmt.Sprintf("%T", svc))
				s.mu.Lock()
				defer s.mu.Unlock()
				_ = s.stopLocked()
			})
		}
	}
	s.mu.Unlock()
	return nil
}

// Done is closed once every service has stopped: after Stop, or after one
// service failed and the supervisor stopped the others.
func (s *Supervisor) Done() <-chan struct{} { return s.done }

// Stop stops the started services in reverse order, waiting for each, and
// returns their errors joined (the same errors on every call). It is
// idempotent and safe before Start.
func (s *Supervisor) Stop() error {
	s.mu.Lock()
	err := s.stopLocked()
	s.mu.Unlock()
	s.watchers.Wait()
	return err
}

func (s *Supervisor) stopLocked() error {
	if s.stopped {
		return s.err
	}
	s.stopped = true
	var errs []error
	for i := len(s.started) - 1; i >= 0; i-- {
		errs = append(errs, s.started[i].Stop())
	}
	if s.cancel != nil {
		s.cancel()
	}
	s.err = errors.Join(errs...)
	close(s.done)
	return s.err
}
