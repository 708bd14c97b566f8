package web

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/lookout-dev/lookout/internal/config"
	"github.com/lookout-dev/lookout/internal/connectors"
)

// MaxLoginSteps bounds web.login.steps.
const MaxLoginSteps = 20

// Login is what a render does before it loads the page: open URL and
// do Steps in order, in the render's own browser context, so that the
// session (its cookies) lasts for that render only.
type Login struct {
	// URL of the sign-in page.
	URL string
	// Steps are done in order.
	Steps []LoginStep
}

// LoginStep is one step of a login: fill, click or wait.
type LoginStep struct {
	// Kind is fill, click or wait.
	Kind string
	// Sel finds the element (CSS, or XPath after xpath:).
	Sel *Selector
	// Value is what a fill types. It is a secret: never logged, never in
	// an error.
	Value string
}

// decodeLogin checks the web.login block, adding its problems to errs.
func decodeLogin(src *config.Source, l *LoginSettings, errs []error) (*Login, []error) {
	out := &Login{URL: l.URL}
	errs = append(errs, connectors.CheckURL(src, "web.login.url", l.URL))
	switch {
	case len(l.Steps) == 0:
		errs = append(errs, src.Errorf("web.login.steps", "at least one step is required (fill, click or wait)"))
	case len(l.Steps) > MaxLoginSteps:
		errs = append(errs, src.Errorf("web.login.steps", "has %d steps, at most %d", len(l.Steps), MaxLoginSteps))
	}
	for i, st := range l.Steps {
		key := fmt.Sprintf("web.login.steps[%d]", i)
		var kinds []string
		for _, k := range []struct{ name, sel string }{{"fill", st.Fill}, {"click", st.Click}, {"wait", st.Wait}} {
			if k.sel != "" {
				kinds = append(kinds, k.name)
			}
		}
		if len(kinds) != 1 {
			msg := "give one of fill, click or wait"
			if len(kinds) > 1 {
				msg += ", not " + strings.Join(kinds, " and ")
			}
			errs = append(errs, src.Errorf(key, "%s", msg))
			continue
		}
		step := LoginStep{Kind: kinds[0], Value: st.Value}
		expr := map[string]string{"fill": st.Fill, "click": st.Click, "wait": st.Wait}[step.Kind]
		sel, err := CompileSelector(expr)
		if err != nil {
			errs = append(errs, src.Errorf(key+"."+step.Kind, "%q %v", expr, err))
			continue
		}
		step.Sel = sel
		switch {
		case step.Kind == "fill" && st.Value == "":
			errs = append(errs, src.Errorf(key+".value", "is required with fill (a secret as ${ENV_VAR})"))
		case step.Kind != "fill" && st.Value != "":
			errs = append(errs, src.Errorf(key+".value", "only a fill step takes a value"))
		}
		out.Steps = append(out.Steps, step)
	}
	return out, errs
}

// login opens the sign-in page in the render's tab and does the steps;
// the interceptor lets the page post its form meanwhile. It returns once
// the page's network is idle after the last step.
func (c *Connector) login(ctx, outer context.Context, in *interceptor, w Wait) error {
	l := c.o.Login
	shown := connectors.Redact(c.o.URL)
	in.loggingIn.Store(true)
	defer in.loggingIn.Store(false)
	if err := chromedp.Do(ctx, chromedp.Navigate(l.URL)); err != nil {
		if ferr := in.failure(); ferr != nil {
			return ferr
		}
		return c.loginErr(ctx, outer, w, "web.login.url: load "+withoutQuery(l.URL), err)
	}
	for i, st := range l.Steps {
		if err := chromedp.Do(ctx, stepActions(st)...); err != nil {
			if ferr := in.failure(); ferr != nil {
				return ferr
			}
			return c.loginErr(ctx, outer, w, fmt.Sprintf("web.login.steps[%d]: %s %q", i, st.Kind, st.Sel), err)
		}
	}
	for in.idleFor() < w.Idle {
		if err := in.failure(); err != nil {
			return err
		}
		t := time.NewTimer(50 * time.Millisecond)
		select {
		case <-ctx.Done():
			t.Stop()
			return c.loginErr(ctx, outer, w, "web.login: wait for the page's network to be idle after the steps", ctx.Err())
		case <-t.C:
		}
	}
	if err := in.failure(); err != nil {
		return fmt.Errorf("page %s: web.login: %w", shown, err)
	}
	return nil
}

// loginErr says which step failed and why, never with a step's value.
func (c *Connector) loginErr(ctx, outer context.Context, w Wait, what string, err error) error {
	shown := connectors.Redact(c.o.URL)
	switch {
	case outer.Err() != nil:
		return fmt.Errorf("page %s: %s: %w", shown, what, outer.Err())
	case ctx.Err() != nil || errors.Is(err, context.DeadlineExceeded):
		return fmt.Errorf("page %s: %s: not done within web.wait.timeout %s (the login and the page share it): %w", shown, what, w.Timeout, context.DeadlineExceeded)
	}
	return fmt.Errorf("page %s: %s: %w", shown, what, err)
}

// stepActions are the browser actions of a step.
func stepActions(st LoginStep) []chromedp.Action[chromedp.Void] {
	if expr, ok := strings.CutPrefix(st.Sel.String(), XPathPrefix); ok {
		return actions(chromedp.Search(strings.TrimSpace(expr)), st)
	}
	return actions(chromedp.CSS(st.Sel.String()), st)
}

func actions[S chromedp.Selectable](sel S, st LoginStep) []chromedp.Action[chromedp.Void] {
	switch st.Kind {
	case "fill":
		return []chromedp.Action[chromedp.Void]{chromedp.Clear(sel), chromedp.SendKeys(sel, st.Value)}
	case "click":
		return []chromedp.Action[chromedp.Void]{chromedp.Click(sel)}
	}
	return []chromedp.Action[chromedp.Void]{chromedp.WaitVisible(sel)}
}

// withoutQuery is u without its query and fragment: a form sent with GET
// carries what was typed in the query, which is never logged.
func withoutQuery(u string) string {
	p, err := url.Parse(u)
	if err != nil {
		return "(a URL that does not parse)"
	}
	p.RawQuery, p.Fragment, p.User = "", "", nil
	return p.String()
}
