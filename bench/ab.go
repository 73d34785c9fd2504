package bench

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"
)

// ABSide is one objwatch binary of an interleaved comparison.
type ABSide struct {
	Name   string
	Binary string
	// Args are appended to this side's `BINARY serve` (after ServeArgs):
	// one binary with and without a feature.
	Args []string
}

// ABConfig configures AB.
type ABConfig struct {
	// Sides are the two binaries; ratios are Sides[1] over Sides[0].
	Sides [2]ABSide
	// EtcdBinary runs each side's etcd (a fresh data directory per run).
	EtcdBinary string
	// Rounds is how many times each side runs (default 3).
	Rounds int
	// Dir holds the runs' data directories and logs.
	Dir string
	// ServeArgs are appended to every `BINARY serve` (e.g. audit flags).
	ServeArgs []string
	// EtcdPuts adds raw etcd puts/s on each run's fresh etcd, measured
	// after the server has stopped.
	EtcdPuts bool
	Plan     Plan
	Options  Options
	// Logf reports progress; may be nil.
	Logf func(format string, args ...any)
}

// ABReport holds every run's results: Runs[round][side].
type ABReport struct {
	Sides [2]string     `json:"sides"`
	Runs  [][2][]Result `json:"runs"`
}

// AB runs the plan against two objwatch binaries interleaved: each run
// starts a fresh etcd process and a fresh server (`BINARY serve` on that
// etcd, so the server process is measured alone), runs the scenarios,
// and stops both. Rounds alternate which side goes first (A B, B A, A B,
// ...), so that a drift of the machine's speed during the comparison
// falls on both sides alike. A failing run ends the comparison with the
// runs so far.
func AB(ctx context.Context, c ABConfig) (*ABReport, error) {
	if len(c.Plan.Scenarios) == 0 && !c.EtcdPuts {
		return nil, errNoScenario
	}
	if err := c.Plan.Validate(); err != nil {
		return nil, err
	}
	if c.Rounds <= 0 {
		c.Rounds = 3
	}
	logf := c.Logf
	if logf == nil {
		logf = func(string, ...any) {}
	}
	rep := &ABReport{Sides: [2]string{c.Sides[0].Name, c.Sides[1].Name}}
	for round := range c.Rounds {
		var runs [2][]Result
		order := []int{0, 1}
		if round%2 == 1 {
			order = []int{1, 0}
		}
		for _, i := range order {
			side := c.Sides[i]
			logf("round %d/%d: %s", round+1, c.Rounds, side.Name)
			dir := filepath.Join(c.Dir, fmt.Sprintf("%02d-%s", round, side.Name))
			rs, err := abRun(ctx, c, side, dir)
			runs[i] = rs
			if err != nil {
				rep.Runs = append(rep.Runs, runs)
				return rep, fmt.Errorf("round %d %s: %w", round+1, side.Name, err)
			}
		}
		rep.Runs = append(rep.Runs, runs)
	}
	return rep, nil
}

// abRun is one side's run: fresh etcd, fresh server, the scenarios.
func abRun(ctx context.Context, c ABConfig, side ABSide, dir string) (_ []Result, err error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	etcdURL, etcdProc, err := startEtcdProcess(ctx, c.EtcdBinary, dir)
	if err != nil {
		return nil, err
	}
	defer func() { err = errors.Join(err, etcdProc.stop()) }()

	port, err := freePort()
	if err != nil {
		return nil, err
	}
	serverDir := filepath.Join(dir, "server")
	args := append([]string{"serve", "--data-dir", serverDir, "--listen", "127.0.0.1:" + strconv.Itoa(port),
		"--etcd-servers", etcdURL}, c.ServeArgs...)
	args = append(args, side.Args...)
	srv, err := startProcess(ctx, side.Binary, args, filepath.Join(dir, "server.log"))
	if err != nil {
		return nil, err
	}
	stopped := false
	defer func() {
		if !stopped {
			err = errors.Join(err, srv.stop())
		}
	}()
	t, err := waitServing(ctx, side.Name, filepath.Join(serverDir, "kubeconfig"), srv)
	if err != nil {
		return nil, err
	}
	o := c.Options
	o.CPU = append(o.CPU[:len(o.CPU):len(o.CPU)], CPUSource{Name: "etcd", Seconds: etcdProc.cpuSeconds})
	results, err := Run(ctx, t, &o, c.Plan)
	if err != nil {
		return results, err
	}
	stopped = true
	if err := srv.stop(); err != nil {
		return results, err
	}
	if c.EtcdPuts {
		r, err := EtcdPuts(ctx, etcdURL, &o)
		for i := range r {
			r[i].Target = side.Name
			r[i].Metric = "etcd " + r[i].Metric
		}
		results = append(results, r...)
		if err != nil {
			return results, err
		}
	}
	return results, nil
}

