package bench

import (
	"encoding/xml"
	"errors"
	"fmt"
	"io"
	"math"
	"slices"
	"strings"
	"testing"
	"testing/iotest"
	"time"
)

// list is a list answer of n benchmark objects with its metadata before
// the items (Kubernetes' order) or after them (sorted keys).
func list(n int, cont string, metaFirst bool) string {
	var items []string
	for i := range n {
		items = append(items, fmt.Sprintf(`{"apiVersion":"bench.objwatch.io/v1","kind":"BenchObject","metadata":{"name":"scale-%07d"},"spec":{"data":"%s"}}`, i, strings.Repeat("x", 900)))
	}
	meta := `"metadata":{"resourceVersion":"42"`
	if cont != "" {
		meta += `,"continue":"` + cont + `"`
	}
	meta += "}"
	body := `"items":[` + strings.Join(items, ",") + `]`
	if metaFirst {
		return `{"kind":"BenchObjectList","apiVersion":"bench.objwatch.io/v1",` + meta + "," + body + "}"
	}
	return `{"apiVersion":"bench.objwatch.io/v1",` + body + `,"kind":"BenchObjectList",` + meta + "}"
}

func TestItemCounter(t *testing.T) {
	for _, tc := range []struct {
		n         int
		cont      string
		metaFirst bool
	}{{0, "", true}, {1, "", false}, {7, "abc=", true}, {7, "eyJ2IjoxfQ==", false}, {40, "tok", false}, {40, "", true}} {
		body := list(tc.n, tc.cont, tc.metaFirst)
		// Whole, byte by byte and in odd chunks: keys split across writes
		// count once.
		for _, r := range []io.Reader{strings.NewReader(body), iotest.OneByteReader(strings.NewReader(body)), io.LimitReader(strings.NewReader(body), int64(len(body)))} {
			c := newItemCounter()
			if _, err := io.CopyBuffer(c, struct{ io.Reader }{r}, make([]byte, 13)); err != nil {
				t.Fatal(err)
			}
			if c.items != tc.n || c.cont() != tc.cont {
				t.Errorf("%d items, continue %q (metadata first %v): counted %d, %q", tc.n, tc.cont, tc.metaFirst, c.items, c.cont())
			}
		}
	}
}

func TestLimitOf(t *testing.T) {
	if got := limitOf("limit=1", false); got != 1 {
		t.Errorf("limit=1: %d", got)
	}
	if got := limitOf("limit=500", true); got < 1<<30 {
		t.Errorf("paged: %d", got)
	}
	if got := limitOf("resourceVersion=0", false); got < 1<<30 {
		t.Errorf("no limit: %d", got)
	}
}

func TestParseMemAvailable(t *testing.T) {
	got, err := parseMemAvailable(strings.NewReader("MemTotal:       24576000 kB\nMemFree:         1000 kB\nMemAvailable:   3145728 kB\n"))
	if err != nil || got != 3<<30 {
		t.Errorf("got %d, %v; want 3 GiB", got, err)
	}
	if _, err := parseMemAvailable(strings.NewReader("MemTotal: 1 kB\n")); err == nil {
		t.Error("no MemAvailable: no error")
	}
	if _, err := parseMemAvailable(strings.NewReader("MemAvailable: x kB\n")); err == nil {
		t.Error("bad number: no error")
	}
}

func TestSourceAddr(t *testing.T) {
	seen := map[string]bool{}
	for i := range uint32(16) {
		seen[sourceAddr(i, 8).String()] = true
	}
	if len(seen) != 8 || !seen["127.0.0.1"] || !seen["127.0.0.8"] || seen["127.0.0.9"] {
		t.Errorf("addresses %v", seen)
	}
}

func TestStatusOf(t *testing.T) {
	err := fmt.Errorf("wrapped: %w", &statusError{429, "too many"})
	if statusOf(err) != 429 || statusOf(errors.New("x")) != 0 {
		t.Errorf("statusOf")
	}
}

func TestPercentile(t *testing.T) {
	var l latencies
	for i := 100; i >= 1; i-- {
		l = append(l, time.Duration(i))
	}
	if l.pct(0.5) != time.Duration(51) || l.pct(0.99) != time.Duration(100) || l.pct(0) != time.Duration(1) || latencies(nil).pct(0.5) != 0 {
		t.Errorf("p50 %v p99 %v", l.pct(0.5), l.pct(0.99))
	}
}

