package admin

import (
	"fmt"
	"html/template"
	"math"
	"strings"
)

// Charts are drawn on the server as inline SVG: no script, no chart
// library, nothing the CSP would have to allow. Colours are CSS classes
// (static/admin.css).

const (
	chartW, chartH         = 480.0, 150.0
	padL, padR, padT, padB = 44.0, 8.0, 10.0, 22.0
)

// bar is one bar of a bar chart.
type bar struct {
	Label string // the x label (an hour)
	Value float64
	Href  string // the rows behind it
	Tip   string
}

// barChart draws bars (one per hour) with the largest value on the y axis;
// every 6th label is printed under its bar. class colours the bars.
func barChart(title, class, unit string, bars []bar) template.HTML {
	var b strings.Builder
	top := 0.0
	for _, x := range bars {
		top = math.Max(top, x.Value)
	}
	scale := niceTop(top)
	plotW, plotH := chartW-padL-padR, chartH-padT-padB
	fmt.Fprintf(&b, `<svg class="chart" viewBox="0 0 %.0f %.0f" role="img" aria-label="%s" xmlns="http://www.w3.org/2000/svg">`,
		chartW, chartH, esc(title))
	fmt.Fprintf(&b, `<title>%s</title>`, esc(title))
	axes(&b, scale, unit)
	if len(bars) > 0 {
		bw := plotW / float64(len(bars))
		for i, x := range bars {
			h := 0.0
			if scale > 0 {
				h = x.Value / scale * plotH
			}
			if x.Value > 0 && h < 1 {
				h = 1
			}
			xx := padL + float64(i)*bw
			tip := x.Tip
			if tip == "" {
				tip = fmt.Sprintf("%s: %s%s", x.Label, trimFloat(x.Value), unit)
			}
			if x.Href != "" {
				fmt.Fprintf(&b, `<a href="%s">`, esc(x.Href))
			}
			// A full-height transparent target makes small bars easy to click.
			fmt.Fprintf(&b, `<rect class="hit" x="%.1f" y="%.1f" width="%.1f" height="%.1f"><title>%s</title></rect>`,
				xx, padT, bw, plotH, esc(tip))
			fmt.Fprintf(&b, `<rect class="bar %s" x="%.1f" y="%.1f" width="%.1f" height="%.1f"><title>%s</title></rect>`,
				class, xx+1, padT+plotH-h, math.Max(bw-2, 1), h, esc(tip))
			if x.Href != "" {
				b.WriteString(`</a>`)
			}
			if i%6 == 0 {
				fmt.Fprintf(&b, `<text class="xl" x="%.1f" y="%.1f">%s</text>`, xx, chartH-6, esc(x.Label))
			}
		}
	}
	b.WriteString(`</svg>`)
	return template.HTML(b.String())
}

// line is one series of a line chart.
type line struct {
	Name   string
	Values []float64 // NaN: no point
	Class  string
}

// lineChart draws series over labelled x positions, with a legend.
func lineChart(title, unit string, labels []string, series []line, fixedTop float64) template.HTML {
	var b strings.Builder
	top := fixedTop
	if top <= 0 {
		for _, s := range series {
			for _, v := range s.Values {
				if !math.IsNaN(v) {
					top = math.Max(top, v)
				}
			}
		}
		top = niceTop(top)
	}
	plotW, plotH := chartW-padL-padR, chartH-padT-padB
	fmt.Fprintf(&b, `<svg class="chart" viewBox="0 0 %.0f %.0f" role="img" aria-label="%s" xmlns="http://www.w3.org/2000/svg">`,
		chartW, chartH, esc(title))
	fmt.Fprintf(&b, `<title>%s</title>`, esc(title))
	axes(&b, top, unit)
	n := len(labels)
	xAt := func(i int) float64 {
		if n <= 1 {
			return padL + plotW/2
		}
		return padL + float64(i)*plotW/float64(n-1)
	}
	step := max(1, n/6)
	for i, l := range labels {
		if i%step == 0 {
			fmt.Fprintf(&b, `<text class="xl" x="%.1f" y="%.1f">%s</text>`, xAt(i)-10, chartH-6, esc(l))
		}
	}
	for si, s := range series {
		cls := s.Class
		if cls == "" {
			cls = fmt.Sprintf("s%d", si%6)
		}
		var pts []string
		for i, v := range s.Values {
			if math.IsNaN(v) || top <= 0 {
				continue
			}
			x, y := xAt(i), padT+plotH-v/top*plotH
			pts = append(pts, fmt.Sprintf("%.1f,%.1f", x, y))
			fmt.Fprintf(&b, `<circle class="pt %s" cx="%.1f" cy="%.1f" r="2.5"><title>%s %s: %s%s</title></circle>`,
				cls, x, y, esc(s.Name), esc(labels[i]), trimFloat(v), unit)
		}
		if len(pts) > 1 {
			fmt.Fprintf(&b, `<polyline class="ln %s" points="%s"/>`, cls, strings.Join(pts, " "))
		}
		fmt.Fprintf(&b, `<text class="lg %s" x="%.1f" y="%.1f">%s</text>`, cls, padL+6, padT+10+float64(si)*11, esc(s.Name))
	}
	b.WriteString(`</svg>`)
	return template.HTML(b.String())
}

func axes(b *strings.Builder, top float64, unit string) {
	plotH := chartH - padT - padB
	fmt.Fprintf(b, `<line class="axis" x1="%.0f" y1="%.0f" x2="%.0f" y2="%.0f"/>`, padL, padT+plotH, chartW-padR, padT+plotH)
	fmt.Fprintf(b, `<line class="axis" x1="%.0f" y1="%.0f" x2="%.0f" y2="%.0f"/>`, padL, padT, padL, padT+plotH)
	fmt.Fprintf(b, `<line class="grid" x1="%.0f" y1="%.0f" x2="%.0f" y2="%.0f"/>`, padL, padT, chartW-padR, padT)
	fmt.Fprintf(b, `<text class="yl" x="%.0f" y="%.0f">%s%s</text>`, padL-4, padT+4, esc(short(top)), esc(unit))
	fmt.Fprintf(b, `<text class="yl" x="%.0f" y="%.0f">0</text>`, padL-4, padT+plotH+3)
}

// niceTop rounds a maximum up to 1, 2 or 5 times a power of ten.
func niceTop(v float64) float64 {
	if v <= 0 {
		return 1
	}
	p := math.Pow(10, math.Floor(math.Log10(v)))
	for _, m := range []float64{1, 2, 5, 10} {
		if v <= m*p {
			return m * p
		}
	}
	return 10 * p
}

func short(v float64) string {
	switch {
	case v >= 1e6:
		return trimFloat(v/1e6) + "M"
	case v >= 1e4:
		return trimFloat(v/1e3) + "k"
	}
	return trimFloat(v)
}

func trimFloat(v float64) string {
	if v == math.Trunc(v) {
		return fmt.Sprintf("%.0f", v)
	}
	return strings.TrimRight(strings.TrimRight(fmt.Sprintf("%.3f", v), "0"), ".")
}

func esc(s string) string { return template.HTMLEscapeString(s) }
