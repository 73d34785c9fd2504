package bench

import (
	"math"
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
