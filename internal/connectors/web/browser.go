package web

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/fetch"
	"github.com/chromedp/cdproto/inspector"
	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/chromedp"

	"github.com/lookout-dev/lookout/internal/connectors"
)

// Browser rendering bounds and defaults.
const (
	// BrowserConcurrency is how many pages the shared browser renders at once.
	BrowserConcurrency = 2
	// WaitTimeoutDefault bounds one render: navigation, the wait, reading the DOM.
	WaitTimeoutDefault = 30 * time.Second
	// WaitIdleDefault is how long the page's network must be idle.
	WaitIdleDefault = 500 * time.Millisecond
)

// ErrNoBrowser is a render: browser run on a host without Chromium.
var ErrNoBrowser = errors.New("no chromium to render the page (install Debian's chromium package, or set LOOKOUT_CHROMIUM to its path)")

// Wait is what a browser render waits for before it reads the page.
type Wait struct {
	// Selector must match (CSS or xpath:); nil waits for idle only.
	Selector *Selector
	// Idle is how long no request of the page may be in flight.
	Idle time.Duration
	// Timeout bounds the render.
	Timeout time.Duration
}

// browser is the one Chromium process of the binary, started on the
// first render and shared by every source, at most BrowserConcurrency
// renders at a time. Chromium never reaches the network itself: every
// request the page makes is paused (Fetch domain) and answered by the
// connector's HTTP client — the egress policy, redirects and rate limits
// of every other request — or refused; a proxy that does not exist
// catches anything that would escape the interception.
type browser struct {
	mu     sync.Mutex
	ctx    context.Context // the browser's; tabs derive from it
	cancel context.CancelFunc
	sem    chan struct{}
	// waiting counts the renders waiting for a slot.
	waiting atomic.Int64
}

// BrowserWaiting is how many renders wait now for a slot of the shared
// browser (at most BrowserConcurrency render at a time).
func BrowserWaiting() int { return int(shared.waiting.Load()) }

var shared = &browser{sem: make(chan struct{}, BrowserConcurrency)}

// chromiumPath finds the browser: LOOKOUT_CHROMIUM, else chromium on PATH.
func chromiumPath() (string, error) {
	for _, name := range []string{os.Getenv("LOOKOUT_CHROMIUM"), "chromium", "chromium-browser", "google-chrome"} {
		if name == "" {
			continue
		}
		if p, err := exec.LookPath(name); err == nil {
			return p, nil
		}
	}
	return "", ErrNoBrowser
}

// start returns the running browser's context, starting it if needed.
func (b *browser) start() (context.Context, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.ctx != nil && b.ctx.Err() == nil {
		return b.ctx, nil
	}
	path, err := chromiumPath()
	if err != nil {
		return nil, err
	}
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(path),
		chromedp.ProxyServer("http://127.0.0.1:9"), // nothing passes but what the interception answers
		chromedp.Flag("proxy-bypass-list", "<-loopback>"),
		chromedp.WindowSize(1280, 1024),
		chromedp.Flag("js-flags", "--max-old-space-size=256"), // a page's scripts get 256 MB of heap
		chromedp.Flag("renderer-process-limit", strconv.Itoa(BrowserConcurrency)),
	)
	if os.Geteuid() == 0 {
		opts = append(opts, chromedp.NoSandbox) // Chromium refuses to sandbox as root
	}
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	bctx, cancelBrowser := chromedp.NewContext(actx)
	if err := chromedp.Do(bctx); err != nil { // starts the process; no timeout on this context
		cancelBrowser()
		cancelAlloc()
		return nil, fmt.Errorf("start chromium (%s): %w", path, err)
	}
	b.ctx, b.cancel = bctx, func() { cancelBrowser(); cancelAlloc() }
	return b.ctx, nil
}

// CloseBrowser stops the shared browser, if it runs. A later render
// starts it again.
func CloseBrowser() {
	shared.mu.Lock()
	defer shared.mu.Unlock()
	if shared.cancel != nil {
		shared.cancel()
		shared.ctx, shared.cancel = nil, nil
	}
}

// blockedTypes are resources a render does not load: they never change
// the DOM, and each would be a request against the source's budget.
var blockedTypes = map[network.ResourceType]bool{
	network.ResourceTypeImage: true, network.ResourceTypeMedia: true, network.ResourceTypeFont: true,
	network.ResourceTypeStylesheet: true, network.ResourceTypePing: true, network.ResourceTypeCSPViolationReport: true,
}

