package watchstream

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path"
	"slices"
	"strconv"
	"strings"
	"time"
)

// cpuReader reads the CPU time the flush pacer judges by (Linux only):
//
//   - the busy and total time of the CPUs this process may run on: the
//     per-CPU lines of /proc/stat for the CPUs in Cpus_allowed_list of
//     /proc/self/status, so that a server pinned to 2 of a host's 64 CPUs
//     sees its 2 saturate, not a thirty-second of the host;
//   - under a cgroup CPU quota lower than those CPUs (the lowest on the
//     path from the process's cgroup up), that cgroup's CPU use against
//     the CPU time the quota allows over the same wall time, so that a
//     container limited to 1.5 CPUs is saturated at 1.5. cgroup v2: cpu.max
//     and cpu.stat usage_usec. cgroup v1: cpu.cfs_quota_us and
//     cpu.cfs_period_us, with cpuacct.usage in the same directory (cpu and
//     cpuacct mounted together, as container runtimes do), the
//     directory found through /proc/self/mountinfo.
//
// cpuTimes.busySince takes the higher of the two shares.
//
// Where the process may run and its quota are read once, when the reader
// is made. read is called from one goroutine at a time.
type cpuReader struct {
	fs      procFS
	allowed map[int]bool // CPUs the process may run on; nil: all (the aggregate line)
	// quotaDir is the cgroup directory whose quota applies, "" for none;
	// quota is the CPUs it allows; usage reads its CPU use (µs).
	quotaDir string
	quota    float64
	usage    func(dir string) (uint64, bool)
	start    time.Time
	now      func() time.Time
}

// procFS reads /proc and /sys files below root ("" for the real ones).
type procFS struct{ root string }

func (fs procFS) read(name string) ([]byte, error) { return os.ReadFile(fs.root + name) }

const cgroupRoot = "/sys/fs/cgroup"

func newCPUReader(fs procFS) *cpuReader {
	r := &cpuReader{fs: fs, now: time.Now}
	r.start = r.now()
	if b, err := fs.read("/proc/self/status"); err == nil {
		r.allowed = parseAllowedCPUs(b)
	}
	if b, err := fs.read("/proc/self/cgroup"); err == nil {
		r.quotaDir, r.quota, r.usage = cgroupQuota(fs, b)
		if r.quotaDir == "" {
			mounts, _ := fs.read("/proc/self/mountinfo")
			r.quotaDir, r.quota, r.usage = cgroupV1Quota(fs, b, mounts)
		}
	}
	if r.allowed != nil && r.quota >= float64(len(r.allowed)) {
		r.quotaDir = "" // no lower than the CPUs: their share says it all
	}
	return r
}

// cpuTimes are cumulative CPU times.
type cpuTimes struct {
	busy, total uint64 // the allowed CPUs' busy and total clock ticks
	// used and quota are the cgroup's CPU use and the CPU time its quota
	// allowed since the reader was made, in microseconds, when hasQuota
	// (there is a quota and its cpu.stat was read).
	used, quota uint64
	hasQuota    bool
}

// busySince returns the busy share of the CPU time between prev and c:
// the higher of the CPUs' share and the quota's; ok is false when no time
// passed.
func (c cpuTimes) busySince(prev cpuTimes) (share float64, ok bool) {
	if c.total > prev.total && c.busy >= prev.busy {
		share, ok = float64(c.busy-prev.busy)/float64(c.total-prev.total), true
	}
	if c.hasQuota && prev.hasQuota && c.quota > prev.quota && c.used >= prev.used {
		q := float64(c.used-prev.used) / float64(c.quota-prev.quota)
		share, ok = max(share, min(q, 1)), true
	}
	return share, ok
}

// read reads the current CPU times.
func (r *cpuReader) read() (cpuTimes, error) {
	b, err := r.fs.read("/proc/stat")
	if err != nil {
		return cpuTimes{}, err
	}
	c, err := parseCPUTimes(b, r.allowed)
	if err != nil || r.quotaDir == "" {
		return c, err
	}
	if used, ok := r.usage(r.quotaDir); ok {
		c.used, c.hasQuota = used, true
		c.quota = uint64(float64(r.now().Sub(r.start).Microseconds()) * r.quota)
	}
	return c, nil
}

