package db

import "github.com/lookout-dev/lookout/internal/testsignal"

// ListeningSignal makes l's after-every-LISTEN signal live for tb and
// returns it; call it before Start.
func (l *Listener) ListeningSignal(tb testsignal.TB) *testsignal.Signal[struct{}] {
	l.testSignals.listening.Init(tb)
	return &l.testSignals.listening
}

// Buffered is the capacity of the buffer c encodes rows into.
func (c *CopyIn) Buffered() int { return cap(c.buf) }
