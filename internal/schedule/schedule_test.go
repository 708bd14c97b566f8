package schedule

import (
	"math/rand/v2"
	"strings"
	"testing"
	"time"
)

var t0 = time.Date(2026, 3, 27, 10, 0, 0, 0, time.UTC) // a Friday

func noJitter(time.Duration) time.Duration { return 0 }

func TestCronNextInTimezone(t *testing.T) {
	t.Parallel()
	// 09:00 on weekdays in Paris. From Friday 11:00 Paris time the next slot
	// is Monday 09:00, and Paris moves to summer time on Sunday 29 March
	// 2026, so Monday 09:00 is 07:00 UTC (it would be 08:00 UTC in winter).
	s := MustNew(Spec{Cron: "0 9 * * 1-5", Timezone: "Europe/Paris"})
	d := s.Next(t0, Run{})
	want := time.Date(2026, 3, 30, 7, 0, 0, 0, time.UTC)
	if !d.At.Equal(want) {
		t.Fatalf("next = %s, want %s", d.At.UTC(), want)
	}
	if d.Interval != want.Sub(t0) {
		t.Errorf("interval = %s, want %s", d.Interval, want.Sub(t0))
	}
	if !strings.Contains(d.Reason, `cron "0 9 * * 1-5" in Europe/Paris`) {
		t.Errorf("reason %q does not name the cron and zone", d.Reason)
	}
	// The same expression in UTC fires at 09:00 UTC.
	u := MustNew(Spec{Cron: "0 9 * * 1-5"})
	if got := u.Next(t0, Run{}).At; !got.Equal(time.Date(2026, 3, 30, 9, 0, 0, 0, time.UTC)) {
		t.Errorf("UTC next = %s", got)
	}
	// Descriptors work; a first run waits for the next slot.
	daily := MustNew(Spec{Cron: "@daily", Timezone: "America/New_York"})
	if got := daily.First(t0).At; !got.Equal(time.Date(2026, 3, 28, 4, 0, 0, 0, time.UTC)) {
		t.Errorf("@daily first = %s, want midnight New York (04:00 UTC)", got.UTC())
	}
}

func TestCronSkipsMissedSlots(t *testing.T) {
	t.Parallel()
	// After three days of downtime an hourly cron source runs once and is
	// then scheduled at the next slot after now, not at the 72 it missed.
	s := MustNew(Spec{Cron: "0 * * * *"})
	now := t0.Add(72*time.Hour + 17*time.Minute)
	d := s.Next(now, Run{})
	if want := now.Truncate(time.Hour).Add(time.Hour); !d.At.Equal(want) {
		t.Fatalf("next = %s, want %s", d.At, want)
	}
}

func TestEveryCountsFromNow(t *testing.T) {
	t.Parallel()
	s := MustNew(Spec{Every: 10 * time.Minute}).WithJitter(noJitter)
	now := t0.Add(50 * time.Hour) // long overdue
	d := s.Next(now, Run{})
	if !d.At.Equal(now.Add(10 * time.Minute)) {
		t.Fatalf("next = %s, want now+10m", d.At)
	}
	if d.Reason != "every 10m0s" {
		t.Errorf("reason = %q", d.Reason)
	}
	// The upstream's minimum interval wins over a shorter every.
	d = s.Next(now, Run{MinInterval: time.Hour})
	if d.Interval != time.Hour || !strings.Contains(d.Reason, "upstream asked for at least 1h0m0s") {
		t.Errorf("min interval: %+v", d)
	}
}