// parseCPUTimes sums the /proc/stat lines of the allowed CPUs ("cpuN"),
// or takes the aggregate "cpu" line when allowed is nil. The fields are
// user nice system idle iowait irq softirq steal (guest times are part of
// user); all but idle and iowait are busy.
func parseCPUTimes(stat []byte, allowed map[int]bool) (cpuTimes, error) {
	var c cpuTimes
	found := false
	for line := range bytes.Lines(stat) {
		fields := bytes.Fields(line)
		if len(fields) == 0 || !bytes.HasPrefix(fields[0], []byte("cpu")) {
			continue
		}
		if allowed == nil {
			if string(fields[0]) != "cpu" {
				continue
			}
		} else if n, err := strconv.Atoi(string(fields[0][3:])); err != nil || !allowed[n] {
			continue
		}
		if len(fields) < 5 {
			return cpuTimes{}, fmt.Errorf("/proc/stat: short %s line", fields[0])
		}
		for i, f := range fields[1:min(len(fields), 9)] {
			n, err := strconv.ParseUint(string(f), 10, 64)
			if err != nil {
				return cpuTimes{}, errors.New("/proc/stat: " + err.Error())
			}
			c.total += n
			if i != 3 && i != 4 { // idle, iowait
				c.busy += n
			}
		}
		found = true
	}
	if !found {
		return cpuTimes{}, errors.New("/proc/stat: no line for the allowed CPUs")
	}
	return c, nil
}

// parseAllowedCPUs parses Cpus_allowed_list of /proc/self/status ("0-3,8");
// nil if absent or malformed.
func parseAllowedCPUs(status []byte) map[int]bool {
	for line := range bytes.Lines(status) {
		list, ok := bytes.CutPrefix(line, []byte("Cpus_allowed_list:"))
		if !ok {
			continue
		}
		cpus := map[int]bool{}
		for part := range strings.SplitSeq(strings.TrimSpace(string(list)), ",") {
			lo, hi, isRange := strings.Cut(part, "-")
			a, err1 := strconv.Atoi(lo)
			b, err2 := a, error(nil)
			if isRange {
				b, err2 = strconv.Atoi(hi)
			}
			if err1 != nil || err2 != nil || b < a {
				return nil
			}
			for n := a; n <= b; n++ {
				cpus[n] = true
			}
		}
		return cpus
	}
	return nil
}

// cgroupQuota finds the lowest cgroup v2 CPU quota on the path of the
// process's cgroup (the "0::" line of /proc/self/cgroup) up to the root,
// and the directory that sets it; "" and 0 when there is none.
func cgroupQuota(fs procFS, cgroup []byte) (dir string, cpus float64, usage func(string) (uint64, bool)) {
	var own string
	for line := range bytes.Lines(cgroup) {
		if p, ok := bytes.CutPrefix(bytes.TrimSpace(line), []byte("0::")); ok {
			own = path.Clean("/" + string(p))
		}
	}
	if own == "" {
		return "", 0, nil
	}
	usage = func(dir string) (uint64, bool) {
		b, err := fs.read(dir + "/cpu.stat")
		if err != nil {
			return 0, false
		}
		return statField(b, "usage_usec")
	}
	for d := path.Join(cgroupRoot, own); ; d = path.Dir(d) {
		if b, err := fs.read(d + "/cpu.max"); err == nil {
			if q, ok := parseCPUMax(b); ok && (dir == "" || q < cpus) {
				dir, cpus = d, q
			}
		}
		if d == cgroupRoot {
			return dir, cpus, usage
		}
	}
}

