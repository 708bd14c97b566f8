package me_test

import (
	"bytes"
	"context"
	"fmt"
	"image"
	"image/color/palette"
	"image/draw"
	"image/png"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// chromium returns the browser to drive, or skips the test when there is
// none (outside CI; in CI its absence is a failure: scripts/test.sh
// installs Debian's chromium package), as the admin page's and the web
// connector's browser tests do.
func chromium(t *testing.T) string {
	t.Helper()
	for _, name := range []string{os.Getenv("LOOKOUT_TEST_CHROMIUM"), "chromium", "chromium-browser", "google-chrome"} {
		if name == "" {
			continue
		}
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	if os.Getenv("CI") != "" {
		t.Fatal("no chromium on PATH in CI: scripts/test.sh installs Debian's chromium package when it is missing")
	}
	t.Skip("no chromium on PATH (apt-get install chromium, or run scripts/test.sh, which installs it): the /me browser test skips")
	return ""
}

// browser is a headless Chromium tab that records every console error,
// uncaught exception and failed load (a CSP violation among them).
type browser struct {
	t   *testing.T
	ctx context.Context
	mu  sync.Mutex
	bad []string
}

func newBrowser(t *testing.T) *browser {
	t.Helper()
	path := chromium(t)
	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(path), chromedp.NoSandbox, chromedp.WindowSize(1400, 900))
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancel := chromedp.NewContext(actx)
	t.Cleanup(func() { cancel(); cancelAlloc() })
	b := &browser{t: t, ctx: ctx}
	// The first run starts the browser; it must have no timeout.
	if err := chromedp.Do(ctx); err != nil {
		t.Fatalf("start chromium (%s): %v", path, err)
	}
	messages := chromedp.Console(ctx)
	go func() {
		for m, err := range messages {
			if err != nil {
				return
			}
			if m.Type == chromedp.ConsoleError || m.IsException() {
				b.mu.Lock()
				b.bad = append(b.bad, fmt.Sprintf("%s (%s %s)", m.String(), m.Source, m.URL))
				b.mu.Unlock()
			}
		}
	}()
	return b
}

// step bounds one browser step.
const step = time.Minute

func (b *browser) run(what string, steps ...chromedp.Action[chromedp.Void]) {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, step)
	defer cancel()
	if err := chromedp.Do(ctx, steps...); err != nil {
		b.t.Fatalf("%s: %v", what, err)
	}
}

func evalJS[T any](b *browser, js string) T {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, step)
	defer cancel()
	v, err := chromedp.Run(ctx, chromedp.Evaluate[T](js))
	if err != nil {
		b.t.Fatalf("evaluate %s: %v", js, err)
	}
	return v
}

// check says what is wrong with the page in view: a console error, or a
// page wider than the window (a horizontal scroll).
func (b *browser) check(where string) {
	b.t.Helper()
	wide := evalJS[[]int](b, `[document.documentElement.scrollWidth, window.innerWidth]`)
	if wide[0] > wide[1] {
		offenders := evalJS[[]string](b, `[...document.querySelectorAll('body *')].filter(e => e.getBoundingClientRect().right > window.innerWidth + 0.5).slice(0, 5).map(e => e.tagName + '.' + e.className + ' ' + Math.round(e.getBoundingClientRect().right))`)
		b.t.Errorf("%s at %d px: the page is %d px wide (a horizontal scroll); too wide: %v", where, wide[1], wide[0], offenders)
	}
	b.mu.Lock()
	bad := b.bad
	b.bad = nil
	b.mu.Unlock()
	if len(bad) > 0 {
		b.t.Errorf("%s: browser errors:\n  %s", where, strings.Join(bad, "\n  "))
	}
}

func (b *browser) open(url, sel string) {
	b.t.Helper()
	b.run("open "+url, chromedp.Navigate(url), chromedp.WaitVisible(chromedp.CSS(sel)))
}

func (b *browser) text(sel string) string {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, step)
	defer cancel()
	s, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS(sel)))
	if err != nil {
		b.t.Fatalf("read %s: %v", sel, err)
	}
	return s
}