func TestEveryKeepsItsCadence(t *testing.T) {
	t.Parallel()
	// A source every 1m with the default jitter (6s) whose runs start up
	// to 2s late and take up to 1s: counted from each run's due time, it
	// runs 60 times an hour, not once every 1m + lateness + run + jitter/2.
	s := MustNew(Spec{Every: time.Minute, Jitter: 6 * time.Second})
	rng := rand.New(rand.NewPCG(1, 2))
	due := t0
	const runs = 6000
	for i := range runs {
		end := due.Add(time.Duration(rng.Int64N(int64(2*time.Second))) + time.Duration(rng.Int64N(int64(time.Second))))
		next := s.Next(end, Run{Due: due}).At
		if next.Before(end) {
			t.Fatalf("run %d: next %s before the run ended (%s)", i, next, end)
		}
		if d := next.Sub(due); d < time.Minute-3*time.Second || d > time.Minute+3*time.Second {
			t.Fatalf("run %d: %s after the last due time, want 1m ± 3s", i, d)
		}
		due = next
	}
	// 6,000 intervals of 1m ± 3s uniform: the mean is within a few
	// hundredths of a second of 1m (its standard error is about 0.02s).
	if mean := due.Sub(t0) / runs; mean < time.Minute-200*time.Millisecond || mean > time.Minute+200*time.Millisecond {
		t.Errorf("mean interval %s, want 1m", mean)
	}

	// A run that ended more than an interval after it was due counts from
	// its end: a source overdue after downtime runs once, not to catch up.
	n := MustNew(Spec{Every: time.Minute, Jitter: 6 * time.Second}).WithJitter(noJitter)
	end := t0.Add(3 * time.Minute)
	if got := n.Next(end, Run{Due: t0}).At; !got.Equal(end.Add(time.Minute)) {
		t.Errorf("overdue: next %s, want end+1m %s", got, end.Add(time.Minute))
	}
	// Slightly late: the next slot is one interval after the due time,
	// centred (no jitter drawn here: -jitter/2).
	end = t0.Add(10 * time.Second)
	if got, want := n.Next(end, Run{Due: t0}).At, t0.Add(time.Minute-3*time.Second); !got.Equal(want) {
		t.Errorf("late run: next %s, want %s", got, want)
	}
	// An upstream's minimum interval counts from the request, never less,
	// also when it is no longer than every (a feed's ttl of 1m).
	if got := n.Next(end, Run{Due: t0, MinInterval: 2 * time.Minute}).At; !got.Equal(end.Add(2 * time.Minute)) {
		t.Errorf("min interval: next %s, want end+2m", got)
	}
	if got := n.Next(end, Run{Due: t0, MinInterval: time.Minute}).At; !got.Equal(end.Add(time.Minute)) {
		t.Errorf("min interval equal to every: next %s, want end+1m", got)
	}
}

func TestJitterSpreadsSources(t *testing.T) {
	t.Parallel()
	// 1000 sources registered at one instant with every 1m, jitter 1m:
	// their first runs spread over the whole minute, none before now.
	s := MustNew(Spec{Every: time.Minute, Jitter: time.Minute})
	const n, buckets = 1000, 10
	var count [buckets]int
	seen := map[time.Time]bool{}
	for range n {
		at := s.First(t0).At
		off := at.Sub(t0)
		if off < 0 || off >= time.Minute {
			t.Fatalf("first run %s outside [now, now+jitter)", off)
		}
		count[off*buckets/time.Minute]++
		seen[at] = true
		if next := s.Next(t0, Run{}).At.Sub(t0); next < time.Minute || next >= 2*time.Minute {
			t.Fatalf("next run %s outside [every, every+jitter)", next)
		}
	}
	for i, c := range count {
		// Expected 100 per bucket; a uniform draw stays well inside [40, 160].
		if c < 40 || c > 160 {
			t.Errorf("bucket %d holds %d of %d first runs: not spread (%v)", i, c, n, count)
		}
	}
	if len(seen) < n*99/100 {
		t.Errorf("only %d distinct first-run times of %d", len(seen), n)
	}
}

// TestRetryBacksOffToCap: the retry waits in [d/2, d) for d the backoff's
// cap after n failures (service.Backoff tests the formula itself).
func TestRetryBacksOffToCap(t *testing.T) {
	t.Parallel()
	b := Backoff{Min: 30 * time.Second, Max: time.Hour}
	s := MustNew(Spec{Every: time.Second})
	for n := 1; n <= 12; n++ {
		d := b.Cap(n)
		for range 50 {
			r := s.Retry(t0, n, b, Run{})
			if w := r.At.Sub(t0); w < d/2 || w >= d {
				t.Fatalf("failure %d: retry after %s, want in [%s, %s)", n, w, d/2, d)
			}
			if !strings.Contains(r.Reason, "backoff after") {
				t.Fatalf("reason %q", r.Reason)
			}
		}
	}
}

