package intern

import (
	"errors"
	"runtime"
	"testing"
	"time"
)

func TestGetSharesOneValuePerKey(t *testing.T) {
	var c Cache[string]
	builds := 0
	build := func(s string) func() (*string, error) {
		return func() (*string, error) { builds++; return &s, nil }
	}
	a, _ := c.Get("a", build("a"))
	a2, _ := c.Get("a", build("a"))
	b, _ := c.Get("b", build("b"))
	if a != a2 {
		t.Errorf("two Gets of key a gave %p and %p, want one value", a, a2)
	}
	if a == b || *b != "b" {
		t.Errorf("key b gave %p (%q), want its own value", b, *b)
	}
	if builds != 2 {
		t.Errorf("%d builds, want 2 (one per key)", builds)
	}
	runtime.KeepAlive(a)
	runtime.KeepAlive(b)
}

func TestGetKeepsNoError(t *testing.T) {
	var c Cache[int]
	boom := errors.New("boom")
	if _, err := c.Get("k", func() (*int, error) { return nil, boom }); !errors.Is(err, boom) {
		t.Fatalf("err %v, want boom", err)
	}
	n := 7
	v, err := c.Get("k", func() (*int, error) { return &n, nil })
	if err != nil || v != &n {
		t.Errorf("after an error: %v, %v; want the new build", v, err)
	}
}

func TestCollectedValueIsForgotten(t *testing.T) {
	var c Cache[[64]byte]
	func() {
		v, _ := c.Get("k", func() (*[64]byte, error) { return new([64]byte), nil })
		v[0] = 1
	}()
	// Nothing holds the value: a collection frees it and its cleanup
	// forgets the key (cleanups run on their own goroutine after it).
	deadline := time.Now().Add(10 * time.Second)
	for c.Len() > 0 {
		if time.Now().After(deadline) {
			t.Fatalf("%d keys held 10s after their value was dropped, want 0", c.Len())
		}
		runtime.GC()
		runtime.Gosched()
	}
}