// TestMePagesInBrowser drives /me in headless Chromium at a phone's width
// (390 px) and a desktop's (1400 px): the person signs in through a link
// an assistant minted, pauses a watch, reads a notification's body, and
// no page scrolls sideways or logs an error (the CSP would report inline
// code). With LOOKOUT_UPDATE_SCREENSHOTS=1 it writes the screenshots of
// docs/me.md (docs/images/me/PAGE-WIDTH.png).
func TestMePagesInBrowser(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	w.createWatch("alice", `{"name": "pinged", "when": "record.status == \"closed\"", "ask": "Is this worth a ping?", "channel": {"url": "ntfy://:tk_secret@127.0.0.1:8080/alerts"}}`)
	b := newBrowser(t)
	base := w.srv.URL
	var noteID int64
	var body string
	if err := w.pool.QueryRow(w.ctx, `SELECT id, body FROM notifications WHERE owner = 'alice' AND record_id = '1'`).Scan(&noteID, &body); err != nil {
		t.Fatal(err)
	}

	// At 390 px: sign in through a link.
	b.run("phone", chromedp.EmulateViewport(390, 844))
	b.open(base+w.link("alice", 0, time.Now()), "#use-link")
	b.check("link")
	b.shot("link-390")
	b.run("use the link", chromedp.Click(chromedp.ID("use-link")), chromedp.WaitVisible(chromedp.CSS("ul.watches")))
	b.check("watches")
	b.shot("watches-390")

	// Pause the watch from its button.
	pause := `li[data-watch="tickets/open"] button.pause`
	b.run("pause", chromedp.Click(chromedp.CSS(pause)), chromedp.WaitVisible(chromedp.CSS("p.flash")))
	if got := b.text("p.flash"); got != "Paused tickets/open." {
		t.Errorf("after pause: %q", got)
	}
	if w.count(`SELECT count(*) FROM watches WHERE name = 'open' AND paused`) != 1 {
		t.Fatal("the button did not pause the watch in the database")
	}
	if s := b.text(`li[data-watch="tickets/open"] .status`); s != "paused" {
		t.Errorf("status after pause: %q", s)
	}
	b.check("watches after pause")

	// The notification's body, from the list.
	b.open(base+"/me/notifications", "ul.notes")
	b.check("notifications")
	b.shot("notifications-390")
	b.run("open the notification", chromedp.Click(chromedp.CSS(fmt.Sprintf(`a[href="/me/notifications/%d"]`, noteID))), chromedp.WaitVisible(chromedp.ID("body")))
	if got := b.text("#body"); strings.TrimSpace(got) != strings.TrimSpace(body) {
		t.Errorf("the notification's body on the page: %q, in the database: %q", got, body)
	}
	if got := b.text("#trail"); !strings.Contains(got, "open") || !strings.Contains(got, "notify") {
		t.Errorf("why it fired: %q", got)
	}
	b.check("notification")
	b.shot("notification-390")

	// A new watch, previewed. The preview carries the condition it judged
	// (data-when): while keys are typed slowly, the live preview (me.js)
	// answers for a condition typed halfway first, so the test waits for
	// the answer to the whole one.
	const closedPreview = `#preview-result[data-when='record.status == "closed"'] .summary`
	b.open(base+"/me/new", "form.new")
	b.run("fill the form", chromedp.SendKeys(chromedp.ID("name"), "closed-tickets"),
		chromedp.SendKeys(chromedp.ID("when"), `record.status == "closed"`), chromedp.SendKeys(chromedp.ID("notify"), "log"),
		chromedp.Click(chromedp.ID("preview")), chromedp.WaitVisible(chromedp.CSS(closedPreview)))
	if got := b.text("#preview-result .summary"); !strings.Contains(got, "would have notified 1 time(s)") {
		t.Errorf("preview: %q", got)
	}
	b.check("new watch with its preview")
	b.shot("new-390")
	b.open(base+"/me/channels", "ul.channels")
	b.check("channels")
	b.shot("channels-390")

	// At 1400 px, every page again.
	b.run("desktop", chromedp.EmulateViewport(1400, 900))
	for _, p := range []struct{ path, sel, shot string }{ // the new-watch form follows, with its preview
		{"/me/", "ul.watches", "watches-1400"},
		{"/me/notifications", "ul.notes", "notifications-1400"},
		{fmt.Sprintf("/me/notifications/%d", noteID), "#body", "notification-1400"},
		{"/me/channels", "ul.channels", "channels-1400"},
	} {
		b.open(base+p.path, p.sel)
		b.check(p.path)
		b.shot(p.shot)
	}
	// At 1400 px the preview is live: typing sends it (me.js), no click.
	b.open(base+"/me/new", "form.new")
	b.run("live preview at 1400", chromedp.SendKeys(chromedp.ID("name"), "closed-tickets"), chromedp.SendKeys(chromedp.ID("when"), `record.status == "closed"`),
		chromedp.SendKeys(chromedp.ID("notify"), "log"), chromedp.WaitVisible(chromedp.CSS(closedPreview)))
	if got := b.text("#preview-result .summary"); !strings.Contains(got, "would have notified 1 time(s)") {
		t.Errorf("live preview: %q", got)
	}
	if u := evalJS[string](b, `location.pathname`); u != "/me/new" || w.count(`SELECT count(*) FROM watches WHERE name = 'closed-tickets'`) != 0 {
		t.Errorf("the live preview left the page (%s) or saved the watch", u)
	}
	b.check("new watch at 1400")
	b.shot("new-1400")
	// The nav sits on the brand's line at 1400 px, under it at 390 px.
	if top := evalJS[bool](b, `document.querySelector('header nav').getBoundingClientRect().top < document.querySelector('header .brand').getBoundingClientRect().bottom`); !top {
		t.Errorf("at 1400 px the nav is not beside the brand")
	}
	b.run("sign out", chromedp.Click(chromedp.CSS("form.logout button")), chromedp.WaitVisible(chromedp.ID("token")))
	b.check("sign-in form")
	b.shot("login-1400")
}

// shot writes a screenshot of the whole page into docs/images/me/NAME.png
// when LOOKOUT_UPDATE_SCREENSHOTS=1, reduced to a 256-colour palette so
// that it stays small.
func (b *browser) shot(name string) {
	b.t.Helper()
	if os.Getenv("LOOKOUT_UPDATE_SCREENSHOTS") != "1" {
		return
	}
	ctx, cancel := context.WithTimeout(b.ctx, step)
	defer cancel()
	raw, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	if err != nil {
		b.t.Fatalf("screenshot %s: %v", name, err)
	}
	img, err := png.Decode(bytes.NewReader(raw))
	if err != nil {
		b.t.Fatal(err)
	}
	pal := image.NewPaletted(img.Bounds(), palette.WebSafe)
	draw.Draw(pal, img.Bounds(), img, image.Point{}, draw.Src)
	var out bytes.Buffer
	if err := (&png.Encoder{CompressionLevel: png.BestCompression}).Encode(&out, pal); err != nil {
		b.t.Fatal(err)
	}
	p := filepath.Join("..", "..", "docs", "images", "me", name+".png")
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		b.t.Fatal(err)
	}
	if err := os.WriteFile(p, out.Bytes(), 0o644); err != nil {
		b.t.Fatal(err)
	}
	b.t.Logf("wrote %s (%d bytes)", p, out.Len())
}
