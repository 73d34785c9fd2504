package watchstream

import (
	"os"
	"path/filepath"
	"testing"
	"time"
)

func TestParseCPUTimes(t *testing.T) {
	stat := "cpu  100 5 50 800 40 1 4 10 7 0\ncpu0 50 2 25 400 20 0 2 5 3 0\ncpu1 50 3 25 400 20 1 2 5 4 0\nintr 1\n"
	c, err := parseCPUTimes([]byte(stat), nil)
	if err != nil {
		t.Fatal(err)
	}
	// busy: user nice system irq softirq steal; guest is part of user.
	if want := (cpuTimes{busy: 100 + 5 + 50 + 1 + 4 + 10, total: 1010}); c != want {
		t.Fatalf("parse = %+v, want %+v", c, want)
	}
	one, err := parseCPUTimes([]byte(stat), map[int]bool{1: true, 7: true})
	if err != nil {
		t.Fatal(err)
	}
	if want := (cpuTimes{busy: 50 + 3 + 25 + 1 + 2 + 5, total: 506}); one != want {
		t.Fatalf("parse of cpu1 = %+v, want %+v", one, want)
	}
	next := cpuTimes{busy: c.busy + 90, total: c.total + 100}
	if share, ok := next.busySince(c); !ok || share != 0.9 {
		t.Fatalf("busySince = %v, %v; want 0.9, true", share, ok)
	}
	if _, ok := c.busySince(c); ok {
		t.Fatal("busySince over no time: ok")
	}
	// With a quota, the higher of the two shares counts.
	q0 := cpuTimes{total: 100, quota: 100, hasQuota: true}
	for _, c := range []struct {
		now  cpuTimes
		want float64
	}{
		{cpuTimes{busy: 95, total: 200, used: 50, quota: 200, hasQuota: true}, 0.95},
		{cpuTimes{busy: 20, total: 200, used: 80, quota: 200, hasQuota: true}, 0.8},
		{cpuTimes{busy: 20, total: 200, used: 300, quota: 200, hasQuota: true}, 1},    // over the quota's period: capped
		{cpuTimes{busy: 20, total: 200, used: 300, quota: 200, hasQuota: false}, 0.2}, // cpu.stat unread
	} {
		if share, ok := c.now.busySince(q0); !ok || share != c.want {
			t.Errorf("busySince(%+v) = %v, %v; want %v", c.now, share, ok, c.want)
		}
	}
	for _, bad := range []string{"", "intr 1\n", "cpu 1 2 x 4 5\n", "cpu 1 2\n"} {
		if _, err := parseCPUTimes([]byte(bad), nil); err == nil {
			t.Errorf("parseCPUTimes(%q): no error", bad)
		}
	}
	if _, err := parseCPUTimes([]byte(stat), map[int]bool{5: true}); err == nil {
		t.Error("parseCPUTimes of an absent CPU: no error")
	}
}

func TestParseAllowedCPUs(t *testing.T) {
	for _, c := range []struct {
		status string
		want   []int // nil: nil
	}{
		{"Name:\tx\nCpus_allowed:\t3\nCpus_allowed_list:\t0-1\n", []int{0, 1}},
		{"Cpus_allowed_list:\t0,2-4,9\n", []int{0, 2, 3, 4, 9}},
		{"Cpus_allowed_list:\t3\n", []int{3}},
		{"Name:\tx\n", nil},
		{"Cpus_allowed_list:\t4-2\n", nil},
		{"Cpus_allowed_list:\tx\n", nil},
	} {
		got := parseAllowedCPUs([]byte(c.status))
		if (got == nil) != (c.want == nil) || len(got) != len(c.want) {
			t.Errorf("parseAllowedCPUs(%q) = %v, want %v", c.status, got, c.want)
			continue
		}
		for _, n := range c.want {
			if !got[n] {
				t.Errorf("parseAllowedCPUs(%q) = %v, want %v", c.status, got, c.want)
			}
		}
	}
}

