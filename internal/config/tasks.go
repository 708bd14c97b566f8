package config

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/lookout-dev/lookout/internal/normalize"
)

// Defaults of a task watch (docs/tasks.md).
const (
	TaskTakeDefault        = 1
	TaskLeaseDefault       = 30 * time.Minute
	TaskTimeoutDefault     = 10 * time.Minute
	TaskMaxAttemptsDefault = 3
	TaskBackoffMinDefault  = time.Minute
	TaskBackoffMaxDefault  = time.Hour
	TaskOnExpiryDefault    = "retry"
)

// Defaults of the task runner's maintenance (syncer.tasks_interval and
// syncer.tasks_grace in lookout.yaml; docs/tasks.md#recovery).
const (
	TasksIntervalDefault = 15 * time.Second
	TasksGraceDefault    = 30 * time.Second
)

// TaskOrderDefault is the order of eligible tasks when a task watch sets
// none: oldest first.
var TaskOrderDefault = []string{"created_at asc"}

// Task is a task watch, one entry of a source's tasks: the records for
// which When is true are tasks; after every run of the source, the
// syncer's task runner claims up to Take of them in Order (in PostgreSQL
// first, then visibly in the tool), has each executed once by its
// executor (Command or Webhook) and moves it to a terminal state in the
// tool. The source's connector must be able to act (notion, github with
// their task: blocks). See docs/tasks.md.
type Task struct {
	// Name identifies the task watch within its source; it is the action
	// of the idempotency key. Required.
	Name string `yaml:"name"`
	// When is the eligibility condition over record and source, e.g.
	// record.status == "Todo" (type-checked like every condition).
	// Required.
	When string `yaml:"when"`
	// Order sorts the eligible tasks: record fields (created_at,
	// extra.priority), each optionally followed by asc or desc; missing
	// values sort last, the record id breaks ties. Defaults to
	// [created_at asc].
	Order []string `yaml:"order"`
	// Take is the most tasks claimed per pass (one pass after every run of
	// the source). Defaults to 1.
	Take int `yaml:"take"`
	// Lease is how long a claim lasts: ClaimExpiresAt in the tool. A claim
	// not finished by then is recovered per OnExpiry. Defaults to 30m.
	Lease time.Duration `yaml:"lease"`
	// Timeout bounds one execution; the command's process group is killed
	// and the webhook request cancelled at it. It must be shorter than
	// Lease. Defaults to 10m, or half the lease when that is shorter.
	Timeout time.Duration `yaml:"timeout"`
	// MaxAttempts is the number of executions a task version gets before
	// it is Failed. Defaults to 3.
	MaxAttempts int `yaml:"max_attempts"`
	// Backoff spaces the retries of a task: the n-th failure waits about
	// min·2^(n-1), at most max, before the task is eligible again.
	// Defaults to {min: 1m, max: 1h}.
	Backoff *TaskBackoff `yaml:"backoff"`
	// OnExpiry is what an expired claim becomes: retry (back to todo, one
	// more failure counted) or fail. Defaults to retry.
	OnExpiry string `yaml:"on_expiry"`
	// Command is the executor's argv: the task as JSON on stdin, exit 0
	// and a JSON object on the last line of stdout complete it. Exactly
	// one of command and webhook is required.
	Command []string `yaml:"command"`
	// Webhook posts the task, signed the Standard Webhooks way; a 2xx with
	// a JSON object completes it, a 202 means the agent reports back
	// through the API. Exactly one of command and webhook is required.
	Webhook *TaskWebhook `yaml:"webhook"`
	// Review has the evaluator score a successful result against
	// acceptance criteria before the task is Complete; a failing result
	// is sent back (docs/tasks.md#review). Defaults to none.
	Review *Review `yaml:"review"`
}

// TaskBackoff spaces the retries of a task.
type TaskBackoff struct {
	// Min is the wait after the first failure. Defaults to 1m.
	Min time.Duration `yaml:"min"`
	// Max caps the wait. Defaults to 1h.
	Max time.Duration `yaml:"max"`
}

// TaskWebhook is the webhook executor of a task watch.
type TaskWebhook struct {
	// URL receives the task as a POST (http or https). Required.
	URL string `yaml:"url"`
	// Secret signs the request (webhook-id, webhook-timestamp,
	// webhook-signature): "whsec_<base64 key>" or any string used as the
	// key as written; write it as ${ENV_VAR}. Required.
	Secret string `yaml:"secret"`
	// Headers are extra request headers; values may use ${ENV}. Defaults
	// to none.
	Headers map[string]string `yaml:"headers"`
}

// TaskOrder is one parsed order key.
type TaskOrder struct {
	// Field is the record path (created_at, extra.priority).
	Field string
	// Desc sorts larger values first.
	Desc bool
}

// ParseTaskOrder parses one order entry: a field, optionally followed by
// asc or desc.
func ParseTaskOrder(s string) (TaskOrder, error) {
	f := strings.Fields(s)
	switch {
	case len(f) == 1:
		return TaskOrder{Field: f[0]}, nil
	case len(f) == 2 && (strings.EqualFold(f[1], "asc") || strings.EqualFold(f[1], "desc")):
		return TaskOrder{Field: f[0], Desc: strings.EqualFold(f[1], "desc")}, nil
	}
	return TaskOrder{}, fmt.Errorf("must be a record field optionally followed by asc or desc (e.g. \"extra.priority desc\"), not %q", s)
}