// waitServing waits for the server's kubeconfig and for /readyz to
// answer 200.
func waitServing(ctx context.Context, name, kubeconfig string, p *process) (*Target, error) {
	deadline := time.Now().Add(2 * time.Minute)
	for {
		if t, err := LoadTarget(name, kubeconfig); err == nil {
			if _, err := t.do(ctx, http.MethodGet, "/readyz", "", nil); err == nil {
				return t, nil
			}
		}
		select {
		case <-p.done:
			return nil, fmt.Errorf("%s exited before serving: %v (log %s)", name, p.err, p.log)
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("%s not ready within 2m (log %s)", name, p.log)
		}
	}
}

// startEtcdProcess starts a one-member etcd on loopback in dir/etcd and
// waits until it answers.
func startEtcdProcess(ctx context.Context, bin, dir string) (string, *process, error) {
	cp, err := freePort()
	if err != nil {
		return "", nil, err
	}
	pp, err := freePort()
	if err != nil {
		return "", nil, err
	}
	client := fmt.Sprintf("http://127.0.0.1:%d", cp)
	peer := fmt.Sprintf("http://127.0.0.1:%d", pp)
	p, err := startProcess(ctx, bin, []string{
		"--name=bench", "--data-dir=" + filepath.Join(dir, "etcd"),
		"--listen-client-urls=" + client, "--advertise-client-urls=" + client,
		"--listen-peer-urls=" + peer, "--initial-advertise-peer-urls=" + peer,
		"--initial-cluster=bench=" + peer, "--log-level=warn",
	}, filepath.Join(dir, "etcd.log"))
	if err != nil {
		return "", nil, err
	}
	for deadline := time.Now().Add(time.Minute); ; {
		resp, err := http.Get(client + "/health")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return client, p, nil
			}
		}
		if time.Now().After(deadline) {
			return "", nil, errors.Join(fmt.Errorf("etcd not healthy within 1m (log %s)", p.log), p.stop())
		}
		select {
		case <-p.done:
			return "", nil, fmt.Errorf("etcd exited: %v (log %s)", p.err, p.log)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// process is a child process with its output in a log file. stop sends
// SIGTERM, waits up to 30 s, then kills it.
type process struct {
	cmd  *exec.Cmd
	log  string
	done chan struct{}
	err  error // set before done is closed
}

func startProcess(ctx context.Context, bin string, args []string, log string) (*process, error) {
	f, err := os.Create(log)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = f, f
	// A bench that dies takes its servers and etcds with it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		f.Close()
		return nil, fmt.Errorf("start %s: %w", bin, err)
	}
	p := &process{cmd: cmd, log: log, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		f.Close()
		close(p.done)
	}()
	return p, nil
}

// cpuSeconds is the process's user and system CPU time so far, from
// /proc/PID/stat (fields 14 and 15, in clock ticks of 1/100 s: Linux's
// USER_HZ on every architecture Go supports).
func (p *process) cpuSeconds() (float64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", p.cmd.Process.Pid))
	if err != nil {
		return 0, err
	}
	return statCPU(b)
}

