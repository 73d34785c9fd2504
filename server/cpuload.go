package server

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path"
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
//   - under a cgroup v2 CPU quota lower than those CPUs (cpu.max of the
//     process's cgroup or of an ancestor; the lowest counts), the
//     cgroup's CPU use (cpu.stat usage_usec) against the CPU time the
//     quota allows over the same wall time, so that a container limited
//     to 1.5 CPUs is saturated at 1.5.
//
// cpuTimes.busySince takes the higher of the two shares. cgroup v1 quotas
// are not read: there only the CPUs' share counts.
//
// Where the process may run and its quota are read once, when the reader
// is made. read is called from one goroutine at a time.
type cpuReader struct {
	fs      procFS
	allowed map[int]bool // CPUs the process may run on; nil: all (the aggregate line)
	// quotaDir is the cgroup directory whose quota applies, "" for none;
	// quota is the CPUs it allows.
	quotaDir string
	quota    float64
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
		r.quotaDir, r.quota = cgroupQuota(fs, b)
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
	if b, err := r.fs.read(r.quotaDir + "/cpu.stat"); err == nil {
		if used, ok := statField(b, "usage_usec"); ok {
			c.used, c.hasQuota = used, true
			c.quota = uint64(float64(r.now().Sub(r.start).Microseconds()) * r.quota)
		}
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
func cgroupQuota(fs procFS, cgroup []byte) (dir string, cpus float64) {
	var own string
	for line := range bytes.Lines(cgroup) {
		if p, ok := bytes.CutPrefix(bytes.TrimSpace(line), []byte("0::")); ok {
			own = path.Clean("/" + string(p))
		}
	}
	if own == "" {
		return "", 0
	}
	for d := path.Join(cgroupRoot, own); ; d = path.Dir(d) {
		if b, err := fs.read(d + "/cpu.max"); err == nil {
			if q, ok := parseCPUMax(b); ok && (dir == "" || q < cpus) {
				dir, cpus = d, q
			}
		}
		if d == cgroupRoot {
			return dir, cpus
		}
	}
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