func TestAxis(t *testing.T) {
	a := newAxis([]float64{10000, 100000, 1000000}, true)
	if a.min != 1e4 || a.max != 1e6 {
		t.Fatalf("log axis %v–%v", a.min, a.max)
	}
	if got := a.ticks(); !slices.Equal(got, []float64{1e4, 2e4, 5e4, 1e5, 2e5, 5e5, 1e6}) {
		t.Errorf("log ticks %v", got)
	}
	if f := a.frac(1e5); math.Abs(f-0.5) > 1e-9 {
		t.Errorf("frac(1e5) = %v", f)
	}
	b := newAxis([]float64{1, 1e6}, true)
	if got := b.ticks(); len(got) != 7 || got[0] != 1 || got[6] != 1e6 {
		t.Errorf("six decades: %v", got)
	}
	l := newAxis([]float64{3.2, 9.7}, false)
	if l.min != 0 || l.max != 12 {
		t.Errorf("linear axis %v–%v", l.min, l.max)
	}
	if got := l.ticks(); !slices.Equal(got, []float64{0, 2, 4, 6, 8, 10, 12}) {
		t.Errorf("linear ticks %v", got)
	}
	for raw, want := range map[float64]float64{0.13: 0.2, 1: 1, 3: 5, 7: 10, 2000: 2000, 0: 1} {
		if got := niceStep(raw); math.Abs(got-want) > 1e-9 {
			t.Errorf("niceStep(%v) = %v, want %v", raw, got, want)
		}
	}
	for v, want := range map[float64]string{1e6: "1M", 5e4: "50k", 2.5: "2.5", 0.1: "0.1", 1000: "1k", 1500000: "1.5M", math.Copysign(0, -1): "0"} {
		if got := humanNumber(v); got != want {
			t.Errorf("humanNumber(%v) = %q, want %q", v, got, want)
		}
	}
}

func TestScaleCharts(t *testing.T) {
	points := []Point{
		{"objwatch", "heap per object", 100000, 10240, "bytes"},
		{"objwatch", "heap per object", 10000, 11264, "bytes"},
		{"reference", "heap per object", 10000, 25600, "bytes"},
		{"objwatch", "list RV=0 p50", 10000, 100, "ms"},
		{"objwatch", "list RV=0 p50", 100000, 1000, "ms"},
		{"objwatch", "consistent list p50", 10000, 110, "ms"},
		{"objwatch", "RSS per object", 10000, -300, "bytes"},
	}
	charts := ScaleCharts(points)
	if len(charts) != 2 || charts[0].File != "scale-heap.svg" || charts[1].File != "scale-list.svg" {
		t.Fatalf("charts %v", charts)
	}
	heap := charts[0].Series
	if len(heap) != 2 || heap[0].Name != "objwatch, heap" || !slices.Equal(heap[0].X, []float64{1e4, 1e5}) || !slices.Equal(heap[0].Y, []float64{11, 10}) {
		t.Errorf("heap series %+v", heap)
	}
	lists := charts[1].Series
	guide := lists[len(lists)-1]
	if !guide.Dashed || !slices.Equal(guide.Y, []float64{100, 1000}) {
		t.Errorf("linear guide %+v", guide)
	}
	for _, c := range charts {
		d := xml.NewDecoder(strings.NewReader(string(c.SVG())))
		for {
			_, err := d.Token()
			if err == io.EOF {
				break
			}
			if err != nil {
				t.Fatalf("%s: not well-formed: %v", c.File, err)
			}
		}
	}
	if s := string(charts[0].SVG()); strings.Count(s, "<circle") != 3 || !strings.Contains(s, ">100k<") {
		t.Errorf("heap chart: want 3 markers and a 100k tick:\n%s", s)
	}
}

func TestStamp(t *testing.T) {
	tmpl := []byte(`{"apiVersion":"bench.objwatch.io/v1","kind":"BenchObject","metadata":{"labels":{"app":"bench","shard":"s10"},"managedFields":[{"manager":"Go-http-client"}],"name":"scale-0000000","namespace":"default","uid":"d6ce52f9-61c8-4e4b-b677-59d6f95ca819"},"spec":{"data":"xx"}}`)
	got, err := stamp(tmpl, "scale-0000000", "scale-0000042", "00000000-0000-0000-0000-000000000042", 3)
	if err != nil {
		t.Fatal(err)
	}
	want := `{"apiVersion":"bench.objwatch.io/v1","kind":"BenchObject","metadata":{"labels":{"app":"bench","shard":"s3"},"managedFields":[{"manager":"Go-http-client"}],"name":"scale-0000042","namespace":"default","uid":"00000000-0000-0000-0000-000000000042"},"spec":{"data":"xx"}}`
	if string(got) != want {
		t.Errorf("got  %s\nwant %s", got, want)
	}
	if !strings.Contains(string(tmpl), `"name":"scale-0000000"`) {
		t.Error("the template was changed")
	}
	if same, err := stamp(tmpl, "scale-0000000", "scale-0000000", "u", 1); err != nil || !strings.Contains(string(same), `"uid":"u"`) {
		t.Errorf("the template's own name: %s, %v", same, err)
	}
	if _, err := stamp(tmpl, "scale-0000001", "x", "u", 1); err == nil {
		t.Error("a template without the name: no error")
	}
}
