package admin

import (
	"fmt"
	"net/url"
	"time"
)

// timeRange is a span of time the charts and the timed lists show, given
// in the URL as range= (1h, 24h, 7d, 30d).
type timeRange struct {
	// Key is the URL's value ("" when none was given); Label its words.
	Key, Label string
	Span       time.Duration
}

// Interval is the range as a PostgreSQL interval.
func (r timeRange) Interval() string { return fmt.Sprintf("%d hours", int(r.Span.Hours())) }

// ranges are the time ranges offered, shortest first.
var ranges = []timeRange{
	{"1h", "hour", time.Hour},
	{"24h", "24 hours", 24 * time.Hour},
	{"7d", "7 days", 7 * 24 * time.Hour},
	{"30d", "30 days", 30 * 24 * time.Hour},
}

// rangeOf reads range= from qs (def when it is not given; "" for none).
func rangeOf(qs url.Values, def string) (timeRange, error) {
	key := qs.Get("range")
	if key == "" {
		key = def
	}
	if key == "" {
		return timeRange{}, nil
	}
	for _, r := range ranges {
		if r.Key == key {
			return r, nil
		}
	}
	return timeRange{}, fmt.Errorf("range=%q is not a time range (1h, 24h, 7d, 30d).", key)
}

// rangeLinks is the time range control of the page at u: a link per
// range, its other parameters kept (a window or a cursor of another
// range dropped), the one shown (on) marked.
func rangeLinks(u *url.URL, on string) []card {
	out := make([]card, 0, len(ranges))
	for _, r := range ranges {
		v := url.Values{}
		for k, vs := range u.Query() {
			switch k {
			case "range", "since", "until", "after", "done", "error":
				continue
			}
			v[k] = vs
		}
		v.Set("range", r.Key)
		out = append(out, card{Label: r.Key, Value: r.Label, Href: u.Path + "?" + v.Encode(), Class: cls(r.Key == on)})
	}
	return out
}