// render loads the page in a tab of the shared browser and returns its
// DOM after w, as a response (status and headers of the document's own
// request). Requests counts every request made for it.
func (c *Connector) render(ctx context.Context, w Wait) (resp *connectors.Response, requests int, err error) {
	shown := connectors.Redact(c.o.URL)
	shared.waiting.Add(1)
	select {
	case shared.sem <- struct{}{}:
		shared.waiting.Add(-1)
		defer func() { <-shared.sem }()
	case <-ctx.Done():
		shared.waiting.Add(-1)
		return nil, 0, ctx.Err()
	}
	bctx, err := shared.start()
	if err != nil {
		return nil, 0, fmt.Errorf("page %s: %w", shown, err)
	}
	// Each render has a browser context of its own: its cookies (a
	// login's session) and storage are gone when it ends, never seen by
	// another source's render.
	tab, closeTab := chromedp.NewContext(bctx, chromedp.WithNewBrowserContext())
	defer closeTab()
	stop := context.AfterFunc(ctx, closeTab)
	defer stop()
	// A renderer that dies (its scripts past the 256 MB heap, or any
	// other crash) never finishes loading: crashed ends the render then,
	// not at web.wait.timeout.
	live, crashed := context.WithCancel(tab)
	defer crashed()
	tctx, cancel := context.WithTimeout(live, w.Timeout)
	defer cancel()

	in := &interceptor{c: c, tab: tab, ctx: tctx, page: c.o.URL}
	in.touch()
	// Listen sees every event that arrives after it returns (Events queues
	// them from a subscription that may start late): registered before
	// Fetch.enable, no request of the page is missed and left paused.
	if err := chromedp.Listen(tab, func(ev any) {
		switch ev := ev.(type) {
		case *fetch.EventRequestPaused:
			in.inflight.Add(1)
			in.touch()
			go in.handle(*ev)
		case *inspector.EventTargetCrashed:
			in.fail(fmt.Errorf("page %s: browser: the page's renderer crashed (out of memory? its scripts get 256 MB of JavaScript heap)", shown))
			crashed()
		}
	}); err != nil {
		return nil, 0, fmt.Errorf("page %s: open a browser tab: %w", shown, err)
	}
	if _, err := chromedp.Call(tab, fetch.Enable, fetch.EnableParams{Patterns: []*fetch.RequestPattern{{URLPattern: "*"}}}); err != nil {
		return nil, 0, fmt.Errorf("page %s: intercept the browser's requests: %w", shown, err)
	}
	if c.o.Login != nil {
		in.loginURL = c.o.Login.URL
		if err := c.login(tctx, ctx, in, w); err != nil {
			return nil, in.count(), err
		}
	}
	navErr := chromedp.Do(tctx, chromedp.Navigate(c.o.URL))
	if err := in.failure(); err != nil {
		return nil, in.count(), err
	}
	if navErr != nil {
		return nil, in.count(), c.renderErr(in, tctx, ctx, w, "load", navErr)
	}
	var dom string
	for {
		if in.idleFor() >= w.Idle {
			dom, err = chromedp.Run(tctx, chromedp.Evaluate[string]("document.documentElement.outerHTML"))
			if err != nil {
				return nil, in.count(), c.renderErr(in, tctx, ctx, w, "read the page", err)
			}
			if w.Selector == nil {
				break
			}
			doc, perr := parseHTML(&connectors.Response{Body: []byte(dom), Header: http.Header{"Content-Type": {"text/html; charset=utf-8"}}})
			if perr == nil && len(w.Selector.All(doc)) > 0 {
				break
			}
		}
		if err := in.failure(); err != nil {
			return nil, in.count(), err
		}
		t := time.NewTimer(50 * time.Millisecond)
		select {
		case <-tctx.Done():
			t.Stop()
			return nil, in.count(), c.renderErr(in, tctx, ctx, w, "wait", tctx.Err())
		case <-t.C:
		}
	}
	if err := in.failure(); err != nil {
		return nil, in.count(), err
	}
	status, header := in.document()
	if status == 0 {
		status, header = http.StatusOK, http.Header{}
	}
	header = header.Clone()
	header.Set("Content-Type", "text/html; charset=utf-8") // the DOM, serialized, is UTF-8
	return &connectors.Response{Status: status, Header: header, Body: []byte(dom)}, in.count(), nil
}

