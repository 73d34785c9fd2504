package robustness

import (
	"bytes"
	"context"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"time"

	"github.com/objwatch/objwatch/bench"
)

// ResourceSample is one process's use of memory, goroutines and files at
// one moment of the run. RSS and open files come from /proc (so a paused
// process is sampled too); heap and goroutines from a server's /metrics
// (absent for etcd members and for a server that did not answer).
type ResourceSample struct {
	At         time.Duration `json:"at"`
	Process    string        `json:"process"`
	PID        int           `json:"pid"`
	RSS        float64       `json:"rssBytes"`
	OpenFiles  float64       `json:"openFiles"`
	Heap       float64       `json:"heapInuseBytes,omitempty"`
	Goroutines float64       `json:"goroutines,omitempty"`
}

// sampleResources samples every server and etcd member every
// Config.SampleEvery until ctx ends; At counts from origin (the run's
// time, r.since).
func (r *run) sampleResources(ctx context.Context, origin time.Duration) []ResourceSample {
	hc := r.newClient()
	defer hc.CloseIdleConnections()
	var out []ResourceSample
	for {
		at := r.since() - origin
		type proc struct {
			name string
			p    *process
			srv  *apiServer
		}
		var procs []proc
		for _, s := range r.servers {
			procs = append(procs, proc{s.name, s.proc, s})
		}
		for _, c := range []*etcdCluster{r.etcd, r.main} {
			if c == nil {
				continue
			}
			for _, m := range c.snapshot() {
				procs = append(procs, proc{m.name, m.proc, nil})
			}
		}
		for _, p := range procs {
			pid := p.p.pid()
			if pid == 0 {
				continue
			}
			rss, files, err := procUse(pid)
			if err != nil {
				continue
			}
			s := ResourceSample{At: at, Process: p.name, PID: pid, RSS: rss, OpenFiles: files}
			if p.srv != nil {
				mctx, cancel := context.WithTimeout(ctx, 2*time.Second)
				m, err := p.srv.metrics(mctx, hc, "go_goroutines", "go_memstats_heap_inuse_bytes")
				cancel()
				if err == nil {
					s.Goroutines, s.Heap = m["go_goroutines"], m["go_memstats_heap_inuse_bytes"]
				}
			}
			out = append(out, s)
		}
		select {
		case <-ctx.Done():
			return out
		case <-time.After(r.cfg.SampleEvery):
		}
	}
}

// procUse reads a process's resident memory (VmRSS of /proc/PID/status)
// and counts its open file descriptors.
func procUse(pid int) (rss, files float64, _ error) {
	rss, err := RSS(pid)
	if err != nil {
		return 0, 0, err
	}
	fds, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	if err != nil {
		return 0, 0, err
	}
	return rss, float64(len(fds)), nil
}

// RSS is a process's resident memory in bytes (VmRSS of /proc/PID/status).
func RSS(pid int) (float64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	kb, err := vmRSS(b)
	return kb * 1024, err
}

// vmRSS reads the VmRSS line of a /proc/PID/status file, in KiB.
func vmRSS(status []byte) (float64, error) {
	for line := range bytes.Lines(status) {
		v, ok := bytes.CutPrefix(line, []byte("VmRSS:"))
		if !ok {
			continue
		}
		f := bytes.Fields(v)
		if len(f) != 2 || string(f[1]) != "kB" {
			return 0, fmt.Errorf("proc status: VmRSS %q", bytes.TrimSpace(v))
		}
		n, err := strconv.ParseUint(string(f[0]), 10, 64)
		if err != nil {
			return 0, fmt.Errorf("proc status: VmRSS: %w", err)
		}
		return float64(n), nil
	}
	return 0, fmt.Errorf("proc status: no VmRSS")
}

// The leak check: runs shorter than minLeakRun have too few samples; the
// first warmup of a run is left out (caches fill, connections open); a
// quantity leaks when the median of the run's last quarter is more than
// leakRatio times the median of the quarter after the warm-up and more
// than the floor above it (absolute growth below the floor is noise).
const (
	minLeakRun = 10 * time.Minute
	leakRatio  = 1.5
)

var leakFloors = map[string]float64{"rss": 128 << 20, "heap": 64 << 20, "goroutines": 300, "openFiles": 64}

// checkResources finds quantities that grew over a long run, per process
// name (a restarted process continues its name's series: growth that
// survives restarts is a leak too; a restart only lowers it).
func checkResources(samples []ResourceSample, run time.Duration) []Violation {
	if run < minLeakRun {
		return nil
	}
	warm := run / 10
	early0, early1 := warm, warm+(run-warm)/4
	late0 := run - (run-warm)/4
	var vs []Violation
	byName := map[string][]ResourceSample{}
	for _, s := range samples {
		byName[s.Process] = append(byName[s.Process], s)
	}
	for _, name := range slices.Sorted(mapsKeys(byName)) {
		for _, q := range []string{"rss", "heap", "goroutines", "openFiles"} {
			var early, late []float64
			for _, s := range byName[name] {
				v := s.quantity(q)
				if v == 0 {
					continue
				}
				switch {
				case s.At >= early0 && s.At < early1:
					early = append(early, v)
				case s.At >= late0:
					late = append(late, v)
				}
			}
			if len(early) < 3 || len(late) < 3 {
				continue
			}
			e, l := median(early), median(late)
			if l > leakRatio*e && l-e > leakFloors[q] {
				vs = append(vs, Violation{Check: "resources", Message: fmt.Sprintf("%s: %s grew from %s (median, %v–%v) to %s (median after %v)",
					name, q, humanQuantity(q, e), early0.Round(time.Second), early1.Round(time.Second), humanQuantity(q, l), late0.Round(time.Second))})
			}
		}
	}
	return vs
}

