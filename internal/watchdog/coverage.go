package watchdog

import (
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/lookout-dev/lookout/internal/config"
	"github.com/lookout-dev/lookout/internal/definitions"
)

// coverage is the set of sources the stale check covers, with what it
// needs of each: the parsed source (its stale window), its owner and who
// manages it, and when its definition was made. The evaluator's follower
// of the definitions writes it (apply); the check reads it.
type coverage struct {
	mu sync.Mutex
	// staleAfter is alerts.stale_after (0: per source).
	staleAfter time.Duration
	sources    map[string]watched
	// unseen are the covered definitions not yet seen registered in the
	// sources table: the only ones the check asks about when they have
	// no row there.
	unseen map[string]bool
	// shortest is the shortest stale window of the covered sources,
	// computed at shortestAt; dirty when the sources changed since.
	shortest   time.Duration
	shortestAt time.Time
	dirty      bool
	// cron caches the default stale windows of cron schedules.
	cron map[cronSpec]cronWindow
}

// watched is a source the stale check covers.
type watched struct {
	cfg *config.Source
	// owner and managedBy are its definition's ("" for Config.Sources).
	owner, managedBy string
	// defined is when its definition was created: the start of its stale
	// window while no syncer has registered it in the sources table. Zero
	// for Config.Sources, which are checked once registered only.
	defined time.Time
}

// cronSpec is a cron schedule in its time zone.
type cronSpec struct{ cron, timezone string }

// cronWindow is the default stale window of a cron schedule, computed at.
type cronWindow struct {
	window time.Duration
	at     time.Time
}

// cronWindowTTL is how long a cron schedule's stale window (and the
// shortest window of the covered sources) is reused before it is computed
// again from the clock: the gaps between a schedule's next ticks change
// only with the calendar (weekends, months, DST).
const cronWindowTTL = time.Hour

func (c *coverage) init(sources []*config.Source, staleAfter time.Duration) {
	c.staleAfter = staleAfter
	c.sources = make(map[string]watched, len(sources))
	c.unseen = map[string]bool{}
	c.cron = map[cronSpec]cronWindow{}
	c.dirty = true
	for _, s := range sources {
		c.sources[s.Name] = watched{cfg: s}
	}
}

// apply follows the definitions (Watchdog.Apply).
func (c *coverage) apply(d *definitions.Delta) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.dirty = true
	if d.Full {
		c.sources = make(map[string]watched, len(d.Sources))
		c.unseen = make(map[string]bool, len(d.Sources))
	}
	for _, name := range d.RemovedSources {
		delete(c.sources, name)
		delete(c.unseen, name)
	}
	for _, def := range d.Sources {
		name := def.Row.Name
		if def.Row.Paused || def.Row.Orphaned() || def.Config == nil { // not run: never stale
			delete(c.sources, name)
			delete(c.unseen, name)
			continue
		}
		c.sources[name] = watched{cfg: def.Config, owner: def.Row.Owner, managedBy: def.Row.ManagedBy, defined: def.Row.CreatedAt}
		c.unseen[name] = true
	}
}

// names returns the covered sources' names, sorted.
func (c *coverage) names() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Sorted(maps.Keys(c.sources))
}

// plan returns what the check asks the database at now: the shortest
// stale window of the covered sources, and the covered definitions past
// their window whose registration was not seen yet (names and definition
// times, index-aligned). ok is false when no source is covered.
func (c *coverage) plan(now time.Time) (shortest time.Duration, probe []string, defined []time.Time, ok bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.sources) == 0 {
		return 0, nil, nil, false
	}
	if c.dirty || now.Before(c.shortestAt) || now.Sub(c.shortestAt) >= cronWindowTTL {
		fresh := make(map[cronSpec]cronWindow, len(c.cron))
		c.shortest = 0
		for _, s := range c.sources {
			if win := c.window(s.cfg, now, fresh); c.shortest == 0 || win < c.shortest {
				c.shortest = win
			}
		}
		c.cron = fresh // the schedules still in use
		c.shortestAt, c.dirty = now, false
	}
	for name := range c.unseen {
		s := c.sources[name]
		if !s.defined.IsZero() && now.Sub(s.defined) > c.window(s.cfg, now, c.cron) {
			probe = append(probe, name)
			defined = append(defined, s.defined)
		}
	}
	return c.shortest, probe, defined, true
}

// lookup returns a covered source and its stale window at now; ok is
// false when name is not covered.
func (c *coverage) lookup(name string, now time.Time) (watched, time.Duration, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	s, ok := c.sources[name]
	if !ok {
		return watched{}, 0, false
	}
	return s, c.window(s.cfg, now, c.cron), true
}

// seen records that these sources have a row in the sources table.
func (c *coverage) seen(names []string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, n := range names {
		delete(c.unseen, n)
	}
}

// window is alerts.StaleAfterFor(s, now) with alerts.stale_after, the
// default window of a cron schedule taken from cache when it was computed
// less than cronWindowTTL ago (it walks the schedule's next 64 ticks:
// about 0.1 ms). cache receives the window used.
func (c *coverage) window(s *config.Source, now time.Time, cache map[cronSpec]cronWindow) time.Duration {
	alerts := config.Alerts{StaleAfter: c.staleAfter}
	if s.Cron == "" || s.StaleAfter > 0 || c.staleAfter > 0 {
		return alerts.StaleAfterFor(s, now)
	}
	key := cronSpec{s.Cron, s.Timezone}
	cw, ok := cache[key]
	if !ok {
		cw, ok = c.cron[key]
	}
	if !ok || now.Before(cw.at) || now.Sub(cw.at) >= cronWindowTTL {
		cw = cronWindow{window: alerts.StaleAfterFor(s, now), at: now}
	}
	cache[key] = cw
	return cw.window
}
