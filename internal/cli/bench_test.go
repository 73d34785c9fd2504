package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/objwatch/objwatch/bench"
	"github.com/objwatch/objwatch/testenv"
)

// TestBenchScaleAndPlot runs `bench scale` at a tiny scale against an
// in-process server and draws its points with `bench plot`.
func TestBenchScaleAndPlot(t *testing.T) {
	env := testenv.Start(t)
	dir := t.TempDir()
	out := filepath.Join(dir, "points.json")
	run := func(args ...string) string {
		t.Helper()
		cmd := newBenchCommand()
		var stdout bytes.Buffer
		cmd.SetOut(&stdout)
		cmd.SetErr(&bytes.Buffer{})
		cmd.SetArgs(args)
		if err := cmd.ExecuteContext(context.Background()); err != nil {
			t.Fatalf("bench %v: %v", args, err)
		}
		return stdout.String()
	}
	run("scale", "--target", "objwatch="+env.Kubeconfig, "--objects", "30,60", "--watches", "4",
		"--write-rate", "10", "--duration", "1s", "--list-runs", "1", "--clients", "8", "--json", out)
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	var points []bench.Point
	if err := json.Unmarshal(b, &points); err != nil {
		t.Fatal(err)
	}
	got := map[string]map[int]bool{}
	for _, p := range points {
		if got[p.Metric] == nil {
			got[p.Metric] = map[int]bool{}
		}
		got[p.Metric][p.X] = true
	}
	for _, want := range []struct {
		metric string
		x      int
	}{{"heap per object", 30}, {"heap per object", 60}, {"list RV=0 p50", 60}, {"paginated list page p50", 60}, {"fan-out delivery p99", 4}, {"heap per watch", 4}} {
		if !got[want.metric][want.x] {
			t.Errorf("no %q at %d in %s", want.metric, want.x, b)
		}
	}
	for _, p := range points {
		if p.Metric == "fan-out events missing" && p.Value != 0 {
			t.Errorf("%v events missing", p.Value)
		}
	}

	run("plot", "--out", dir, out)
	charts := []string{"scale-heap.svg", "scale-list.svg", "scale-watch-delivery.svg"}
	for _, p := range points {
		// With 4 watches the heap difference is often negative (the
		// server returned memory meanwhile), and plot leaves such points
		// out: the chart is there only when a point is not.
		if p.Metric == "heap per watch" && p.Value >= 0 {
			charts = append(charts, "scale-watch-memory.svg")
			break
		}
	}
	for _, f := range charts {
		if fi, err := os.Stat(filepath.Join(dir, f)); err != nil || fi.Size() == 0 {
			t.Errorf("%s: %v", f, err)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "scale-restart.svg")); err == nil {
		t.Error("scale-restart.svg written without restart points")
	}
}