func (c *Connector) renderErr(in *interceptor, tctx, ctx context.Context, w Wait, what string, err error) error {
	shown := connectors.Redact(c.o.URL)
	if ferr := in.failure(); ferr != nil { // the renderer crashed
		return ferr
	}
	if ctx.Err() != nil {
		return fmt.Errorf("page %s: %w", shown, ctx.Err())
	}
	if tctx.Err() != nil {
		cond := "the page's network to be idle"
		if w.Selector != nil {
			cond = fmt.Sprintf("web.wait.selector %q", w.Selector)
		}
		return fmt.Errorf("page %s: browser: %s: no page within web.wait.timeout %s waiting for %s: %w", shown, what, w.Timeout, cond, context.DeadlineExceeded)
	}
	return fmt.Errorf("page %s: browser: %s: %w", shown, what, err)
}

// interceptor answers the paused requests of one render.
type interceptor struct {
	c    *Connector
	tab  context.Context
	ctx  context.Context
	page string
	// loginURL is the sign-in page, and loggingIn true while the login
	// steps run: its form may be posted then, and no URL it requests is
	// logged with its query (a form sent with GET carries the password).
	loginURL  string
	loggingIn atomic.Bool

	inflight atomic.Int64
	last     atomic.Int64 // unix nanos of the last request start or end
	requests atomic.Int64
	bytes    atomic.Int64

	mu      sync.Mutex
	err     error // the first failure that fails the render
	status  int
	header  http.Header
	refused []string
}

func (in *interceptor) touch() { in.last.Store(time.Now().UnixNano()) }

func (in *interceptor) idleFor() time.Duration {
	if in.inflight.Load() > 0 {
		return 0
	}
	return time.Since(time.Unix(0, in.last.Load()))
}

func (in *interceptor) count() int { return int(in.requests.Load()) }

func (in *interceptor) failure() error {
	in.mu.Lock()
	defer in.mu.Unlock()
	return in.err
}

func (in *interceptor) fail(err error) {
	in.mu.Lock()
	defer in.mu.Unlock()
	if in.err == nil {
		in.err = err
	}
}

func (in *interceptor) document() (int, http.Header) {
	in.mu.Lock()
	defer in.mu.Unlock()
	return in.status, in.header
}

