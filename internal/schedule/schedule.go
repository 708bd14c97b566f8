// Package schedule decides when a source runs next: on a fixed interval
// with jitter (`every`), on a cron expression in a time zone (`cron` +
// `timezone`), or on an adaptive interval that shortens after changes and
// lengthens while nothing changes (`adaptive: {min, max}`); after failures
// it backs off exponentially with jitter and a cap.
//
// Every decision is computed from the time the run ended, never from the
// slots a stopped syncer missed: a source that was overdue by a day runs
// once and is then scheduled from now. Each decision carries the interval
// it chose and a sentence saying why, which the syncer stores in
// sources.interval_seconds and sources.interval_reason.
//
// The package is pure: it reads no clock and touches no database, so every
// rule is tested with fixed times.
package schedule

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"time"

	"github.com/robfig/cron/v3"

	"github.com/lookout-dev/lookout/internal/service"
)

// cronParser accepts standard five-field expressions (minute, hour, day of
// month, month, day of week) and the descriptors @yearly, @monthly,
// @weekly, @daily, @hourly and @every.
var cronParser = cron.NewParser(cron.Minute | cron.Hour | cron.Dom | cron.Month | cron.Dow | cron.Descriptor)

// ParseCron parses a cron expression with lookout's one cron syntax (the
// sources' cron, the digests' and the alerts' cron). The schedule reads the
// expression in the location of the time given to Next (pass now.In(zone)),
// and keeps cron's rule across a DST change (wallSchedule): a slot at a
// fixed hour that the change skips runs when the gap ends, and one it
// repeats runs once; a schedule with every hour (`*` in the hour field)
// runs every real hour.
func ParseCron(expr string) (cron.Schedule, error) {
	sched, err := cronParser.Parse(expr)
	if err != nil {
		return nil, err
	}
	spec, ok := sched.(*cron.SpecSchedule)
	if !ok {
		return sched, nil // @every: a fixed interval, no calendar
	}
	local := *spec
	local.Location = time.Local // robfig/cron: read in the location of the time given
	if spec.Hour&starBit != 0 {
		return &local, nil
	}
	wall := *spec
	wall.Location = time.UTC
	return wallSchedule{wall: &wall}, nil
}

// starBit is robfig/cron's mark of a field written `*` (its parser's
// starBit, unexported).
const starBit = 1 << 63

// wallSchedule is a cron schedule at fixed hours read on the wall clock of
// the location of the time given to Next, with cron's rule for DST
// changes. robfig/cron alone steps through real time, so a daily 02:30 in
// Europe/Paris never fires on the day clocks go from 02:00 to 03:00 (the
// next run is a day later) and fires twice on the day 02:00-03:00 is
// repeated (the second a one-hour digest period). Here the slots are found
// on the wall clock (the expression read in UTC, which has no DST) and each
// becomes the first instant that shows it: a slot the change skips becomes
// the end of the gap, and a slot shown twice fires at its first showing
// only.
type wallSchedule struct {
	// wall is the expression with Location UTC: its Next steps through
	// wall-clock times.
	wall *cron.SpecSchedule
}

// Next returns the first slot after t, in t's location.
func (w wallSchedule) Next(t time.Time) time.Time {
	loc := t.Location()
	from := wallClock(t)
	// A slot whose first showing is not after t (t is in a repeated hour,
	// or at the end of a gap several slots map to) is passed; an hour
	// holds at most 60 slots of a five-field expression.
	for range 200 {
		slot := w.wall.Next(from)
		if slot.IsZero() {
			return slot
		}
		if at := firstShowing(slot, loc); at.After(t) {
			return at
		}
		from = slot
	}
	return time.Time{}
}

// wallClock returns the wall-clock reading of t as a UTC time.
func wallClock(t time.Time) time.Time {
	return time.Date(t.Year(), t.Month(), t.Day(), t.Hour(), t.Minute(), t.Second(), t.Nanosecond(), time.UTC)
}

// firstShowing returns the first instant whose wall clock in loc reads
// slot (a wall-clock time written in UTC), or, for a reading a DST change
// skips, the instant the gap ends.
func firstShowing(slot time.Time, loc *time.Location) time.Time {
	var first time.Time
	// The offsets in force a day and a half either side: the two sides of
	// any change that day.
	for _, probe := range []time.Time{slot.Add(-36 * time.Hour), slot.Add(36 * time.Hour)} {
		_, off := probe.In(loc).Zone()
		at := slot.Add(-time.Duration(off) * time.Second).In(loc)
		if wallClock(at).Equal(slot) && (first.IsZero() || at.Before(first)) {
			first = at
		}
	}
	if !first.IsZero() {
		return first
	}
	// In the gap: read with the offset before the change, it is an instant
	// after the change, whose zone starts when the gap ends.
	_, before := slot.Add(-36 * time.Hour).In(loc).Zone()
	start, _ := slot.Add(-time.Duration(before) * time.Second).In(loc).ZoneBounds()
	return start.In(loc)
}