// cgroupV1Quota finds the lowest cgroup v1 CFS quota on the path of the
// process's cpu cgroup up to the root of its mount, and how to read that
// cgroup's usage (cpuacct.usage of the same cgroup in the cpuacct
// hierarchy, which may be mounted with cpu or apart). mountinfo maps the
// path in /proc/self/cgroup to a directory: a container sees its own
// cgroup as the mount's root. "" when there is none.
func cgroupV1Quota(fs procFS, cgroup, mountinfo []byte) (dir string, cpus float64, usage func(string) (uint64, bool)) {
	cpuDir, cpuMount, ok := v1Dir(cgroup, mountinfo, "cpu")
	_, acctMount, ok2 := v1Dir(cgroup, mountinfo, "cpuacct")
	if !ok || !ok2 {
		return "", 0, nil
	}
	usage = func(d string) (uint64, bool) {
		rel, _ := strings.CutPrefix(d, cpuMount)
		b, err := fs.read(path.Join(acctMount, rel) + "/cpuacct.usage")
		if err != nil {
			return 0, false
		}
		ns, err := strconv.ParseUint(strings.TrimSpace(string(b)), 10, 64)
		return ns / 1000, err == nil
	}
	for d := cpuDir; ; d = path.Dir(d) {
		q, err1 := fs.read(d + "/cpu.cfs_quota_us")
		p, err2 := fs.read(d + "/cpu.cfs_period_us")
		if err1 == nil && err2 == nil {
			if c, ok := parseCPUMax([]byte(strings.TrimSpace(string(q)) + " " + strings.TrimSpace(string(p)))); ok && (dir == "" || c < cpus) {
				if _, ok := usage(d); ok {
					dir, cpus = d, c
				}
			}
		}
		if d == cpuMount || d == "/" {
			return dir, cpus, usage
		}
	}
}

// v1Dir returns the directory of the process's cgroup for a v1 controller,
// and the mount point of that controller's hierarchy.
func v1Dir(cgroup, mountinfo []byte, controller string) (dir, mount string, ok bool) {
	var own string
	for line := range bytes.Lines(cgroup) {
		parts := strings.SplitN(strings.TrimSpace(string(line)), ":", 3)
		if len(parts) == 3 && slices.Contains(strings.Split(parts[1], ","), controller) {
			own = path.Clean("/" + parts[2])
		}
	}
	if own == "" {
		return "", "", false
	}
	var root string
	for line := range bytes.Lines(mountinfo) {
		// ID PARENT MAJ:MIN ROOT MOUNTPOINT OPTIONS... - FSTYPE SOURCE SUPEROPTIONS
		pre, post, found := strings.Cut(strings.TrimSpace(string(line)), " - ")
		f, g := strings.Fields(pre), strings.Fields(post)
		if !found || len(f) < 5 || len(g) < 3 || g[0] != "cgroup" || !slices.Contains(strings.Split(g[2], ","), controller) {
			continue
		}
		root, mount = path.Clean(f[3]), path.Clean(f[4])
	}
	if mount == "" {
		return "", "", false
	}
	rel, found := strings.CutPrefix(own, root)
	if !found || root != "/" && rel != "" && !strings.HasPrefix(rel, "/") {
		return "", "", false // the cgroup is outside what is mounted here
	}
	return path.Join(mount, rel), mount, true
}

// parseCPUMax parses cpu.max ("QUOTA PERIOD", QUOTA "max" for none) into
// the CPUs the quota allows.
func parseCPUMax(b []byte) (float64, bool) {
	f := strings.Fields(string(b))
	if len(f) != 2 || f[0] == "max" {
		return 0, false
	}
	q, err1 := strconv.ParseFloat(f[0], 64)
	p, err2 := strconv.ParseFloat(f[1], 64)
	if err1 != nil || err2 != nil || q <= 0 || p <= 0 {
		return 0, false
	}
	return q / p, true
}

// statField returns the value of "name N" in a cgroup stat file.
func statField(b []byte, name string) (uint64, bool) {
	for line := range bytes.Lines(b) {
		f := bytes.Fields(line)
		if len(f) == 2 && string(f[0]) == name {
			n, err := strconv.ParseUint(string(f[1]), 10, 64)
			return n, err == nil
		}
	}
	return 0, false
}