// validateTasks applies the task watches' defaults and checks them.
func (s *Source) validateTasks() []error {
	var errs []error
	seen := map[string]bool{}
	for i, t := range s.Tasks {
		key := fmt.Sprintf("tasks[%d]", i)
		bad := func(k, format string, args ...any) { errs = append(errs, s.Errorf(key+k, format, args...)) }
		if t == nil {
			bad("", "is empty")
			continue
		}
		switch {
		case t.Name == "":
			bad(".name", "is required")
		case !nameRE.MatchString(t.Name):
			bad(".name", "%q is not a valid name (letters, digits, '-', '_', '.')", t.Name)
		case seen[t.Name]:
			bad(".name", "%q is used by another task watch of this source", t.Name)
		}
		seen[t.Name] = true
		t.When = strings.TrimSpace(t.When)
		if t.When == "" {
			bad(".when", "is required: which records are tasks (e.g. record.status == \"Todo\")")
		} else {
			_, err := normalize.CompileTaskWhen(t.When, s.Fields.Exprs())
			errs = append(errs, s.exprErrors(key+".when", err)...)
		}
		if len(t.Order) == 0 {
			t.Order = slices.Clone(TaskOrderDefault)
		}
		for j, o := range t.Order {
			k := fmt.Sprintf(".order[%d]", j)
			p, err := ParseTaskOrder(o)
			if err != nil {
				bad(k, "%v", err)
				continue
			}
			if err := normalize.CheckRecordPath(p.Field, s.Fields.Exprs()); err != nil {
				bad(k, "%v", err)
			}
		}
		if t.Take < 0 {
			bad(".take", "must be positive")
		}
		t.Take = cmp.Or(t.Take, TaskTakeDefault)
		if t.Lease < 0 {
			bad(".lease", "must be positive")
		}
		t.Lease = cmp.Or(t.Lease, TaskLeaseDefault)
		if t.Timeout < 0 {
			bad(".timeout", "must be positive")
		}
		if t.Timeout == 0 {
			t.Timeout = min(TaskTimeoutDefault, t.Lease/2)
		}
		if t.Timeout >= t.Lease && t.Lease > 0 {
			bad(".timeout", "(%s) must be shorter than the lease (%s): a claim must not expire while its task runs", t.Timeout, t.Lease)
		}
		if t.MaxAttempts < 0 {
			bad(".max_attempts", "must be >= 1")
		}
		t.MaxAttempts = cmp.Or(t.MaxAttempts, TaskMaxAttemptsDefault)
		if t.Backoff == nil {
			t.Backoff = &TaskBackoff{}
		}
		if t.Backoff.Min < 0 || t.Backoff.Max < 0 {
			bad(".backoff", "min and max must be positive")
		}
		t.Backoff.Min = cmp.Or(t.Backoff.Min, TaskBackoffMinDefault)
		t.Backoff.Max = cmp.Or(t.Backoff.Max, max(TaskBackoffMaxDefault, t.Backoff.Min))
		if t.Backoff.Min > t.Backoff.Max {
			bad(".backoff.min", "must not exceed backoff.max")
		}
		t.OnExpiry = cmp.Or(t.OnExpiry, TaskOnExpiryDefault)
		if t.OnExpiry != "retry" && t.OnExpiry != "fail" {
			bad(".on_expiry", "must be retry or fail, not %q", t.OnExpiry)
		}
		switch {
		case len(t.Command) == 0 && t.Webhook == nil:
			bad("", "needs an executor: command (argv) or webhook (url, secret)")
		case len(t.Command) > 0 && t.Webhook != nil:
			bad(".command", "and webhook are exclusive: set one executor")
		case len(t.Command) > 0 && strings.TrimSpace(t.Command[0]) == "":
			bad(".command[0]", "is empty: the executable to run")
		case t.Webhook != nil:
			w := t.Webhook
			switch {
			case w.URL == "":
				bad(".webhook.url", "is required")
			case !strings.HasPrefix(w.URL, "http://") && !strings.HasPrefix(w.URL, "https://"):
				bad(".webhook.url", "must start with http:// or https://")
			}
			if w.Secret == "" {
				bad(".webhook.secret", "is required (as ${ENV_VAR}): the agent verifies the task came from lookout")
			} else if msg := CheckWebhookSecret(w.Secret); msg != "" {
				bad(".webhook.secret", "%s", msg)
			}
			for k, v := range w.Headers {
				if k == "" || strings.ContainsAny(k, " :\r\n\t") {
					bad(".webhook.headers."+k, "is not a valid header name")
				}
				if strings.ContainsAny(v, "\r\n") {
					bad(".webhook.headers."+k, "value contains a line break")
				}
			}
		}
		errs = append(errs, s.validateReview(key, t.Review)...)
	}
	return errs
}
