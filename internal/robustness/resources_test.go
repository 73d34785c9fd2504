package robustness

import (
	"strings"
	"testing"
	"time"
)

// series samples one process every 10 s over run, its RSS given by f.
func series(name string, run time.Duration, f func(at time.Duration) (rss float64, pid int)) []ResourceSample {
	var out []ResourceSample
	for at := time.Duration(0); at <= run; at += 10 * time.Second {
		rss, pid := f(at)
		out = append(out, ResourceSample{At: at, Process: name, PID: pid, RSS: rss, OpenFiles: 40, Goroutines: 200})
	}
	return out
}

func TestCheckResources(t *testing.T) {
	const mib = 1 << 20
	run := time.Hour
	flat := series("objwatch-a", run, func(time.Duration) (float64, int) { return 200 * mib, 1 })
	// Restarted at half time: lower for a while, then back to its level.
	restarted := series("objwatch-b", run, func(at time.Duration) (float64, int) {
		if at > run/2 && at < run/2+5*time.Minute {
			return 60 * mib, 2
		}
		if at > run/2 {
			return 210 * mib, 2
		}
		return 200 * mib, 1
	})
	leaking := series("objwatch-c", run, func(at time.Duration) (float64, int) {
		return 150*mib + float64(at/time.Minute)*8*mib, 1 // +8 MiB a minute
	})
	small := series("etcd-0", run, func(at time.Duration) (float64, int) {
		return 40*mib + float64(at/time.Minute)*mib, 1 // doubles, but by less than the floor
	})
	var all []ResourceSample
	for _, s := range [][]ResourceSample{flat, restarted, leaking, small} {
		all = append(all, s...)
	}
	vs := checkResources(all, run)
	if len(vs) != 1 || !strings.HasPrefix(vs[0].Message, "objwatch-c: rss grew") {
		t.Fatalf("checkResources = %v, want one violation: objwatch-c's RSS", vs)
	}
	if vs := checkResources(leaking, 5*time.Minute); vs != nil {
		t.Errorf("a 5-minute run was checked: %v", vs)
	}
	sum := summarizeResources(all)
	if len(sum) != 4 || sum[2].Process != "objwatch-b" || sum[2].Restarts != 1 || sum[3].PeakRSS <= sum[3].FirstRSS {
		t.Errorf("summarizeResources = %+v", sum)
	}
}

func TestVmRSS(t *testing.T) {
	got, err := vmRSS([]byte("Name:\tetcd\nVmPeak:\t  9 kB\nVmRSS:\t   51234 kB\nThreads:\t9\n"))
	if err != nil || got != 51234 {
		t.Fatalf("vmRSS = %v, %v; want 51234", got, err)
	}
	for _, bad := range []string{"", "VmRSS:\t12 MB\n", "VmRSS:\tx kB\n", "Name: a\n"} {
		if _, err := vmRSS([]byte(bad)); err == nil {
			t.Errorf("vmRSS(%q) = nil error", bad)
		}
	}
}

func FuzzVmRSS(f *testing.F) {
	f.Add([]byte("VmRSS:\t 42 kB\n"))
	f.Add([]byte("VmRSS:"))
	f.Fuzz(func(t *testing.T, b []byte) {
		if v, err := vmRSS(b); err == nil && v < 0 {
			t.Fatalf("vmRSS(%q) = %v", b, v)
		}
	})
}