// statCPU reads utime + stime of a /proc/PID/stat line. The command name
// (field 2) is in parentheses and may hold spaces, so fields are counted
// after its closing one.
func statCPU(stat []byte) (float64, error) {
	i := bytes.LastIndexByte(stat, ')')
	if i < 0 {
		return 0, fmt.Errorf("proc stat: no command name")
	}
	f := strings.Fields(string(stat[i+1:]))
	// f[0] is field 3 (state): utime is field 14, stime 15.
	if len(f) < 13 {
		return 0, fmt.Errorf("proc stat: %d fields", len(f)+2)
	}
	u, err1 := strconv.ParseUint(f[11], 10, 64)
	s, err2 := strconv.ParseUint(f[12], 10, 64)
	if err := errors.Join(err1, err2); err != nil {
		return 0, fmt.Errorf("proc stat: %w", err)
	}
	return float64(u+s) / 100, nil
}

func (p *process) stop() error {
	select {
	case <-p.done:
		return nil
	default:
	}
	p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
		return nil
	case <-time.After(30 * time.Second):
		p.cmd.Process.Kill()
		<-p.done
		return fmt.Errorf("%s did not stop within 30s of SIGTERM (log %s)", filepath.Base(p.cmd.Path), p.log)
	}
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// ABRow summarises one metric over the rounds.
type ABRow struct {
	Metric, Unit string
	// Median of each side's values over the rounds.
	A, B float64
	// Ratio is the median of the rounds' B/A ratios; Min and Max their
	// spread.
	Ratio, Min, Max float64
	Rounds          int
}

// Rows summarises the report per metric, in the order metrics first
// appear.
func (r *ABReport) Rows() []ABRow {
	type key struct{ metric, unit string }
	var keys []key
	vals := map[key]*[2][]float64{}
	ratios := map[key][]float64{}
	for _, run := range r.Runs {
		by := [2]map[key]float64{{}, {}}
		for i := range 2 {
			for _, res := range run[i] {
				k := key{res.Metric, res.Unit}
				if vals[k] == nil {
					vals[k] = &[2][]float64{}
					keys = append(keys, k)
				}
				vals[k][i] = append(vals[k][i], res.Value)
				by[i][k] = res.Value
			}
		}
		for k, a := range by[0] {
			if b, ok := by[1][k]; ok && a != 0 {
				ratios[k] = append(ratios[k], b/a)
			}
		}
	}
	rows := make([]ABRow, 0, len(keys))
	for _, k := range keys {
		rs := ratios[k]
		row := ABRow{Metric: k.metric, Unit: k.unit, A: median(vals[k][0]), B: median(vals[k][1]),
			Ratio: median(rs), Rounds: len(rs), Min: math.NaN(), Max: math.NaN()}
		if len(rs) > 0 {
			row.Min, row.Max = slices.Min(rs), slices.Max(rs)
		}
		rows = append(rows, row)
	}
	return rows
}

// WriteTable prints Rows as a table.
func (r *ABReport) WriteTable(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "metric\tunit\t%s\t%s\t%s/%s\tspread\trounds\t\n", r.Sides[0], r.Sides[1], r.Sides[1], r.Sides[0])
	for _, row := range r.Rows() {
		fmt.Fprintf(tw, "%s\t%s\t%.1f\t%.1f\t%.3f\t%.3f–%.3f\t%d\t\n", row.Metric, row.Unit, row.A, row.B, row.Ratio, row.Min, row.Max, row.Rounds)
	}
	return tw.Flush()
}

// median of vs (NaN when empty); vs is not changed.
func median(vs []float64) float64 {
	if len(vs) == 0 {
		return math.NaN()
	}
	s := slices.Clone(vs)
	slices.Sort(s)
	if n := len(s); n%2 == 1 {
		return s[n/2]
	} else {
		return (s[n/2-1] + s[n/2]) / 2
	}
}