func TestRetryNeverSoonerThanInterval(t *testing.T) {
	t.Parallel()
	b := Backoff{Min: 30 * time.Second, Max: time.Hour}
	s := MustNew(Spec{Every: 10 * time.Minute}).WithJitter(noJitter)
	r := s.Retry(t0, 1, b, Run{})
	if r.At.Sub(t0) != 10*time.Minute || !strings.Contains(r.Reason, "next run on the interval") {
		t.Errorf("first failure of a 10m source: %+v", r)
	}
	// The ninth failure backs off beyond the interval (at least 30m).
	if w := s.Retry(t0, 9, b, Run{}).At.Sub(t0); w < 30*time.Minute {
		t.Errorf("ninth failure retries after %s", w)
	}
	// A cron source retries on the backoff, unless its next slot is sooner.
	c := MustNew(Spec{Cron: "0 0 * * *"}).WithJitter(noJitter)
	if w := c.Retry(t0, 1, b, Run{}).At.Sub(t0); w >= 30*time.Second {
		t.Errorf("daily cron retry after %s, want the backoff (< 30s)", w)
	}
	c = MustNew(Spec{Cron: "* * * * *"}).WithJitter(noJitter)
	r = c.Retry(t0.Add(30*time.Second), 9, b, Run{})
	if !r.At.Equal(t0.Add(time.Minute)) || !strings.Contains(r.Reason, "next cron slot comes first") {
		t.Errorf("minutely cron after 9 failures: %+v", r)
	}
}

func TestAdaptive(t *testing.T) {
	t.Parallel()
	b := Bounds{Min: time.Minute, Max: time.Hour}
	s := MustNew(Spec{Every: 10 * time.Minute, Adaptive: &b}).WithJitter(noJitter)
	if s.Initial() != 10*time.Minute {
		t.Fatalf("initial = %s", s.Initial())
	}

	// Changes halve the interval down to min, never below.
	iv := s.Initial()
	for _, want := range []time.Duration{5 * time.Minute, 150 * time.Second, 75 * time.Second, time.Minute, time.Minute} {
		d := s.Next(t0, Run{Interval: iv, Changes: 3})
		if d.Interval != want {
			t.Fatalf("after a change from %s: %s, want %s (%s)", iv, d.Interval, want, d.Reason)
		}
		if !d.At.Equal(t0.Add(want)) {
			t.Fatalf("at = %s", d.At)
		}
		iv = d.Interval
	}
	if d := s.Next(t0, Run{Interval: iv, Changes: 1}); !strings.Contains(d.Reason, "kept at the minimum") {
		t.Errorf("reason at min: %q", d.Reason)
	}

	// While nothing changes the interval follows half the quiet time, never
	// shrinking, up to max.
	quiet := time.Duration(0)
	var last time.Duration
	for range 30 {
		quiet += iv
		d := s.Next(t0, Run{Interval: iv, Quiet: quiet})
		if d.Interval < iv {
			t.Fatalf("interval shrank from %s to %s without changes", iv, d.Interval)
		}
		if d.Interval < b.Min || d.Interval > b.Max {
			t.Fatalf("interval %s outside [%s, %s]", d.Interval, b.Min, b.Max)
		}
		iv, last = d.Interval, d.Interval
	}
	if last != time.Hour {
		t.Fatalf("after a long quiet the interval is %s, want the max 1h", last)
	}
	d := s.Next(t0, Run{Interval: 20 * time.Minute, Quiet: 3 * time.Hour})
	if d.Interval != time.Hour || !strings.Contains(d.Reason, "no change for 3h0m0s") {
		t.Errorf("quiet 3h from 20m: %+v", d)
	}
	d = s.Next(t0, Run{Interval: 20 * time.Minute, Quiet: 50 * time.Minute})
	if d.Interval != 25*time.Minute || !strings.Contains(d.Reason, "lengthened from 20m0s to 25m0s") {
		t.Errorf("quiet 50m from 20m: %+v", d)
	}

	// An upstream floor beyond max is held to max: never outside the bounds.
	d = s.Next(t0, Run{Interval: time.Minute, Changes: 1, MinInterval: 2 * time.Hour})
	if d.Interval != time.Hour {
		t.Errorf("upstream floor 2h with max 1h: %s", d.Interval)
	}
	// A stored interval outside the bounds (the bounds changed) is clamped.
	if d := s.Next(t0, Run{Interval: 5 * time.Hour}); d.Interval != time.Hour {
		t.Errorf("stored 5h: %s", d.Interval)
	}
}

