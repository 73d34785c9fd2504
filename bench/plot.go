package bench

import (
	"bytes"
	"fmt"
	"html"
	"math"
	"sort"
	"strconv"
	"strings"
)

// A small SVG line-chart writer for the scale curves (no plotting
// dependency): linear or logarithmic axes, one polyline with point markers
// per series, a legend on the right.

// Series is one line of a Chart: points (X[i], Y[i]) in order of X.
type Series struct {
	Name   string
	X, Y   []float64
	Dashed bool // a guide, not a measurement
}

// Chart is a line chart.
type Chart struct {
	File           string // file name under the output directory
	Title          string
	XLabel, YLabel string
	LogX, LogY     bool
	Series         []Series
}

const (
	plotW, plotH                         = 880, 440
	marginL, marginR, marginT, marginB   = 80, 300, 40, 60
	innerW, innerH                       = plotW - marginL - marginR, plotH - marginT - marginB
	legendX                              = plotW - marginR + 16
	legendRow                            = 18
	tickFont, labelFont, titleFont       = 11, 12, 14
	axisColor, gridColor, guideColor     = "#444", "#ddd", "#888"
	pointRadius                          = 3
	logPad, linPad                       = 1.0, 1.05
	maxDecadesWithSteps                  = 2
	maxLinearTicks                       = 6
	defaultStroke, guideStroke, dashSpec = 2, 1.5, "6,4"
)

var palette = []string{"#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf", "#7f7f7f", "#bcbd22"}

// axis maps data values to pixels along one dimension.
type axis struct {
	log      bool
	min, max float64 // data range shown (for log: the values, not logs)
}

// newAxis fits values: a log axis spans whole decades, a linear one starts
// at 0 (or the least value, if negative) and ends at a round number.
func newAxis(values []float64, log bool) axis {
	lo, hi := math.Inf(1), math.Inf(-1)
	for _, v := range values {
		if log && v <= 0 {
			continue
		}
		lo, hi = math.Min(lo, v), math.Max(hi, v)
	}
	if math.IsInf(lo, 1) {
		lo, hi = 1, 10
	}
	if log {
		lo = math.Pow(10, math.Floor(math.Log10(lo)))
		hi = math.Pow(10, math.Ceil(math.Log10(hi)))
		if hi <= lo {
			hi = lo * 10
		}
		return axis{log: true, min: lo, max: hi}
	}
	lo = math.Min(lo, 0)
	if hi <= lo {
		hi = lo + 1
	}
	step := niceStep((hi*linPad - lo) / maxLinearTicks)
	return axis{min: lo, max: math.Ceil(hi*linPad/step) * step}
}

// niceStep rounds a tick step up to 1, 2 or 5 times a power of ten.
func niceStep(raw float64) float64 {
	if raw <= 0 {
		return 1
	}
	p := math.Pow(10, math.Floor(math.Log10(raw)))
	for _, m := range []float64{1, 2, 5, 10} {
		if raw <= m*p*(1+1e-9) {
			return m * p
		}
	}
	return 10 * p
}

// frac is v's position along the axis, 0 to 1.
func (a axis) frac(v float64) float64 {
	if a.log {
		if v <= 0 {
			return math.NaN()
		}
		return (math.Log10(v) - math.Log10(a.min)) / (math.Log10(a.max) - math.Log10(a.min))
	}
	return (v - a.min) / (a.max - a.min)
}

// ticks are the axis's labelled values: each decade of a log axis (with 2
// and 5 between when it spans at most maxDecadesWithSteps decades), round steps
// of a linear one.
func (a axis) ticks() []float64 {
	var out []float64
	if a.log {
		decades := int(math.Round(math.Log10(a.max / a.min)))
		for d := 0; d <= decades; d++ {
			v := a.min * math.Pow(10, float64(d))
			out = append(out, v)
			if decades <= maxDecadesWithSteps && d < decades {
				out = append(out, 2*v, 5*v)
			}
		}
		return out
	}
	step := niceStep((a.max - a.min) / maxLinearTicks)
	for v := a.min; v <= a.max*(1+1e-9); v += step {
		out = append(out, math.Round(v/step)*step)
	}
	return out
}

// humanNumber formats a tick value: 1k, 10k, 1M, 2.5, 0.1.
func humanNumber(v float64) string {
	switch av := math.Abs(v); {
	case av == 0:
		return "0" // not "-0"
	case av >= 1e6:
		return strconv.FormatFloat(v/1e6, 'f', -1, 64) + "M"
	case av >= 1e3:
		return strconv.FormatFloat(v/1e3, 'f', -1, 64) + "k"
	default:
		return strconv.FormatFloat(v, 'g', 4, 64)
	}
}