func (s ResourceSample) quantity(q string) float64 {
	switch q {
	case "rss":
		return s.RSS
	case "heap":
		return s.Heap
	case "goroutines":
		return s.Goroutines
	default:
		return s.OpenFiles
	}
}

func humanQuantity(q string, v float64) string {
	if q == "rss" || q == "heap" {
		return fmt.Sprintf("%.1f MiB", v/(1<<20))
	}
	return strconv.FormatFloat(math.Round(v), 'f', -1, 64)
}

func median(v []float64) float64 {
	v = slices.Clone(v)
	slices.Sort(v)
	if len(v)%2 == 1 {
		return v[len(v)/2]
	}
	return (v[len(v)/2-1] + v[len(v)/2]) / 2
}

func mapsKeys[V any](m map[string]V) func(func(string) bool) {
	return func(yield func(string) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}

// resourceCharts draws the samples over the run, one line per process:
// resident memory, open files, and the servers' goroutines and heap.
func resourceCharts(samples []ResourceSample) []bench.Chart {
	type q struct {
		file, title, unit string
		scale             float64
		get               func(ResourceSample) float64
	}
	qs := []q{
		{"resources-rss.svg", "resident memory", "MiB", 1 << 20, func(s ResourceSample) float64 { return s.RSS }},
		{"resources-heap.svg", "servers' heap in use", "MiB", 1 << 20, func(s ResourceSample) float64 { return s.Heap }},
		{"resources-goroutines.svg", "servers' goroutines", "goroutines", 1, func(s ResourceSample) float64 { return s.Goroutines }},
		{"resources-files.svg", "open files", "files", 1, func(s ResourceSample) float64 { return s.OpenFiles }},
	}
	var charts []bench.Chart
	for _, q := range qs {
		c := bench.Chart{File: q.file, Title: q.title + " over the run", XLabel: "minutes", YLabel: q.unit}
		series := map[string]*bench.Series{}
		var names []string
		for _, s := range samples {
			v := q.get(s)
			if v == 0 {
				continue
			}
			sr, ok := series[s.Process]
			if !ok {
				sr = &bench.Series{Name: s.Process}
				series[s.Process] = sr
				names = append(names, s.Process)
			}
			sr.X = append(sr.X, s.At.Minutes())
			sr.Y = append(sr.Y, v/q.scale)
		}
		slices.Sort(names)
		for _, n := range names {
			c.Series = append(c.Series, *series[n])
		}
		if len(c.Series) > 0 {
			charts = append(charts, c)
		}
	}
	return charts
}

// writeResourceCharts writes resourceCharts into dir.
func writeResourceCharts(dir string, samples []ResourceSample) error {
	for _, c := range resourceCharts(samples) {
		if err := os.WriteFile(filepath.Join(dir, c.File), c.SVG(), 0o600); err != nil {
			return err
		}
	}
	return nil
}

// ResourceSummary is one process's resource use over the run: its first
// and last sample and the peaks.
type ResourceSummary struct {
	Process         string  `json:"process"`
	Samples         int     `json:"samples"`
	Restarts        int     `json:"restarts"` // changes of PID
	FirstRSS        float64 `json:"firstRSS"`
	LastRSS         float64 `json:"lastRSS"`
	PeakRSS         float64 `json:"peakRSS"`
	FirstFiles      float64 `json:"firstOpenFiles"`
	LastFiles       float64 `json:"lastOpenFiles"`
	PeakFiles       float64 `json:"peakOpenFiles"`
	FirstGoroutines float64 `json:"firstGoroutines,omitempty"`
	LastGoroutines  float64 `json:"lastGoroutines,omitempty"`
	PeakGoroutines  float64 `json:"peakGoroutines,omitempty"`
}

func (s ResourceSummary) String() string {
	line := fmt.Sprintf("%s: %d samples, %d restarts; RSS %.0f → %.0f MiB (peak %.0f); open files %.0f → %.0f (peak %.0f)",
		s.Process, s.Samples, s.Restarts, s.FirstRSS/(1<<20), s.LastRSS/(1<<20), s.PeakRSS/(1<<20), s.FirstFiles, s.LastFiles, s.PeakFiles)
	if s.PeakGoroutines > 0 {
		line += fmt.Sprintf("; goroutines %.0f → %.0f (peak %.0f)", s.FirstGoroutines, s.LastGoroutines, s.PeakGoroutines)
	}
	return line
}

// summarizeResources summarizes the samples per process, in name order.
func summarizeResources(samples []ResourceSample) []ResourceSummary {
	by := map[string]*ResourceSummary{}
	lastPID := map[string]int{}
	for _, s := range samples {
		rs, ok := by[s.Process]
		if !ok {
			rs = &ResourceSummary{Process: s.Process, FirstRSS: s.RSS, FirstFiles: s.OpenFiles}
			by[s.Process] = rs
		} else if lastPID[s.Process] != s.PID {
			rs.Restarts++
		}
		lastPID[s.Process] = s.PID
		rs.Samples++
		rs.LastRSS, rs.LastFiles = s.RSS, s.OpenFiles
		rs.PeakRSS, rs.PeakFiles = max(rs.PeakRSS, s.RSS), max(rs.PeakFiles, s.OpenFiles)
		if s.Goroutines > 0 {
			if rs.FirstGoroutines == 0 {
				rs.FirstGoroutines = s.Goroutines
			}
			rs.LastGoroutines, rs.PeakGoroutines = s.Goroutines, max(rs.PeakGoroutines, s.Goroutines)
		}
	}
	var out []ResourceSummary
	for _, name := range slices.Sorted(mapsKeys(by)) {
		out = append(out, *by[name])
	}
	return out
}
