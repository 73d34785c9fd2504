package bench

import (
	"math"
	"os"
	"strings"
	"testing"
)

func TestABRows(t *testing.T) {
	res := func(target, metric string, v float64) Result { return Result{target, metric, v, "ops/s"} }
	rep := &ABReport{Sides: [2]string{"base", "new"}, Runs: [][2][]Result{
		{{res("base", "creates/s", 100), res("base", "only-base", 1)}, {res("new", "creates/s", 150)}},
		{{res("base", "creates/s", 200)}, {res("new", "creates/s", 200)}},
		{{res("base", "creates/s", 100)}, {res("new", "creates/s", 120)}},
	}}
	rows := rep.Rows()
	if len(rows) != 2 {
		t.Fatalf("Rows() = %d rows, want 2", len(rows))
	}
	c := rows[0]
	if c.Metric != "creates/s" || c.A != 100 || c.B != 150 || c.Ratio != 1.2 || c.Min != 1 || c.Max != 1.5 || c.Rounds != 3 {
		t.Errorf("creates/s row = %+v, want A 100, B 150, ratio 1.2 over 1–1.5 in 3 rounds", c)
	}
	if o := rows[1]; o.Rounds != 0 || !math.IsNaN(o.Ratio) || o.A != 1 || !math.IsNaN(o.B) {
		t.Errorf("only-base row = %+v, want no ratio", o)
	}
	var b strings.Builder
	if err := rep.WriteTable(&b); err != nil || !strings.Contains(b.String(), "new/base") {
		t.Errorf("WriteTable = %q, %v; want a new/base column", b.String(), err)
	}
}

func TestPlanValidate(t *testing.T) {
	if err := (Plan{Scenarios: []string{"writes", "nope"}}).Validate(); err == nil || !strings.Contains(err.Error(), `"nope"`) {
		t.Errorf("Validate(nope) = %v, want an error naming it", err)
	}
	if err := (Plan{Scenarios: Scenarios}).Validate(); err != nil {
		t.Errorf("Validate(all) = %v", err)
	}
}

func TestStatCPU(t *testing.T) {
	// A command name with a space and a parenthesis, as /proc shows it.
	line := "4242 (etcd) x) S 1 4242 4242 0 -1 4194560 1234 0 0 0 250 75 0 0 20 0 12 0 100 0 0\n"
	got, err := statCPU([]byte(line))
	if err != nil || math.Abs(got-3.25) > 1e-9 {
		t.Fatalf("statCPU = %v, %v; want 3.25 s (250 + 75 ticks)", got, err)
	}
	for _, bad := range []string{"", "4242 etcd S 1", "4242 (etcd) S 1 2 3", "4242 (etcd) S 1 2 3 4 5 6 7 8 9 10 x 75 0"} {
		if _, err := statCPU([]byte(bad)); err == nil {
			t.Errorf("statCPU(%q) = nil error", bad)
		}
	}
	self, err := os.ReadFile("/proc/self/stat")
	if err != nil {
		t.Skipf("no /proc: %v", err)
	}
	if _, err := statCPU(self); err != nil {
		t.Errorf("statCPU(/proc/self/stat): %v", err)
	}
}

func FuzzStatCPU(f *testing.F) {
	f.Add([]byte("1 (a b) R 0 1 1 0 -1 0 0 0 0 0 7 3 0 0 20 0 1 0 5 0 0"))
	f.Add([]byte("1 (x)"))
	f.Fuzz(func(t *testing.T, b []byte) {
		v, err := statCPU(b)
		if err == nil && (v < 0 || math.IsNaN(v)) {
			t.Fatalf("statCPU(%q) = %v", b, v)
		}
	})
}

func TestCPUPerWrite(t *testing.T) {
	rows := cpuPerWrite("x", "create", map[string]float64{"server": 1, "etcd": 2}, map[string]float64{"server": 3, "etcd": 2.5, "late": 9}, 1000)
	want := map[string]float64{"create CPU, etcd": 500, "create CPU, server": 2000, "create CPU, etcd+server": 2500}
	if len(rows) != len(want) {
		t.Fatalf("cpuPerWrite = %v, want %d rows", rows, len(want))
	}
	for _, r := range rows {
		if w, ok := want[r.Metric]; !ok || math.Abs(r.Value-w) > 1e-6 {
			t.Errorf("%s = %v, want %v", r.Metric, r.Value, w)
		}
	}
}
