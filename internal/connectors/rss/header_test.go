package rss

import (
	"net/http"
	"reflect"
	"testing"
)

// Feeds that set no header share one (a syncer builds one connector per
// source); a feed's own headers get Accept added on a copy, not in the
// caller's map.
func TestNewSharesTheDefaultHeader(t *testing.T) {
	t.Parallel()
	a, err := New(nil, Options{URL: "http://feeds.test/a.xml"})
	if err != nil {
		t.Fatal(err)
	}
	b, err := New(nil, Options{URL: "http://feeds.test/b.xml", Header: http.Header{}})
	if err != nil {
		t.Fatal(err)
	}
	if reflect.ValueOf(a.o.Header).UnsafePointer() != reflect.ValueOf(b.o.Header).UnsafePointer() {
		t.Error("two feeds without headers hold two header maps")
	}
	if got := a.o.Header.Get("Accept"); got != Accept {
		t.Errorf("Accept = %q, want %q", got, Accept)
	}
	own := http.Header{"X-Token": {"t"}}
	c, err := New(nil, Options{URL: "http://feeds.test/c.xml", Header: own})
	if err != nil {
		t.Fatal(err)
	}
	if got := c.o.Header.Get("Accept"); got != Accept || c.o.Header.Get("X-Token") != "t" {
		t.Errorf("header = %v, want X-Token and Accept", c.o.Header)
	}
	if len(own) != 1 {
		t.Errorf("New changed the caller's header: %v", own)
	}
}