// handle answers one paused request: refused (not http(s), not a GET —
// a POST is let through while logging in —, a resource type that is not
// loaded), or fetched with the connector's client, with the cookies the
// render's browser context holds for it, and fulfilled; the cookies the
// response sets go to that browser context.
func (in *interceptor) handle(ev fetch.EventRequestPaused) {
	defer func() {
		in.inflight.Add(-1)
		in.touch()
	}()
	refuse := func(reason network.ErrorReason) {
		_, _ = chromedp.Call(in.tab, fetch.FailRequest, fetch.FailRequestParams{RequestID: ev.RequestID, ErrorReason: reason})
	}
	u := ev.Request.URL
	loggingIn := in.loggingIn.Load()
	shown := connectors.Redact(u)
	if loggingIn {
		shown = withoutQuery(u)
	}
	bare := strings.TrimSuffix(u, "#"+ev.Request.URLFragment)
	isDoc := ev.ResourceType == network.ResourceTypeDocument && (bare == in.page || loggingIn && bare == in.loginURL)
	method := ev.Request.Method
	switch {
	case !strings.HasPrefix(u, "http://") && !strings.HasPrefix(u, "https://"):
		in.c.o.Logger.Warn("browser request refused: not http(s)", "url", shown, "page", connectors.Redact(in.page))
		refuse(network.ErrorReasonBlockedByClient)
		return
	case blockedTypes[ev.ResourceType]:
		refuse(network.ErrorReasonBlockedByClient)
		return
	case method != http.MethodGet && method != http.MethodHead && !(loggingIn && method == http.MethodPost):
		refuse(network.ErrorReasonBlockedByClient)
		return
	}
	in.requests.Add(1)
	var sent io.Reader
	if method == http.MethodPost {
		sent = bytes.NewReader(in.postData(ev))
	}
	req, err := http.NewRequestWithContext(in.ctx, method, u, sent)
	if err != nil {
		refuse(network.ErrorReasonFailed)
		return
	}
	for k, v := range ev.Request.Headers {
		if s, ok := v.(string); ok && !strings.EqualFold(k, "Host") {
			req.Header.Set(k, s)
		}
	}
	if cookie := in.cookies(u); cookie != "" {
		req.Header.Set("Cookie", cookie)
	}
	if isDoc {
		for k, vs := range in.c.o.Header {
			req.Header[k] = vs
		}
	}
	resp, err := in.c.client.Do(req)
	if err != nil {
		in.c.o.Logger.Warn("browser request failed", "url", shown, "error", err)
		if isDoc {
			in.fail(fmt.Errorf("%s %s: %w", method, shown, err))
		}
		refuse(network.ErrorReasonAddressUnreachable)
		return
	}
	defer resp.Body.Close()
	if isDoc {
		if err := connectors.CheckStatusAt(resp, in.c.o.Now()); err != nil {
			in.fail(fmt.Errorf("%s %s: %w", method, shown, err))
			refuse(network.ErrorReasonFailed)
			return
		}
		in.mu.Lock()
		in.status, in.header = resp.StatusCode, resp.Header.Clone()
		in.mu.Unlock()
	}
	in.setCookies(u, resp)
	left := in.c.o.MaxBytes - in.bytes.Load()
	body, err := io.ReadAll(io.LimitReader(resp.Body, left+1))
	if err == nil && int64(len(body)) > left {
		err = fmt.Errorf("the page and what it loads are larger than web.max_bytes %d", in.c.o.MaxBytes)
		in.fail(fmt.Errorf("page %s: %w", connectors.Redact(in.page), err))
	}
	in.bytes.Add(int64(len(body)))
	if err != nil {
		refuse(network.ErrorReasonFailed)
		return
	}
	var headers []*fetch.HeaderEntry
	for k, vs := range resp.Header {
		switch strings.ToLower(k) {
		case "content-length", "content-encoding", "transfer-encoding", "set-cookie":
			continue
		}
		for _, v := range vs {
			headers = append(headers, &fetch.HeaderEntry{Name: k, Value: v})
		}
	}
	_, _ = chromedp.Call(in.tab, fetch.FulfillRequest, fetch.FulfillRequestParams{
		RequestID: ev.RequestID, ResponseCode: int64(resp.StatusCode), ResponseHeaders: headers, Body: body,
	})
}

// postData is the body of a paused POST: its entries, else what the
// browser gives for it.
func (in *interceptor) postData(ev fetch.EventRequestPaused) []byte {
	var b []byte
	for _, e := range ev.Request.PostDataEntries {
		b = append(b, e.Bytes...)
	}
	if len(b) == 0 && ev.Request.HasPostData {
		if r, err := chromedp.Call(in.tab, network.GetRequestPostData, network.GetRequestPostDataParams{RequestID: ev.NetworkID}); err == nil {
			b = r.PostData
		}
	}
	return b
}

// cookies is the Cookie header the render's browser context has for u:
// those its responses set (setCookies) and those its scripts set.
func (in *interceptor) cookies(u string) string {
	r, err := chromedp.Call(in.tab, network.GetCookies, network.GetCookiesParams{URLs: []string{u}})
	if err != nil || len(r.Cookies) == 0 {
		return ""
	}
	parts := make([]string, 0, len(r.Cookies))
	for _, c := range r.Cookies {
		parts = append(parts, c.Name+"="+c.Value)
	}
	return strings.Join(parts, "; ")
}

// setCookies stores the cookies resp sets in the render's browser
// context, where the page's scripts and its next requests see them.
func (in *interceptor) setCookies(u string, resp *http.Response) {
	for _, c := range resp.Cookies() {
		p := network.SetCookieParams{Name: c.Name, Value: c.Value, URL: u, Domain: c.Domain, Path: c.Path,
			Secure: &c.Secure, HTTPOnly: &c.HttpOnly}
		if !c.Expires.IsZero() {
			p.Expires = cdp.TimeSinceEpoch(float64(c.Expires.UnixMilli()) / 1000)
		}
		if _, err := chromedp.Call(in.tab, network.SetCookie, p); err != nil {
			in.c.o.Logger.Debug("browser cookie not stored", "name", c.Name, "error", err)
		}
	}
}
