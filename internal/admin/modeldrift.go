package admin

import (
	"errors"
	"fmt"
	"html/template"
	"math"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/lookout-dev/lookout/internal/control"
	"github.com/lookout-dev/lookout/internal/drift"
)

// modelDriftData is the model drift page: drift's report of every watch
// (control.ModelDrift, as report_model_drift answers it), one chart each.
type modelDriftData struct {
	Report  *control.ModelDrift
	Weeks   int
	Watches []driftWatch
}

// driftWatch is one watch's chart and rows.
type driftWatch struct {
	drift.WatchReport
	SVG  template.HTML
	Rows [][]string
}

// modelDrift serves /admin/model-drift: per watch, the distance of each
// week's reason embeddings to the baseline week, the threshold, and the
// weeks where a model's digest changed (marked on the chart).
func (a *Admin) modelDrift(w http.ResponseWriter, r *http.Request, c *caller) {
	ctx, cancel := pageContext(r)
	defer cancel()
	p := newPage(c, "Model drift", "model-drift")
	weeks := drift.WeeksDefault
	if s := r.URL.Query().Get("weeks"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil {
			a.fail(w, r, http.StatusBadRequest, fmt.Sprintf("weeks %q is not a number", s))
			return
		}
		weeks = n
	}
	rep, err := a.svc.ModelDrift(ctx, c.p, control.ModelDriftQuery{Source: r.URL.Query().Get("source"), Watch: r.URL.Query().Get("watch"), Weeks: weeks})
	var invalid *control.InvalidError
	switch {
	case errors.As(err, &invalid):
		a.fail(w, r, http.StatusBadRequest, invalid.Error())
		return
	case err != nil:
		a.failErr(w, r, err)
		return
	}
	d := &modelDriftData{Report: rep, Weeks: weeks}
	for _, wr := range rep.Watches {
		dw := driftWatch{WatchReport: wr, SVG: driftChart(wr.Source+"/"+wr.Watch, wr)}
		for _, wk := range wr.Weeks {
			var changes []string
			for _, ch := range wk.ModelChanges {
				changes = append(changes, fmt.Sprintf("%s %s → %s", ch.Model, ch.From, ch.To))
			}
			state := ""
			switch {
			case wk.Baseline:
				state = "baseline"
			case wk.Drifted:
				state = "drifted"
			}
			dw.Rows = append(dw.Rows, []string{wk.Start.Format(time.DateOnly), strconv.Itoa(wk.Embedded), optFloat(wk.Distance),
				optFloat(wk.Spread), state, strconv.Itoa(wk.Judged), optPercent(wk.NotifyRate), strings.Join(changes, "; ")})
		}
		d.Watches = append(d.Watches, dw)
	}
	p.Data = d
	a.render(w, r, http.StatusOK, "modeldrift", p)
}

func optFloat(v *float64) string {
	if v == nil {
		return ""
	}
	return strconv.FormatFloat(*v, 'f', 3, 64)
}

func optPercent(v *float64) string {
	if v == nil {
		return ""
	}
	return strconv.FormatFloat(100**v, 'f', 1, 64) + " %"
}

// driftChart draws a watch's weekly distance to the baseline as a line,
// the threshold as a dashed line, and a vertical mark at each week where
// a model's digest changed (its tooltip names the model and digests).
func driftChart(title string, wr drift.WatchReport) template.HTML {
	var b strings.Builder
	top := wr.Threshold * 1.5
	for _, wk := range wr.Weeks {
		if wk.Distance != nil {
			top = math.Max(top, *wk.Distance)
		}
	}
	top = niceTop(top)
	plotW, plotH := chartW-padL-padR, chartH-padT-padB
	fmt.Fprintf(&b, `<svg class="chart drift" viewBox="0 0 %.0f %.0f" role="img" aria-label="%s" xmlns="http://www.w3.org/2000/svg">`,
		chartW, chartH, esc(title))
	fmt.Fprintf(&b, `<title>%s: cosine distance to the baseline week</title>`, esc(title))
	axes(&b, top, "")
	n := len(wr.Weeks)
	xAt := func(i int) float64 {
		if n <= 1 {
			return padL + plotW/2
		}
		return padL + float64(i)*plotW/float64(n-1)
	}
	yAt := func(v float64) float64 { return padT + plotH - v/top*plotH }
	ty := yAt(wr.Threshold)
	fmt.Fprintf(&b, `<line class="threshold" x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#c0392b" stroke-dasharray="4 3"><title>threshold %s</title></line>`,
		padL, ty, chartW-padR, ty, trimFloat(wr.Threshold))
	step := max(1, n/6)
	var pts []string
	for i, wk := range wr.Weeks {
		x := xAt(i)
		if i%step == 0 {
			fmt.Fprintf(&b, `<text class="xl" x="%.1f" y="%.1f">%s</text>`, x-10, chartH-6, wk.Start.Format("01-02"))
		}
		for _, ch := range wk.ModelChanges {
			fmt.Fprintf(&b, `<line class="mark model-change" x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#8e44ad" stroke-width="2"><title>model %s changed %s → %s at %s</title></line>`,
				x, padT, x, padT+plotH, esc(ch.Model), esc(ch.From), esc(ch.To), ch.At.Format(time.RFC3339))
		}
		if wk.Distance == nil {
			continue
		}
		y := yAt(*wk.Distance)
		pts = append(pts, fmt.Sprintf("%.1f,%.1f", x, y))
		cls := "pt s0"
		if wk.Drifted {
			cls = "pt s1 drifted"
		}
		fmt.Fprintf(&b, `<circle class="%s" cx="%.1f" cy="%.1f" r="3"><title>week of %s: distance %s, %d embedded</title></circle>`,
			cls, x, y, wk.Start.Format(time.DateOnly), trimFloat(*wk.Distance), wk.Embedded)
	}
	if len(pts) > 1 {
		fmt.Fprintf(&b, `<polyline class="ln s0" points="%s"/>`, strings.Join(pts, " "))
	}
	b.WriteString(`</svg>`)
	return template.HTML(b.String())
}