// Bounds are the limits of an adaptive interval.
type Bounds struct {
	Min, Max time.Duration
}

// Clamp returns d limited to [b.Min, b.Max].
func (b Bounds) Clamp(d time.Duration) time.Duration {
	return min(max(d, b.Min), b.Max)
}

// Spec is the schedule part of a source's configuration.
type Spec struct {
	// Every is the fixed interval; ignored when Cron is set.
	Every time.Duration
	// Jitter is the upper bound of a random delay added to every run.
	Jitter time.Duration
	// Cron is a five-field cron expression or a descriptor such as @daily.
	Cron string
	// Timezone is the IANA zone Cron is read in. Defaults to UTC.
	Timezone string
	// Adaptive, when set, lets the interval move within the bounds.
	Adaptive *Bounds
}

// Schedule is a parsed Spec.
type Schedule struct {
	spec     Spec
	cron     cron.Schedule
	loc      *time.Location
	jitterFn func(time.Duration) time.Duration
}

// Decision is when a source runs next and why.
type Decision struct {
	// At is the time of the next run.
	At time.Time
	// Interval is the interval the decision used (for cron, the time until
	// At); stored in sources.interval_seconds.
	Interval time.Duration
	// Reason says why, for sources.interval_reason and the logs.
	Reason string
}

// SpecError is a problem with one setting of a Spec. Key names the setting
// as a source file spells it (every, jitter, cron, timezone, adaptive), so
// that callers locate the error with errors.As.
type SpecError struct {
	Key string
	Err error
}

func (e *SpecError) Error() string { return e.Key + " " + e.Err.Error() }
func (e *SpecError) Unwrap() error { return e.Err }

func specError(key, format string, args ...any) error {
	return &SpecError{Key: key, Err: fmt.Errorf(format, args...)}
}

// New parses spec. Errors are *SpecError naming the offending setting, so
// that callers can locate them in the source file.
func New(spec Spec) (*Schedule, error) {
	s := &Schedule{spec: spec, jitterFn: randomJitter}
	if spec.Jitter < 0 {
		return nil, specError("jitter", "must not be negative")
	}
	if spec.Cron != "" {
		expr := strings.TrimSpace(spec.Cron)
		if strings.HasPrefix(expr, "TZ=") || strings.HasPrefix(expr, "CRON_TZ=") {
			return nil, specError("cron", "%q: set the zone with timezone, not inside the expression", spec.Cron)
		}
		if strings.HasPrefix(expr, "@every") {
			return nil, specError("cron", "%q: use every for fixed intervals", spec.Cron)
		}
		if spec.Adaptive != nil {
			return nil, specError("adaptive", "needs an every schedule, not cron")
		}
		tz := spec.Timezone
		if tz == "" {
			tz = "UTC"
		}
		loc, err := time.LoadLocation(tz)
		if err != nil {
			return nil, specError("timezone", "%q is not a known time zone: %w", tz, err)
		}
		sched, err := ParseCron(expr)
		if err != nil {
			return nil, specError("cron", "%q: %w", spec.Cron, err)
		}
		// A spec that can never fire (30 February) would leave the source
		// silently idle: refuse it.
		if sched.Next(time.Date(2000, 1, 1, 0, 0, 0, 0, loc)).IsZero() {
			return nil, specError("cron", "%q never fires", spec.Cron)
		}
		s.cron, s.loc = sched, loc
		return s, nil
	}
	if spec.Every <= 0 {
		return nil, specError("every", "must be positive")
	}
	if a := spec.Adaptive; a != nil {
		if a.Min <= 0 || a.Max <= 0 || a.Min > a.Max {
			return nil, specError("adaptive", "needs 0 < min <= max, got min %s max %s", a.Min, a.Max)
		}
	}
	return s, nil
}

// MustNew is New that panics; for tests and constants.
func MustNew(spec Spec) *Schedule {
	s, err := New(spec)
	if err != nil {
		panic(err)
	}
	return s
}

// WithJitter returns a copy of s that draws jitter from fn (given the
// configured upper bound, it returns a delay in [0, bound)). Tests use it
// to make jitter deterministic.
func (s *Schedule) WithJitter(fn func(bound time.Duration) time.Duration) *Schedule {
	c := *s
	c.jitterFn = fn
	return &c
}