func TestNewRejects(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		spec Spec
		want string
	}{
		{Spec{Cron: "61 * * * *"}, `cron "61 * * * *": end of range (61) above maximum (59)`},
		{Spec{Cron: "CRON_TZ=Europe/Paris 0 9 * * *"}, "set the zone with timezone"},
		{Spec{Cron: "@every 5m"}, "use every for fixed intervals"},
		{Spec{Cron: "0 0 30 2 *"}, "never fires"},
		{Spec{Cron: "0 9 * * *", Timezone: "Mars/Olympus"}, `timezone "Mars/Olympus" is not a known time zone`},
		{Spec{Cron: "0 9 * * *", Adaptive: &Bounds{time.Minute, time.Hour}}, "adaptive needs an every schedule"},
		{Spec{Every: 0}, "every must be positive"},
		{Spec{Every: time.Minute, Adaptive: &Bounds{time.Hour, time.Minute}}, "adaptive needs 0 < min <= max"},
		{Spec{Every: time.Minute, Jitter: -time.Second}, "jitter must not be negative"},
	} {
		_, err := New(tc.spec)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("New(%+v) = %v, want an error containing %q", tc.spec, err, tc.want)
		}
	}
}

func TestDeferred(t *testing.T) {
	t.Parallel()
	at := t0.Add(90 * time.Second)
	d := Deferred(t0, at, "429 Too Many Requests")
	if !d.At.Equal(at) || d.Interval != 90*time.Second || !strings.Contains(d.Reason, "resumes from its cursor") {
		t.Errorf("%+v", d)
	}
	if d := Deferred(t0, t0.Add(-time.Hour), "x"); !d.At.Equal(t0) {
		t.Errorf("a past time defers to now, got %s", d.At)
	}
}

// The dates every calendar rule is tested at (docs/development.md#tests):
// a month's first day, a new year (ISO week 53 of 2026, then week 1 of
// 2027), the days Europe/Paris and America/New_York change to and from
// summer time, a leap day, and a Monday just after midnight UTC (a week
// boundary).
var (
	monthFirstDay = time.Date(2026, 12, 1, 9, 30, 0, 0, time.UTC) // a Tuesday
	newYear       = time.Date(2027, 1, 1, 0, 0, 0, 0, time.UTC)   // a Friday of ISO week 53 of 2026
	firstWeek     = time.Date(2027, 1, 4, 0, 0, 0, 0, time.UTC)   // Monday of ISO week 1 of 2027
	parisSpring   = time.Date(2027, 3, 28, 1, 30, 0, 0, time.UTC) // 03:30 CEST, half an hour after the change
	parisFall     = time.Date(2027, 10, 31, 0, 0, 0, 0, time.UTC) // 02:00 CEST; 03:00 CEST becomes 02:00 CET at 01:00 UTC
	nySpring      = time.Date(2027, 3, 14, 5, 0, 0, 0, time.UTC)  // 00:00 EST; 02:00 EST becomes 03:00 EDT
	nyFall        = time.Date(2027, 11, 7, 4, 0, 0, 0, time.UTC)  // 00:00 EDT; 02:00 EDT becomes 01:00 EST
	leapDay       = time.Date(2028, 2, 29, 12, 0, 0, 0, time.UTC)
	mondayAfter   = time.Date(2027, 1, 11, 0, 5, 0, 0, time.UTC) // a Monday 00:05 UTC
)