// SVG renders the chart.
func (c *Chart) SVG() []byte {
	var xs, ys []float64
	for _, s := range c.Series {
		xs = append(xs, s.X...)
		ys = append(ys, s.Y...)
	}
	ax, ay := newAxis(xs, c.LogX), newAxis(ys, c.LogY)
	px := func(v float64) float64 { return marginL + ax.frac(v)*innerW }
	py := func(v float64) float64 { return marginT + (1-ay.frac(v))*innerH }

	var b bytes.Buffer
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="sans-serif">`+"\n", plotW, plotH, plotW, plotH)
	fmt.Fprintf(&b, `<rect width="%d" height="%d" fill="white"/>`+"\n", plotW, plotH)
	fmt.Fprintf(&b, `<text x="%d" y="%d" font-size="%d" font-weight="bold">%s</text>`+"\n", marginL, marginT-16, titleFont, esc(c.Title))
	for _, v := range ax.ticks() {
		x := px(v)
		fmt.Fprintf(&b, `<line x1="%.1f" y1="%d" x2="%.1f" y2="%d" stroke="%s"/>`+"\n", x, marginT, x, marginT+innerH, gridColor)
		fmt.Fprintf(&b, `<text x="%.1f" y="%d" font-size="%d" text-anchor="middle">%s</text>`+"\n", x, marginT+innerH+16, tickFont, humanNumber(v))
	}
	for _, v := range ay.ticks() {
		y := py(v)
		fmt.Fprintf(&b, `<line x1="%d" y1="%.1f" x2="%d" y2="%.1f" stroke="%s"/>`+"\n", marginL, y, marginL+innerW, y, gridColor)
		fmt.Fprintf(&b, `<text x="%d" y="%.1f" font-size="%d" text-anchor="end">%s</text>`+"\n", marginL-6, y+4, tickFont, humanNumber(v))
	}
	fmt.Fprintf(&b, `<rect x="%d" y="%d" width="%d" height="%d" fill="none" stroke="%s"/>`+"\n", marginL, marginT, innerW, innerH, axisColor)
	fmt.Fprintf(&b, `<text x="%d" y="%d" font-size="%d" text-anchor="middle">%s</text>`+"\n", marginL+innerW/2, plotH-18, labelFont, esc(c.XLabel))
	fmt.Fprintf(&b, `<text x="%d" y="%d" font-size="%d" text-anchor="middle" transform="rotate(-90 %d %d)">%s</text>`+"\n", 18, marginT+innerH/2, labelFont, 18, marginT+innerH/2, esc(c.YLabel))

	colour := 0
	for i, s := range c.Series {
		stroke, width, dash := guideColor, float64(guideStroke), ` stroke-dasharray="`+dashSpec+`"`
		if !s.Dashed {
			stroke, width, dash = palette[colour%len(palette)], defaultStroke, ""
			colour++
		}
		var pts []string
		for j := range s.X {
			x, y := px(s.X[j]), py(s.Y[j])
			if math.IsNaN(x) || math.IsNaN(y) {
				continue
			}
			pts = append(pts, fmt.Sprintf("%.1f,%.1f", x, y))
		}
		if len(pts) > 1 {
			fmt.Fprintf(&b, `<polyline points="%s" fill="none" stroke="%s" stroke-width="%g"%s/>`+"\n", strings.Join(pts, " "), stroke, width, dash)
		}
		if !s.Dashed {
			for _, p := range pts {
				x, y, _ := strings.Cut(p, ",")
				fmt.Fprintf(&b, `<circle cx="%s" cy="%s" r="%d" fill="%s"/>`+"\n", x, y, pointRadius, stroke)
			}
		}
		ly := marginT + 8 + i*legendRow
		fmt.Fprintf(&b, `<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="%s" stroke-width="%g"%s/>`+"\n", legendX, ly, legendX+24, ly, stroke, width, dash)
		fmt.Fprintf(&b, `<text x="%d" y="%d" font-size="%d">%s</text>`+"\n", legendX+30, ly+4, tickFont, esc(s.Name))
	}
	b.WriteString("</svg>\n")
	return b.Bytes()
}

func esc(s string) string { return html.EscapeString(s) }

// seriesOf collects the points of one metric into a series per target, in
// order of X, leaving out negative byte counts; name names each series
// from its target.
func seriesOf(points []Point, metric string, scale float64, name func(target string) string) []Series {
	byTarget := map[string]*Series{}
	var order []string
	for _, p := range points {
		// A negative memory difference is the server returning memory to
		// the system between the samples, not a cost: left out.
		if p.Metric != metric || (p.Value < 0 && p.Unit == "bytes") {
			continue
		}
		s := byTarget[p.Target]
		if s == nil {
			s = &Series{Name: name(p.Target)}
			byTarget[p.Target] = s
			order = append(order, p.Target)
		}
		s.X = append(s.X, float64(p.X))
		s.Y = append(s.Y, p.Value*scale)
	}
	out := make([]Series, 0, len(order))
	for _, t := range order {
		s := byTarget[t]
		sortXY(s)
		out = append(out, *s)
	}
	return out
}

// sortXY sorts a series' points by X.
func sortXY(s *Series) {
	idx := make([]int, len(s.X))
	for i := range idx {
		idx[i] = i
	}
	sort.SliceStable(idx, func(a, b int) bool { return s.X[idx[a]] < s.X[idx[b]] })
	x, y := make([]float64, len(idx)), make([]float64, len(idx))
	for i, j := range idx {
		x[i], y[i] = s.X[j], s.Y[j]
	}
	s.X, s.Y = x, y
}

// linearGuide is a dashed line through s's first point growing in
// proportion to X, to compare a curve with linear growth.
func linearGuide(s Series, name string) (Series, bool) {
	if len(s.X) < 2 || s.X[0] <= 0 {
		return Series{}, false
	}
	g := Series{Name: name, Dashed: true}
	for _, x := range []float64{s.X[0], s.X[len(s.X)-1]} {
		g.X = append(g.X, x)
		g.Y = append(g.Y, s.Y[0]*x/s.X[0])
	}
	return g, true
}

// ScaleCharts are the charts of the scale scenarios' points: memory per
// object, list latency, start after a restart, memory per watch and
// delivery latency. Charts without data are left out.
func ScaleCharts(points []Point) []Chart {
	with := func(suffix string) func(string) string { return func(t string) string { return t + ", " + suffix } }
	var lists []Series
	for _, l := range scaleLists {
		lists = append(lists, seriesOf(points, l.metric+" p50", 1, with(l.metric))...)
	}
	lists = append(lists, seriesOf(points, "paginated list page p50", 1, with("one page of 500"))...)
	if len(lists) > 0 {
		if g, ok := linearGuide(lists[0], "linear from "+lists[0].Name); ok {
			lists = append(lists, g)
		}
	}
	charts := []Chart{
		{File: "scale-heap.svg", Title: "Server memory per object (~1 KiB objects)", XLabel: "objects", YLabel: "KiB per object", LogX: true,
			Series: append(append(seriesOf(points, "heap per object", 1.0/1024, with("heap")), seriesOf(points, "RSS per object", 1.0/1024, with("RSS"))...),
				seriesOf(points, "heap per object after restart", 1.0/1024, with("heap after restart"))...)},
		{File: "scale-list.svg", Title: "List latency, p50 (client reads the whole answer)", XLabel: "objects", YLabel: "ms", LogX: true, LogY: true, Series: lists},
		{File: "scale-restart.svg", Title: "Start after a restart", XLabel: "objects", YLabel: "seconds", LogX: true, LogY: true,
			Series: append(seriesOf(points, "readyz after restart", 1, with("/readyz ok")), seriesOf(points, "first RV=0 list after restart", 1, with("first full RV=0 list"))...)},
		{File: "scale-watch-memory.svg", Title: "Server memory per open watch (all servers)", XLabel: "watches", YLabel: "KiB per watch", LogX: true,
			Series: append(seriesOf(points, "heap per watch", 1.0/1024, with("heap")), seriesOf(points, "RSS per watch", 1.0/1024, with("RSS"))...)},
		{File: "scale-watch-delivery.svg", Title: "Watch delivery latency at a fixed event rate", XLabel: "watches", YLabel: "ms", LogX: true, LogY: true,
			Series: append(seriesOf(points, "fan-out delivery p99", 1, with("p99")), seriesOf(points, "fan-out delivery p50", 1, with("p50"))...)},
	}
	out := charts[:0]
	for _, c := range charts {
		if len(c.Series) > 0 {
			out = append(out, c)
		}
	}
	return out
}
