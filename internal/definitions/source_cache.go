package definitions

import "sync"

// sourceCacheSize bounds a sourceCache: past it, the cache starts over
// (the sources watches are created on are few; a miss costs one read).
const sourceCacheSize = 1024

// sourceCache holds the sources watches were last created on, as read
// FOR SHARE in that create (not orphaned, the actor saw them), so that
// the next create on one validates against it without reading it first:
// CreateWatch then sends one statement, queryCreateWatchOnSource, which
// locks the source FOR SHARE only if its owner and definition's hash are
// still those validated against and it is not orphaned, and inserts the
// watch only then. Any other outcome reads the source again, as a create
// did before. An entry is never trusted on its own: the statement checks
// it against the row under the lock, so a stale one (another replica's
// change, an operator's SQL) costs a read, never a wrong create.
type sourceCache struct {
	mu      sync.Mutex
	sources map[string]*Source
}

func newSourceCache() *sourceCache { return &sourceCache{sources: map[string]*Source{}} }

// get returns the source last put under name, or nil.
func (c *sourceCache) get(name string) *Source {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.sources[name]
}

// put remembers src, read FOR SHARE by a create and not orphaned.
func (c *sourceCache) put(src *Source) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.sources[src.Name]; !ok && len(c.sources) >= sourceCacheSize {
		clear(c.sources)
	}
	c.sources[src.Name] = src
}
