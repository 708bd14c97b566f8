package web

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"sync"
	"time"

	"github.com/temoto/robotstxt"

	"github.com/lookout-dev/lookout/internal/connectors"
)

const (
	// RobotsTTL is how long a robots.txt is kept before it is read again.
	RobotsTTL = time.Hour
	// maxRobots bounds robots.txt (Google reads the first 500 KiB).
	maxRobots = 512 << 10
)

// robotsCache keeps the robots.txt of the page's origin.
type robotsCache struct {
	mu     sync.Mutex
	origin string
	data   *robotstxt.RobotsData
	at     time.Time
}

// allowed reads robots.txt (at most once per RobotsTTL) and reports
// whether it lets UserAgent fetch page; it returns the requests it made.
// A robots.txt that is absent (any 4xx) allows everything, as RFC 9309
// says; one that cannot be read (5xx, network) fails the run, since it
// may disallow the page.
func (rc *robotsCache) allowed(ctx context.Context, c *Connector, page *url.URL) (int, error) {
	origin := page.Scheme + "://" + page.Host
	rc.mu.Lock()
	defer rc.mu.Unlock()
	now := c.o.Now()
	requests := 0
	if rc.data == nil || rc.origin != origin || now.Sub(rc.at) >= RobotsTTL {
		requests = 1
		data, err := c.readRobots(ctx, origin)
		if err != nil {
			return requests, err
		}
		rc.origin, rc.data, rc.at = origin, data, now
	}
	path := page.EscapedPath()
	if page.RawQuery != "" {
		path += "?" + page.RawQuery
	}
	if path == "" {
		path = "/"
	}
	if !rc.data.TestAgent(path, UserAgent) {
		return requests, fmt.Errorf("page %s: %w of %s for user agent %q (set web.robots: ignore to read it anyway, if the site allows you to)",
			connectors.Redact(c.o.URL), ErrRobots, origin, UserAgent)
	}
	return requests, nil
}

func (c *Connector) readRobots(ctx context.Context, origin string) (*robotstxt.RobotsData, error) {
	h := c.o.Header.Clone()
	h.Set("Accept", "text/plain, */*;q=0.5")
	resp, err := connectors.Get(ctx, c.client, connectors.Request{URL: origin + "/robots.txt", Header: h, Timeout: c.o.Timeout, MaxBody: maxRobots, Now: c.o.Now})
	var se *connectors.StatusError
	switch {
	case err == nil:
		data, perr := robotstxt.FromBytes(resp.Body)
		if perr != nil {
			return nil, fmt.Errorf("read %s/robots.txt: %w", origin, perr)
		}
		return data, nil
	case errors.Is(err, connectors.ErrUnauthorized), errors.As(err, &se) && se.Code >= 400 && se.Code < 500:
		return robotstxt.FromStatusAndBytes(404, nil)
	default:
		return nil, fmt.Errorf("read robots.txt before the page (set web.robots: ignore to skip it): %w", err)
	}
}