// IsCron reports whether s is a cron schedule.
func (s *Schedule) IsCron() bool { return s.cron != nil }

// Adaptive returns the adaptive bounds, or nil.
func (s *Schedule) Adaptive() *Bounds { return s.spec.Adaptive }

// String describes the schedule for sources.schedule.
func (s *Schedule) String() string {
	if s.cron != nil {
		str := fmt.Sprintf("cron %q in %s", s.spec.Cron, s.loc)
		if s.spec.Jitter > 0 {
			str += " jitter " + s.spec.Jitter.String()
		}
		return str
	}
	str := "every " + s.spec.Every.String()
	if s.spec.Jitter > 0 {
		str += " jitter " + s.spec.Jitter.String()
	}
	if a := s.spec.Adaptive; a != nil {
		str += fmt.Sprintf(" adaptive %s..%s", a.Min, a.Max)
	}
	return str
}

// Initial is the interval a newly registered (or reconfigured) source
// starts with: every, clamped to the adaptive bounds. It is 0 for cron.
func (s *Schedule) Initial() time.Duration {
	if s.cron != nil {
		return 0
	}
	if a := s.spec.Adaptive; a != nil {
		return a.Clamp(s.spec.Every)
	}
	return s.spec.Every
}

// First is the first run of a newly registered source: a random point in
// [now, now+jitter) for an interval schedule, so that sources registered
// together do not fire together, or the next cron slot.
func (s *Schedule) First(now time.Time) Decision {
	if s.cron != nil {
		return s.cronNext(now, "first run at the next cron slot")
	}
	j := s.jitter()
	return Decision{At: now.Add(j), Interval: s.Initial(),
		Reason: fmt.Sprintf("registered; first run after %s of jitter", round(j))}
}

// Run describes the run that just ended, for Next.
type Run struct {
	// Interval is the source's current interval (sources.interval_seconds);
	// 0 means unknown and is read as the initial interval.
	Interval time.Duration
	// Changes is the number of records the run created, updated or deleted.
	Changes int
	// Quiet is how long the source has had no change (now minus
	// sources.last_change_at, or since it was registered).
	Quiet time.Duration
	// MinInterval is a lower bound the upstream asked for (feed ttl,
	// X-Poll-Interval), or 0.
	MinInterval time.Duration
	// Due is when the run was due (the source's next_run_at when it was
	// claimed), or zero when unknown. Next counts the interval from it
	// while the run ended within one interval of it, so that a source
	// every 1m runs sixty times an hour however late each run started.
	Due time.Time
}

// Next schedules the run after a successful (or not-modified) run that
// ended at now.
//
// An interval schedule keeps its cadence: the next run is due one
// interval after this one was due (r.Due), moved by a random amount
// within ±jitter/2, so that runs are every apart on average and the
// sources do not fire together. It counts from now instead when the run
// ended more than an interval after it was due (an overdue source runs
// once and is not made to catch up on the slots it missed), when the due
// time is unknown, and when the upstream asked for a minimum interval
// longer than the schedule's; a run is never due sooner after this one
// ended than a minimum interval the upstream asked for.
func (s *Schedule) Next(now time.Time, r Run) Decision {
	if s.cron != nil {
		d := s.cronNext(now, "")
		if r.MinInterval > 0 && d.At.Before(now.Add(r.MinInterval)) {
			d = s.cronNext(now.Add(r.MinInterval), "")
			d.Reason = fmt.Sprintf("upstream asked for at least %s; %s", r.MinInterval, d.Reason)
			d.Interval = d.At.Sub(now)
		}
		return d
	}
	interval, reason := s.spec.Every, "every "+s.spec.Every.String()
	if a := s.spec.Adaptive; a != nil {
		interval, reason = s.adapt(*a, r)
	}
	floored := false
	if r.MinInterval > interval {
		floor := r.MinInterval
		if a := s.spec.Adaptive; a != nil && floor > a.Max {
			floor = a.Max
		}
		if floor > interval {
			reason = fmt.Sprintf("upstream asked for at least %s (%s)", r.MinInterval, reason)
			interval, floored = floor, true
		}
	}
	j := s.jitter()
	if floored || r.Due.IsZero() || !r.Due.Add(interval).After(now) {
		return Decision{At: now.Add(interval + j), Interval: interval, Reason: reason}
	}
	// Centred on the slot: the jitter spreads the runs without making the
	// average interval longer than every.
	at := r.Due.Add(interval + j - s.spec.Jitter/2)
	if at.Before(now) {
		at = now
	}
	if floor := now.Add(r.MinInterval); at.Before(floor) {
		at = floor // never sooner than the upstream asked
	}
	return Decision{At: at, Interval: interval, Reason: reason}
}

