package command

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"time"

	"github.com/lookout-dev/lookout/internal/notify"
)

// Options configure a command sink.
type Options struct {
	// Command is the executable and its arguments. Required.
	Command []string
	// Logger receives the command's standard output at debug level.
	Logger *slog.Logger
}

// Sink runs a local executable per notification with the payload
// JSON on standard input. Exit status 0 is success; any other status, or a
// command still running at the sink's timeout (its whole process group is
// killed), is a failed attempt that is retried. The command sees only PATH,
// HOME, LANG, TZ and TMPDIR of lookout's environment, plus:
//
//	LOOKOUT_NOTIFICATION_ID  notifications.id
//	LOOKOUT_DEDUPE_KEY       the dedupe key (the same on every attempt)
//	LOOKOUT_DELIVERY_ID      unique per attempt
//	LOOKOUT_ATTEMPT          1 on the first attempt
//	LOOKOUT_SINK, LOOKOUT_SOURCE, LOOKOUT_WATCH, LOOKOUT_URGENCY, LOOKOUT_TITLE
type Sink struct {
	opts Options
}

var _ notify.Sink = (*Sink)(nil)

// New returns a command sink. The executable must exist now.
func New(o Options) (*Sink, error) {
	if len(o.Command) == 0 || o.Command[0] == "" {
		return nil, errors.New("a command sink needs a command")
	}
	if _, err := exec.LookPath(o.Command[0]); err != nil {
		return nil, fmt.Errorf("command %q: %w", o.Command[0], err)
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	return &Sink{opts: o}, nil
}

// passEnv are the variables of lookout's environment a command inherits.
var passEnv = []string{"PATH", "HOME", "LANG", "TZ", "TMPDIR"}

// Deliver runs the command.
func (s *Sink) Deliver(ctx context.Context, n *notify.Notification) error {
	cmd := exec.CommandContext(ctx, s.opts.Command[0], s.opts.Command[1:]...)
	cmd.Stdin = bytes.NewReader(n.JSON())
	var stdout, stderr limitedBuffer
	stdout.max, stderr.max = 4096, 4096
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	for _, k := range passEnv {
		if v, ok := os.LookupEnv(k); ok {
			cmd.Env = append(cmd.Env, k+"="+v)
		}
	}
	cmd.Env = append(cmd.Env,
		"LOOKOUT_NOTIFICATION_ID="+strconv.FormatInt(n.ID, 10),
		"LOOKOUT_DEDUPE_KEY="+n.DedupeKey,
		"LOOKOUT_DELIVERY_ID="+n.DeliveryID,
		"LOOKOUT_ATTEMPT="+strconv.Itoa(n.Attempt),
		"LOOKOUT_SINK="+n.Sink,
		"LOOKOUT_SOURCE="+n.Source,
		"LOOKOUT_WATCH="+n.Watch,
		"LOOKOUT_URGENCY="+n.Urgency,
		"LOOKOUT_TITLE="+n.Title,
	)
	killGroup(cmd)
	// Grandchildren that keep stdout open must not hold Wait forever.
	cmd.WaitDelay = time.Second
	start := time.Now()
	err := cmd.Run()
	if out := strings.TrimSpace(stdout.String()); out != "" {
		s.opts.Logger.Debug("command output", "notification_id", n.ID, "stdout", notify.Snippet(out, 1000))
	}
	if err == nil {
		return nil
	}
	if ctx.Err() != nil {
		return fmt.Errorf("command %s killed after %s: %w", s.opts.Command[0], time.Since(start).Round(time.Millisecond), ctx.Err())
	}
	msg := strings.TrimSpace(stderr.String())
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return fmt.Errorf("command %s exited with status %d: %s", s.opts.Command[0], ee.ExitCode(), notify.Snippet(msg, 500))
	}
	return fmt.Errorf("command %s: %w", s.opts.Command[0], err)
}

// limitedBuffer keeps the last max bytes written to it.
type limitedBuffer struct {
	buf bytes.Buffer
	max int
}

func (b *limitedBuffer) Write(p []byte) (int, error) {
	n := len(p)
	b.buf.Write(p)
	if over := b.buf.Len() - b.max; over > 0 {
		b.buf.Next(over)
	}
	return n, nil
}

func (b *limitedBuffer) String() string { return b.buf.String() }