// fakeProc writes files below a temporary root for a procFS.
func fakeProc(t *testing.T, files map[string]string) procFS {
	root := t.TempDir()
	for name, body := range files {
		p := filepath.Join(root, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return procFS{root: root}
}

// A container pinned to CPUs 0-3 of a host, in a pod limited to 1.5 CPUs
// (its own cgroup has no limit): the pod's quota counts, measured by the
// pod's cgroup's use against 1.5 CPUs of wall time.
func TestCPUReaderQuota(t *testing.T) {
	const ctr = "/sys/fs/cgroup/kubepods/pod1/ctr"
	const pod = "/sys/fs/cgroup/kubepods/pod1"
	fs := fakeProc(t, map[string]string{
		"/proc/stat":                      "cpu  9 0 0 9 0 0 0 0\ncpu0 1 0 0 9 0 0 0 0\ncpu1 1 0 0 9 0 0 0 0\ncpu2 1 0 0 9 0 0 0 0\ncpu3 1 0 0 9 0 0 0 0\ncpu4 5 0 0 0 0 0 0 0\n",
		"/proc/self/status":               "Cpus_allowed_list:\t0-3\n",
		"/proc/self/cgroup":               "0::/kubepods/pod1/ctr\n",
		ctr + "/cpu.max":                  "max 100000\n",
		pod + "/cpu.max":                  "150000 100000\n",
		"/sys/fs/cgroup/kubepods/cpu.max": "400000 100000\n",
		pod + "/cpu.stat":                 "usage_usec 1000000\nuser_usec 1\n",
	})
	r := newCPUReader(fs)
	if r.quotaDir != pod || r.quota != 1.5 {
		t.Fatalf("quota %v in %q, want 1.5 in %q", r.quota, r.quotaDir, pod)
	}
	clock := r.start
	r.now = func() time.Time { return clock }
	prev, err := r.read()
	if err != nil {
		t.Fatal(err)
	}
	if prev.busy != 4 || prev.total != 40 {
		t.Fatalf("CPUs 0-3 read as busy %d of %d, want 4 of 40", prev.busy, prev.total)
	}
	// 100 ms later the pod used 135 ms of CPU: 90% of its 150 ms, while
	// the CPUs read nothing new (the lines did not change).
	clock = clock.Add(100 * time.Millisecond)
	if err := os.WriteFile(filepath.Join(fs.root, pod, "cpu.stat"), []byte("usage_usec 1135000\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	now, err := r.read()
	if err != nil {
		t.Fatal(err)
	}
	if share, ok := now.busySince(prev); !ok || share < 0.899 || share > 0.901 {
		t.Fatalf("busy share %v (ok %v), want the quota's 0.9", share, ok)
	}
}

func TestCPUReaderNoQuota(t *testing.T) {
	for name, files := range map[string]map[string]string{
		"none":           {"/proc/self/cgroup": "0::/\n"},
		"max":            {"/proc/self/cgroup": "0::/a\n", "/sys/fs/cgroup/a/cpu.max": "max 100000\n"},
		"v1 only":        {"/proc/self/cgroup": "4:cpu,cpuacct:/docker/x\n"},
		"above the CPUs": {"/proc/self/cgroup": "0::/a\n", "/sys/fs/cgroup/a/cpu.max": "300000 100000\n", "/proc/self/status": "Cpus_allowed_list:\t0-1\n"},
		"garbage":        {"/proc/self/cgroup": "0::/a\n", "/sys/fs/cgroup/a/cpu.max": "lots\n"},
	} {
		files["/proc/stat"] = "cpu  1 0 0 9 0 0 0 0\ncpu0 1 0 0 4 0 0 0 0\ncpu1 0 0 0 5 0 0 0 0\n"
		r := newCPUReader(fakeProc(t, files))
		if r.quotaDir != "" {
			t.Errorf("%s: quota %v in %q, want none", name, r.quota, r.quotaDir)
		}
		if c, err := r.read(); err != nil || c.total != 10 || c.hasQuota {
			t.Errorf("%s: read = %+v, %v; want 10 ticks and no quota", name, c, err)
		}
	}
}

// cgroup v1: a container's cpu,cpuacct cgroup, seen as the root of its
// mount (or, without a cgroup namespace, below the host's root), with a
// CFS quota of half a CPU.
func TestCPUReaderQuotaV1(t *testing.T) {
	for name, c := range map[string]struct{ mountRoot, dir string }{
		"container root": {"/docker/abc", "/sys/fs/cgroup/cpu,cpuacct"},
		"host root":      {"/", "/sys/fs/cgroup/cpu,cpuacct/docker/abc"},
	} {
		t.Run(name, func(t *testing.T) {
			fs := fakeProc(t, map[string]string{
				"/proc/stat":                 "cpu  1 0 0 9 0 0 0 0\ncpu0 1 0 0 4 0 0 0 0\ncpu1 0 0 0 5 0 0 0 0\n",
				"/proc/self/status":          "Cpus_allowed_list:\t0-1\n",
				"/proc/self/cgroup":          "12:cpu,cpuacct:/docker/abc\n11:memory:/docker/abc\n0::/\n",
				"/proc/self/mountinfo":       "25 1 0:22 / /sys/fs/cgroup ro - tmpfs tmpfs ro\n30 25 0:27 " + c.mountRoot + " /sys/fs/cgroup/cpu,cpuacct ro,nosuid - cgroup cgroup rw,cpu,cpuacct\n31 25 0:28 / /sys/fs/cgroup/memory rw - cgroup cgroup rw,memory\n",
				c.dir + "/cpu.cfs_quota_us":  "50000\n",
				c.dir + "/cpu.cfs_period_us": "100000\n",
				c.dir + "/cpuacct.usage":     "2000000000\n",
			})
			r := newCPUReader(fs)
			if r.quotaDir != c.dir || r.quota != 0.5 {
				t.Fatalf("quota %v in %q, want 0.5 in %q", r.quota, r.quotaDir, c.dir)
			}
			clock := r.start
			r.now = func() time.Time { return clock }
			prev, err := r.read()
			if err != nil {
				t.Fatal(err)
			}
			clock = clock.Add(100 * time.Millisecond)
			// 45 ms of CPU in 100 ms: 90% of half a CPU.
			if err := os.WriteFile(filepath.Join(fs.root, c.dir, "cpuacct.usage"), []byte("2045000000\n"), 0o644); err != nil {
				t.Fatal(err)
			}
			now, err := r.read()
			if err != nil {
				t.Fatal(err)
			}
			if share, ok := now.busySince(prev); !ok || share < 0.899 || share > 0.901 {
				t.Fatalf("busy share %v (ok %v), want 0.9", share, ok)
			}
		})
	}
	// cpu and cpuacct mounted apart (as on this project's machines).
	r := newCPUReader(fakeProc(t, map[string]string{
		"/proc/stat":                               "cpu  1 0 0 9 0 0 0 0\n",
		"/proc/self/cgroup":                        "2:cpuacct:/job\n1:cpu:/job\n",
		"/proc/self/mountinfo":                     "32 31 0:29 / /sys/fs/cgroup/cpu rw - cgroup cgroup rw,cpu\n33 31 0:30 / /sys/fs/cgroup/cpuacct rw - cgroup cgroup rw,cpuacct\n",
		"/sys/fs/cgroup/cpu/job/cpu.cfs_quota_us":  "150000\n",
		"/sys/fs/cgroup/cpu/job/cpu.cfs_period_us": "100000\n",
		"/sys/fs/cgroup/cpuacct/job/cpuacct.usage": "7000\n",
	}))
	if r.quotaDir != "/sys/fs/cgroup/cpu/job" || r.quota != 1.5 {
		t.Fatalf("apart: quota %v in %q", r.quota, r.quotaDir)
	}
	if c, err := r.read(); err != nil || !c.hasQuota || c.used != 7 {
		t.Fatalf("apart: read = %+v, %v; want 7 µs used", c, err)
	}
	// No quota (-1), a cgroup outside the mount's root, no cpuacct: none.
	for name, files := range map[string]map[string]string{
		"unlimited": {"/proc/self/cgroup": "4:cpu,cpuacct:/a\n", "/proc/self/mountinfo": "30 25 0:27 / /sys/fs/cgroup/cpu rw - cgroup cgroup rw,cpu,cpuacct\n",
			"/sys/fs/cgroup/cpu/a/cpu.cfs_quota_us": "-1\n", "/sys/fs/cgroup/cpu/a/cpu.cfs_period_us": "100000\n", "/sys/fs/cgroup/cpu/a/cpuacct.usage": "1\n"},
		"outside the mount": {"/proc/self/cgroup": "4:cpu,cpuacct:/other\n", "/proc/self/mountinfo": "30 25 0:27 /docker/abc /sys/fs/cgroup/cpu rw - cgroup cgroup rw,cpu,cpuacct\n",
			"/sys/fs/cgroup/cpu/cpu.cfs_quota_us": "50000\n", "/sys/fs/cgroup/cpu/cpu.cfs_period_us": "100000\n", "/sys/fs/cgroup/cpu/cpuacct.usage": "1\n"},
		"no cpuacct": {"/proc/self/cgroup": "4:cpu:/\n", "/proc/self/mountinfo": "30 25 0:27 / /sys/fs/cgroup/cpu rw - cgroup cgroup rw,cpu\n",
			"/sys/fs/cgroup/cpu/cpu.cfs_quota_us": "50000\n", "/sys/fs/cgroup/cpu/cpu.cfs_period_us": "100000\n"},
	} {
		files["/proc/stat"] = "cpu  1 0 0 9 0 0 0 0\n"
		if r := newCPUReader(fakeProc(t, files)); r.quotaDir != "" {
			t.Errorf("%s: quota %v in %q, want none", name, r.quota, r.quotaDir)
		}
	}
}