// adapt moves the interval: halved after a run that saw changes, and while
// nothing changes, half the time since the last change (never shorter than
// it was), always within the bounds. A source that changes about every T
// settles near T/2 between checks; one that went quiet slows down by about
// half again per run until it reaches max.
func (s *Schedule) adapt(b Bounds, r Run) (time.Duration, string) {
	cur := r.Interval
	if cur <= 0 {
		cur = s.Initial()
	}
	cur = b.Clamp(cur)
	bounds := fmt.Sprintf("adaptive %s..%s", b.Min, b.Max)
	if r.Changes > 0 {
		next := b.Clamp(cur / 2)
		verb := "halved"
		if next == cur {
			verb = "kept at the minimum"
		}
		return next, fmt.Sprintf("%d change(s) in the last run: interval %s from %s to %s (%s)",
			r.Changes, verb, round(cur), round(next), bounds)
	}
	next := b.Clamp(max(cur, r.Quiet/2))
	switch {
	case next == cur && cur == b.Max:
		return next, fmt.Sprintf("no change for %s: interval kept at the maximum %s (%s)", round(r.Quiet), round(next), bounds)
	case next == cur:
		return next, fmt.Sprintf("no change for %s: interval kept at %s until the quiet time exceeds twice it (%s)", round(r.Quiet), round(next), bounds)
	default:
		return next, fmt.Sprintf("no change for %s: interval lengthened from %s to %s, half the quiet time (%s)", round(r.Quiet), round(cur), round(next), bounds)
	}
}

// Backoff spaces the runs of a failing source: service.Backoff, the one
// formula (Min after the first failure, doubling, capped at Max).
type Backoff = service.Backoff

// Retry schedules the run after the n-th consecutive failure, ending at
// now: a random point in [d/2, d) for d = b.Cap(n) ("equal jitter": the
// delay keeps growing while replicas and sources spread out). An interval
// source is never retried sooner than its interval, so a failing source is
// never polled more often than a healthy one; a cron source is retried on
// the backoff or at its next slot, whichever comes first.
func (s *Schedule) Retry(now time.Time, n int, b Backoff, r Run) Decision {
	d := b.Cap(n)
	wait := d/2 + s.jitterFn(d/2)
	reason := fmt.Sprintf("backoff after %d consecutive failure(s): %s (cap %s)", n, round(d), b.Max)
	if s.cron != nil {
		slot := s.cronNext(now, "")
		if slot.At.Before(now.Add(wait)) {
			slot.Reason = fmt.Sprintf("%s; next cron slot comes first", reason)
			return slot
		}
		return Decision{At: now.Add(wait), Interval: wait, Reason: reason}
	}
	interval := s.spec.Every
	if a := s.spec.Adaptive; a != nil {
		interval = s.Initial()
		if r.Interval > 0 {
			interval = a.Clamp(r.Interval)
		}
	}
	if wait < interval {
		return Decision{At: now.Add(interval + s.jitter()), Interval: interval,
			Reason: fmt.Sprintf("%s, shorter than the interval %s: next run on the interval", reason, round(interval))}
	}
	return Decision{At: now.Add(wait), Interval: wait, Reason: reason}
}

// Deferred schedules the run the upstream asked to postpone until at.
func Deferred(now, at time.Time, why string) Decision {
	if at.Before(now) {
		at = now
	}
	return Decision{At: at, Interval: at.Sub(now),
		Reason: fmt.Sprintf("deferred: %s; resumes from its cursor at %s", why, at.UTC().Format(time.RFC3339))}
}

func (s *Schedule) cronNext(now time.Time, prefix string) Decision {
	at := s.cron.Next(now.In(s.loc))
	j := s.jitter()
	reason := fmt.Sprintf("cron %q in %s: next slot %s", s.spec.Cron, s.loc, at.Format("2006-01-02 15:04 MST"))
	if j > 0 {
		reason += fmt.Sprintf(" + %s jitter", round(j))
	}
	if prefix != "" {
		reason = prefix + ": " + reason
	}
	at = at.Add(j)
	return Decision{At: at, Interval: at.Sub(now), Reason: reason}
}

func (s *Schedule) jitter() time.Duration {
	if s.spec.Jitter <= 0 {
		return 0
	}
	return s.jitterFn(s.spec.Jitter)
}

func randomJitter(bound time.Duration) time.Duration {
	if bound <= 0 {
		return 0
	}
	return rand.N(bound)
}

// round shortens a duration for reasons: whole seconds above a second.
func round(d time.Duration) time.Duration {
	if d > time.Second {
		return d.Round(time.Second)
	}
	return d.Round(time.Millisecond)
}
