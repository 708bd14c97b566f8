package taskrunner

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"time"

	"github.com/lookout-dev/lookout/internal/tasks"
)

// executor runs one task.
type executor interface {
	// kind is command or webhook (task_runs.executor).
	kind() string
	// run executes the task; ctx ends at the execution's deadline.
	run(ctx context.Context, in input) output
}

// input is one execution.
type input struct {
	run      *tasks.Run
	record   map[string]any
	deadline time.Time
	// token is the attempt's report token (webhook executors).
	token string
	// json is the Payload.
	json []byte
}

// output is what an execution returned.
type output struct {
	// err is "" when the task completed, else why it failed, for
	// LastError.
	err string
	// retry says whether another attempt may help.
	retry bool
	// pending: the agent accepted the task and reports later (202).
	pending  bool
	exitCode *int
	result   json.RawMessage
	stderr   string
}

// Output limits.
const (
	stdoutMax = 64 << 10
	stderrMax = 4 << 10
)

// command runs an executable per task: the Payload on stdin; exit 0 with
// a JSON object on the last line of stdout completes the task.
type command struct {
	argv []string
}

func newCommand(argv []string) (*command, error) {
	if _, err := exec.LookPath(argv[0]); err != nil {
		return nil, fmt.Errorf("%q: %w", argv[0], err)
	}
	return &command{argv: argv}, nil
}

func (*command) kind() string { return "command" }

// passEnv are the variables of lookout's environment a command inherits.
var passEnv = []string{"PATH", "HOME", "LANG", "TZ", "TMPDIR"}

func (c *command) run(ctx context.Context, in input) output {
	cmd := exec.CommandContext(ctx, c.argv[0], c.argv[1:]...)
	cmd.Stdin = bytes.NewReader(in.json)
	var stdout, stderr tail
	stdout.max, stderr.max = stdoutMax, stderrMax
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	for _, k := range passEnv {
		if v, ok := os.LookupEnv(k); ok {
			cmd.Env = append(cmd.Env, k+"="+v)
		}
	}
	r := in.run
	cmd.Env = append(cmd.Env,
		"LOOKOUT_IDEMPOTENCY_KEY="+r.IdempotencyKey,
		"LOOKOUT_TASK_RUN_ID="+strconv.FormatInt(r.ID, 10),
		"LOOKOUT_RUN_ID="+r.RunID,
		"LOOKOUT_ATTEMPT="+strconv.Itoa(r.Attempt),
		"LOOKOUT_SOURCE="+r.Source,
		"LOOKOUT_TASK="+r.Task,
		"LOOKOUT_RECORD_ID="+r.RecordID,
		"LOOKOUT_DEADLINE="+in.deadline.UTC().Format(time.RFC3339),
	)
	killGroup(cmd)
	// Grandchildren that keep stdout open must not hold Wait forever.
	cmd.WaitDelay = time.Second
	// The parent death signal (Linux) follows the thread that started the
	// command: keep this goroutine on it until the command ends, so that
	// no other goroutine can end the thread (LockOSThread without unlock)
	// and kill the executor with it.
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	start := time.Now()
	err := cmd.Run()
	out := output{stderr: strings.TrimSpace(stderr.String())}
	if stderr.dropped > 0 {
		out.stderr = fmt.Sprintf("[truncated: the first %d bytes of stderr are not kept; the last %d follow]\n%s", stderr.dropped, stderrMax, out.stderr)
	}
	last := lastLine(stdout.String())
	// The last line began before the 64 KiB kept: the result was cut.
	cut := stdout.dropped > 0 && !strings.Contains(strings.TrimRight(stdout.String(), "\n"), "\n")
	var ee *exec.ExitError
	switch {
	case ctx.Err() != nil:
		out.err = fmt.Sprintf("%s did not finish within its time (%s, until %s); its process group was killed",
			c.argv[0], time.Since(start).Round(time.Millisecond), in.deadline.UTC().Format(time.RFC3339))
		out.retry = true
		return out
	case errors.As(err, &ee):
		code := ee.ExitCode()
		out.exitCode = &code
		if code < 0 {
			out.err = fmt.Sprintf("%s was killed: %v", c.argv[0], ee)
			out.retry = true
			return out
		}
		// A failing agent may say why, and that retrying cannot help:
		// {"error": "...", "retry": false} on its last line.
		var f struct {
			Error string `json:"error"`
			Retry *bool  `json:"retry"`
		}
		if json.Unmarshal([]byte(last), &f) == nil && strings.HasPrefix(last, "{") {
			out.result = json.RawMessage(last)
			out.retry = f.Retry == nil || *f.Retry
			if f.Error != "" {
				out.err = fmt.Sprintf("%s exited with status %d: %s", c.argv[0], code, clip(f.Error, 500))
				return out
			}
		} else {
			out.retry = true
		}
		out.err = fmt.Sprintf("%s exited with status %d%s", c.argv[0], code, stderrSuffix(out.stderr))
		return out
	case err != nil:
		out.err = fmt.Sprintf("%s could not run: %v", c.argv[0], err)
		out.retry = true
		return out
	}
	zero := 0
	out.exitCode = &zero
	// Exit 0 means the agent ran: whatever it printed, running it again
	// could do the work twice, so a missing or malformed result fails the
	// task for a person to look at instead of retrying it.
	switch {
	case cut:
		out.err = fmt.Sprintf("%s exited 0 but its result (the last line of its output) is over %d KiB, the most lookout keeps "+
			"(%d bytes printed); not retried, since it may have done its work: return a smaller object (a link to the rest)",
			c.argv[0], stdoutMax>>10, stdout.dropped+int64(stdout.buf.Len()))
	case last == "":
		out.err = fmt.Sprintf("%s exited 0 but printed no result (a JSON object on the last line of its output); "+
			"not retried, since it may have done its work%s", c.argv[0], stderrSuffix(out.stderr))
	case !json.Valid([]byte(last)) || !strings.HasPrefix(last, "{"):
		out.err = fmt.Sprintf("%s exited 0 but the last line of its output is not a JSON object (%q); "+
			"not retried, since it may have done its work", c.argv[0], clip(last, 200))
	default:
		out.result = json.RawMessage(last)
	}
	return out
}

func stderrSuffix(s string) string {
	if s == "" {
		return ""
	}
	return ": " + clip(lastLine(s), 500)
}

func clip(s string, n int) string {
	if r := []rune(s); len(r) > n {
		return string(r[:n-1]) + "…"
	}
	return s
}

// tail keeps the last max bytes written to it, and counts the bytes
// dropped before them.
type tail struct {
	buf     bytes.Buffer
	max     int
	dropped int64
}

func (b *tail) Write(p []byte) (int, error) {
	n := len(p)
	b.buf.Write(p)
	if over := b.buf.Len() - b.max; over > 0 {
		b.buf.Next(over)
		b.dropped += int64(over)
	}
	return n, nil
}

func (b *tail) String() string {
	return strings.ReplaceAll(strings.ToValidUTF8(b.buf.String(), "\uFFFD"), "\x00", "")
}