// TestCronAtCalendarEdges runs cron schedules at the named dates: each
// slot is the one a person reading the expression in its zone expects. A
// daily slot inside the hour a DST change skips runs once, when the gap
// ends (as cron does), not a day later; one inside the hour a change
// repeats runs once, not twice; a schedule with every hour ("0 * * * *")
// keeps running every real hour through both.
func TestCronAtCalendarEdges(t *testing.T) {
	t.Parallel()
	utc := func(y int, m time.Month, d, h, min int) time.Time { return time.Date(y, m, d, h, min, 0, 0, time.UTC) }
	for _, tc := range []struct {
		name     string
		cron, tz string
		from     time.Time
		want     []time.Time
	}{
		{"2026-12-01 09:30 UTC, a month's first day: monthly on the 1st", "0 9 1 * *", "UTC", monthFirstDay,
			[]time.Time{utc(2027, 1, 1, 9, 0), utc(2027, 2, 1, 9, 0)}},
		{"2026-12-01 09:30 UTC, a month's first day: daily in Paris", "0 8 * * *", "Europe/Paris", monthFirstDay,
			[]time.Time{utc(2026, 12, 2, 7, 0), utc(2026, 12, 3, 7, 0)}},
		{"2027-01-01, ISO week 53 of 2026: weekly on Monday 08:00 Paris", "0 8 * * 1", "Europe/Paris", newYear,
			[]time.Time{utc(2027, 1, 4, 7, 0), utc(2027, 1, 11, 7, 0)}},
		{"2027-01-04, ISO week 1 of 2027: @weekly in New York", "@weekly", "America/New_York", firstWeek,
			[]time.Time{utc(2027, 1, 10, 5, 0), utc(2027, 1, 17, 5, 0)}},
		{"2027-03-28 01:30 UTC, Paris springs forward: local midnight", "0 0 * * *", "Europe/Paris", parisSpring,
			[]time.Time{utc(2027, 3, 28, 22, 0), utc(2027, 3, 29, 22, 0)}},
		{"2027-03-28, Paris springs forward: 02:30 is skipped, runs at 03:00", "30 2 * * *", "Europe/Paris", parisSpring.Add(-time.Hour),
			[]time.Time{utc(2027, 3, 28, 1, 0), utc(2027, 3, 29, 0, 30), utc(2027, 3, 30, 0, 30)}},
		{"2027-10-31, Paris falls back: 02:30 runs once", "30 2 * * *", "Europe/Paris", parisFall,
			[]time.Time{utc(2027, 10, 31, 0, 30), utc(2027, 11, 1, 1, 30)}},
		{"2027-10-31, Paris falls back: hourly runs every real hour", "0 * * * *", "Europe/Paris", parisFall.Add(-30 * time.Minute),
			[]time.Time{utc(2027, 10, 31, 0, 0), utc(2027, 10, 31, 1, 0), utc(2027, 10, 31, 2, 0)}},
		{"2027-10-31, Paris falls back: local midnight", "@daily", "Europe/Paris", parisFall,
			[]time.Time{utc(2027, 10, 31, 23, 0), utc(2027, 11, 1, 23, 0)}},
		{"2027-03-14, New York springs forward: 02:30 is skipped, runs at 03:00", "30 2 * * *", "America/New_York", nySpring,
			[]time.Time{utc(2027, 3, 14, 7, 0), utc(2027, 3, 15, 6, 30)}},
		{"2027-03-14, New York springs forward: every 30 minutes of 02:00 run once", "*/30 2 * * *", "America/New_York", nySpring,
			[]time.Time{utc(2027, 3, 14, 7, 0), utc(2027, 3, 15, 6, 0), utc(2027, 3, 15, 6, 30)}},
		{"2027-11-07, New York falls back: 01:30 runs once", "30 1 * * *", "America/New_York", nyFall,
			[]time.Time{utc(2027, 11, 7, 5, 30), utc(2027, 11, 8, 6, 30)}},
		{"2027-11-07, New York falls back: from the repeated hour, 01:30 is past", "30 1 * * *", "America/New_York", utc(2027, 11, 7, 6, 10),
			[]time.Time{utc(2027, 11, 8, 6, 30)}},
		{"2027-11-07, New York falls back: local midnight", "0 0 * * *", "America/New_York", nyFall.Add(-12 * time.Hour),
			[]time.Time{utc(2027, 11, 7, 4, 0), utc(2027, 11, 8, 5, 0)}},
		{"2028-02-29, a leap day: yearly on 29 February", "0 8 29 2 *", "UTC", monthFirstDay,
			[]time.Time{utc(2028, 2, 29, 8, 0), utc(2032, 2, 29, 8, 0)}},
		{"2028-02-29, a leap day: the last day of February in Paris", "0 0 1 3 *", "Europe/Paris", leapDay,
			[]time.Time{utc(2028, 2, 29, 23, 0), utc(2029, 2, 28, 23, 0)}},
		{"Monday 00:05 UTC, a week boundary: weekly on Monday 00:00 UTC", "0 0 * * 1", "UTC", mondayAfter,
			[]time.Time{utc(2027, 1, 18, 0, 0), utc(2027, 1, 25, 0, 0)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := MustNew(Spec{Cron: tc.cron, Timezone: tc.tz}).WithJitter(noJitter)
			at := tc.from
			for i, want := range tc.want {
				d := s.Next(at, Run{})
				if !d.At.Equal(want) {
					t.Fatalf("slot %d after %s: %s, want %s", i+1, at.UTC().Format(time.RFC3339),
						d.At.UTC().Format(time.RFC3339), want.Format(time.RFC3339))
				}
				if d.Interval != want.Sub(at) {
					t.Errorf("slot %d: interval %s, want %s", i+1, d.Interval, want.Sub(at))
				}
				at = d.At
			}
		})
	}
}
