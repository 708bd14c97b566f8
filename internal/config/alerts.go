package config

import (
	"cmp"
	"fmt"
	"strings"
	"time"
)

// Defaults of the alerts block.
const (
	AlertsIntervalDefault = time.Minute
	// StaleAfterFloor is the shortest stale window a source gets by
	// default, however short its interval.
	StaleAfterFloor = 5 * time.Minute
	// StaleAfterFactor multiplies a source's longest interval into its
	// default stale window.
	StaleAfterFactor = 3
	// LateAfterDefault is alerts.late_after when lookout.yaml does not set it.
	LateAfterDefault = time.Minute
)

// Alerts configures the watchdog: one evaluator replica at a time checks,
// every interval, for sources without a successful run within their stale
// window, runs whose lease expired or that run past
// sources.stuck_after_seconds, notifications that became dead, and
// sources that were disabled; each problem is sent once to the alert
// sinks (an outbox row of kind alert, with a dedupe key per problem).
type Alerts struct {
	// Enabled turns the watchdog on. Defaults to true when alerts have a
	// sink (alerts.notify or defaults.notify), else false.
	Enabled *bool `yaml:"enabled"`
	// Notify lists the sinks alerts go to; include one that does not
	// depend on the others (log), so that an alert about a dead sink has
	// somewhere to go. Defaults to defaults.notify.
	Notify []string `yaml:"notify"`
	// Interval is how often the watchdog checks, at least 1s. Defaults to 1m.
	Interval time.Duration `yaml:"interval"`
	// StaleAfter is how long any source may go without a successful run
	// before it is stale; a source's own stale_after wins. Defaults to
	// three times each source's longest interval, and at least 5m.
	StaleAfter time.Duration `yaml:"stale_after"`
	// LateAfter raises an alert when the 99th percentile of how late the
	// active sources run — each source's worst lateness of the last hour,
	// or how long it is overdue now — passes it: the syncers do not keep
	// up. A negative value turns the check off. Defaults to 1m.
	LateAfter time.Duration `yaml:"late_after"`
}

// On reports whether the watchdog runs.
func (a *Alerts) On() bool { return a.Enabled == nil || *a.Enabled }

func (a *Alerts) applyDefaults(g *Global) []error {
	var errs []error
	explicit := a.Enabled != nil && *a.Enabled
	a.Interval = cmp.Or(a.Interval, AlertsIntervalDefault)
	if a.Interval < time.Second {
		errs = append(errs, g.Errorf("alerts.interval", "must be at least 1s, not %s", a.Interval))
	}
	if a.StaleAfter < 0 {
		errs = append(errs, g.Errorf("alerts.stale_after", "must be positive"))
	}
	a.LateAfter = cmp.Or(a.LateAfter, LateAfterDefault)
	set := len(a.Notify) > 0
	if !set {
		a.Notify = append([]string(nil), g.Defaults.Notify...)
	}
	if a.Enabled == nil {
		// Without a sink to send them to, alerts are off unless asked for.
		on := len(a.Notify) > 0
		a.Enabled = &on
	}
	if len(a.Notify) == 0 && explicit {
		errs = append(errs, g.Errorf("alerts.notify", "is required: alerts.enabled is true and defaults.notify names no sink (declared: %s)", strings.Join(sinkNames(g), ", ")))
	}
	if !set {
		return errs // defaults.notify is checked where it is set
	}
	return append(errs, g.checkSinkNames("alerts.notify", a.Notify)...)
}

// StaleAfterFor returns how long source s may go without a successful run
// before the watchdog alerts: the source's stale_after, else
// alerts.stale_after, else StaleAfterFactor times the source's longest
// interval (every plus jitter, adaptive.max plus jitter, or the longest
// gap between the next 64 ticks of its cron schedule after now), and at
// least StaleAfterFloor.
func (a *Alerts) StaleAfterFor(s *Source, now time.Time) time.Duration {
	if s.StaleAfter > 0 {
		return s.StaleAfter
	}
	if a.StaleAfter > 0 {
		return a.StaleAfter
	}
	var gap time.Duration
	switch {
	case s.Cron != "":
		sched, err := ParseCron(s.Cron)
		if err != nil {
			return StaleAfterFloor
		}
		loc, err := time.LoadLocation(s.Timezone)
		if err != nil {
			loc = time.UTC
		}
		t := now.In(loc)
		for range 64 {
			next := sched.Next(t)
			if next.IsZero() {
				break
			}
			gap = max(gap, next.Sub(t))
			t = next
		}
	case s.Adaptive != nil:
		gap = s.Adaptive.Max
	default:
		gap = s.Every
	}
	if s.Jitter != nil && s.Cron == "" {
		gap += *s.Jitter
	}
	return max(StaleAfterFactor*gap, StaleAfterFloor)
}

// checkSinkNames checks a list of sink names written at key: each one
// declared in lookout.yaml, none twice.
func (g *Global) checkSinkNames(key string, names []string) []error {
	var errs []error
	seen := map[string]bool{}
	for i, n := range names {
		k := fmt.Sprintf("%s[%d]", key, i)
		switch {
		case g.Sinks[n] == nil:
			errs = append(errs, g.Errorf(k, "names sink %q, which lookout.yaml does not declare (declared: %s)", n, strings.Join(sinkNames(g), ", ")))
		case seen[n]:
			errs = append(errs, g.Errorf(k, "names sink %q twice", n))
		}
		seen[n] = true
	}
	return errs
}
