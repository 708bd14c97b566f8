package health

import (
	"errors"
	"io"
	"net/http"
	"strings"
	"time"
)

// Limits bound how slowly a client may send a request to a Server, so
// that a client trickling its headers or body (one byte a second) cannot
// hold a connection and a handler: the api's /v1, /mcp, /admin/login
// and /ingest/{source} take bodies before they authenticate anything.
// Responses are not bounded: the notification stream (SSE) and streamed
// MCP answers last as long as they need.
type Limits struct {
	// Header bounds reading a request's headers (http.Server's
	// ReadHeaderTimeout). Defaults to 10s.
	Header time.Duration
	// BodyGrace and BodyMinRate bound reading a request's body: it must
	// arrive within BodyGrace plus one second per BodyMinRate bytes read
	// so far, so a body of any size allowed passes at BodyMinRate or
	// faster (25 MiB at 64 KiB/s takes 6m40s), and a trickle is cut after
	// about BodyGrace. The read then fails (the handler answers as for a
	// broken body) and the connection is closed. Defaults to 10s and
	// 64 KiB/s.
	BodyGrace   time.Duration
	BodyMinRate int64
	// Idle closes a keep-alive connection idle for this long
	// (http.Server's IdleTimeout). Defaults to 2m.
	Idle time.Duration
}

// Defaults of Limits.
const (
	HeaderTimeoutDefault = 10 * time.Second
	BodyGraceDefault     = 10 * time.Second
	BodyMinRateDefault   = 64 << 10
	IdleTimeoutDefault   = 2 * time.Minute
)

func (l Limits) withDefaults() Limits {
	if l.Header <= 0 {
		l.Header = HeaderTimeoutDefault
	}
	if l.BodyGrace <= 0 {
		l.BodyGrace = BodyGraceDefault
	}
	if l.BodyMinRate <= 0 {
		l.BodyMinRate = BodyMinRateDefault
	}
	if l.Idle <= 0 {
		l.Idle = IdleTimeoutDefault
	}
	return l
}

// SetLimits replaces the server's Limits (zero fields: their defaults).
// Call it before Start.
func (s *Server) SetLimits(l Limits) { s.limits = l.withDefaults() }

// bodyDeadline gives every request with a body the read deadline of
// Limits: the connection's read deadline follows the body as it arrives,
// and is lifted once the body is read to its end (net/http lifts it too
// when it starts its background read), so that what the handler then
// streams back is not cut.
func bodyDeadline(l Limits, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Body == nil || r.Body == http.NoBody {
			next.ServeHTTP(w, r)
			return
		}
		rc := http.NewResponseController(w)
		start := time.Now()
		b := &deadlineBody{body: r.Body, rc: rc, start: start, limits: l}
		if err := b.set(start.Add(l.BodyGrace)); err != nil {
			// The connection cannot take deadlines (a test's recorder):
			// nothing to bound.
			next.ServeHTTP(w, r)
			return
		}
		r.Body = b
		next.ServeHTTP(w, r)
	})
}

// deadlineBody moves the connection's read deadline as the body arrives.
type deadlineBody struct {
	body     io.ReadCloser
	rc       *http.ResponseController
	start    time.Time
	limits   Limits
	read     int64
	deadline time.Time
	done     bool
}

func (b *deadlineBody) set(t time.Time) error {
	b.deadline = t
	return b.rc.SetReadDeadline(t)
}

func (b *deadlineBody) Read(p []byte) (int, error) {
	n, err := b.body.Read(p)
	b.read += int64(n)
	if b.done {
		return n, err
	}
	if err != nil {
		// The end (or a failure): what follows is the response, not
		// bounded by this deadline.
		b.done = true
		_ = b.rc.SetReadDeadline(time.Time{})
		return n, err
	}
	earned := b.start.Add(b.limits.BodyGrace + time.Duration(float64(b.read)/float64(b.limits.BodyMinRate)*float64(time.Second)))
	// Moved by a second at least: not one system call per small read.
	if earned.Sub(b.deadline) >= time.Second {
		if serr := b.set(earned); serr != nil && !errors.Is(serr, http.ErrNotSupported) {
			return n, serr
		}
	}
	return n, err
}

func (b *deadlineBody) Close() error {
	if !b.done {
		b.done = true
		_ = b.rc.SetReadDeadline(time.Time{})
	}
	return b.body.Close()
}

// refuseNUL answers 400 to a request whose path or query holds a NUL
// byte (%00): no name, id or parameter of lookout may hold one
// (PostgreSQL's text refuses it), and a 5xx would tell a webhook
// provider to deliver it again, forever.
func refuseNUL(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.ContainsRune(r.URL.Path, 0) || strings.Contains(r.URL.RawQuery, "%00") || strings.ContainsRune(r.URL.RawQuery, 0) {
			w.Header().Set("Content-Type", "application/problem+json")
			w.Header().Set("X-Content-Type-Options", "nosniff")
			w.WriteHeader(http.StatusBadRequest)
			_, _ = io.WriteString(w, `{"type":"https://lookout.dev/problems/malformed-request","title":"Bad Request","status":400,"detail":"the path or a query parameter holds a NUL byte (%00), which no name, id or parameter may hold"}`+"\n")
			return
		}
		next.ServeHTTP(w, r)
	})
}
