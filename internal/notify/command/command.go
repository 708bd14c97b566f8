// Package command is the command sink type (type: command): an executable
// run per notification with the payload on standard input
// (docs/delivery.md, "### command"). It owns the key command, its check,
// and the running of the command (Sink).
package command

import (
	"github.com/lookout-dev/lookout/internal/config"
	"github.com/lookout-dev/lookout/internal/notify"
)

// Settings are the keys of a command sink.
type Settings struct {
	// Command is the executable and its arguments; the payload arrives on
	// standard input. Required.
	Command []string `yaml:"command"`
}

func init() {
	notify.Register("command", Decode, func(_ *config.Sink, st Settings, env notify.Env) (notify.Sink, error) {
		return New(Options{Command: st.Command, Logger: env.Logger})
	})
}

// Decode reads and checks the keys of a command sink.
func Decode(s *config.Sink) (Settings, error) {
	var st Settings
	if err := s.DecodeBlock(&st); err != nil {
		return st, err
	}
	if len(st.Command) == 0 || st.Command[0] == "" {
		return st, s.Errorf("command", "is required for a command sink (the executable and its arguments)")
	}
	return st, nil
}
