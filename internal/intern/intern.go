// Package intern shares one value among equal definitions: a Cache maps a
// key (the definition's text and whatever else its build depends on) to
// the value built from it, holding it weakly, so that 100,000 watches
// copying a few conditions and templates hold a few compiled programs, and
// a value no definition holds any more is collected and forgotten.
//
// The values must be immutable once built: every holder of a key shares
// the one value.
package intern

import (
	"runtime"
	"sync"
	"weak"
)

// Cache maps keys to weakly held values built from them. The zero value
// is ready to use; a Cache must not be copied after first use.
type Cache[V any] struct {
	mu sync.Mutex
	m  map[string]weak.Pointer[V]
}

// Get returns the value of key: the one built earlier while anything still
// holds it, or build's, which is kept for the next Get of key. An error of
// build is returned and nothing is kept (it names its caller's context, so
// it is not shared). build runs without the cache's lock; two Gets of a
// new key at once may both build, and both get the first value stored.
func (c *Cache[V]) Get(key string, build func() (*V, error)) (*V, error) {
	if v := c.load(key); v != nil {
		return v, nil
	}
	v, err := build()
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if wp, ok := c.m[key]; ok {
		if old := wp.Value(); old != nil {
			return old, nil
		}
	}
	if c.m == nil {
		c.m = map[string]weak.Pointer[V]{}
	}
	wp := weak.Make(v)
	c.m[key] = wp
	runtime.AddCleanup(v, c.forget, entry[V]{key, wp})
	return v, nil
}

// Len is the number of keys held (values collected but not yet forgotten
// included).
func (c *Cache[V]) Len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.m)
}

func (c *Cache[V]) load(key string) *V {
	c.mu.Lock()
	defer c.mu.Unlock()
	if wp, ok := c.m[key]; ok {
		return wp.Value()
	}
	return nil
}

type entry[V any] struct {
	key string
	wp  weak.Pointer[V]
}

// forget drops the key of a collected value, unless it holds a newer one.
func (c *Cache[V]) forget(e entry[V]) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m[e.key] == e.wp {
		delete(c.m, e.key)
	}
}
