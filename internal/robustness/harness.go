// Package robustness is objwatch's robustness harness, after etcd's
// tests/robustness: a real etcd cluster of member processes, several
// `objwatch serve` processes on it (each through TCP proxies that can
// delay, blackhole or cut its etcd connections), Kubernetes-like traffic
// over plain HTTP+JSON beside multi-key etcd transactions written straight
// to etcd (multikey.go), faults injected at random times, and then checks
// of what every client saw against etcd's own history: watch streams
// (ordered, unique, atomic, bookmarkable, reliable, resumable), lists,
// linearizability of single-object reads and writes (porcupine, with the
// register in model.go), acknowledged writes, relists after 410, and the
// garbage collector's single leader. docs/ROBUSTNESS.md describes the
// checks and how to run it; test/robustness runs it.
//
// Run owns every process and goroutine it starts and stops them all
// before it returns.
package robustness

import (
	"context"
	"crypto/sha256"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
)

// Config is one run's settings.
type Config struct {
	// EtcdBin and ObjwatchBin are the binaries (see Build).
	EtcdBin, ObjwatchBin string
	// Dir holds data dirs; ReportDir the report and the processes' logs
	// (default Dir).
	Dir, ReportDir string
	// Duration of the traffic (faults are injected during it).
	Duration time.Duration
	// Servers, Clients, Watchers and Keys: objwatch processes (default
	// 3), traffic clients (6), watchers (4), ConfigMaps written (8).
	Servers, Clients, Watchers, Keys int
	// Faults are the kinds injected in turn (default AllFaults);
	// FaultEvery is the pause between one fault's recovery and the next
	// (default 1-2 s).
	Faults     []string
	FaultEvery time.Duration
	// Compaction is the interval between compactions (default 300 ms).
	Compaction time.Duration
	// GCLease is the servers' --gc-lease-duration (default 2 s).
	GCLease time.Duration
	// Namespaces puts each etcd member in a network namespace of its own
	// (root and iproute2 only: NamespacesAvailable), which the partition
	// faults need.
	Namespaces bool
	// Override puts the ConfigMaps the traffic writes on an etcd cluster
	// of their own (--etcd-servers-overrides=/configmaps#...): the
	// 3-member cluster the faults, the checks' history and the compaction
	// act on. The servers' main cluster (one member: namespaces, the
	// collector's lease, RBAC) is compacted alongside and not faulted.
	Override bool
	// NoTxns turns off the writer of multi-key transactions (txnWriter):
	// by default it writes 2–5 ConfigMaps (txnKeys) in one etcd revision
	// every 100–300 ms, straight to etcd, beside the clients' traffic.
	NoTxns bool
	// DebugFault is passed to every server's --debug-fault (a test fault).
	DebugFault string
	// LinTimeout bounds porcupine's search (default 60 s).
	LinTimeout time.Duration
	// SampleEvery is how often each process's memory, goroutines and
	// open files are sampled (default 10 s); runs of 10 minutes or more
	// are checked for growth (checkResources).
	SampleEvery time.Duration
	Seed        uint64
	// Logf receives progress lines (default: none).
	Logf func(format string, args ...any)
}

func (c *Config) defaults() {
	c.Servers = cmpOr(c.Servers, 3)
	c.Clients = cmpOr(c.Clients, 6)
	c.Watchers = cmpOr(c.Watchers, 4)
	c.Keys = cmpOr(c.Keys, 8)
	c.FaultEvery = cmpOr(c.FaultEvery, 1500*time.Millisecond)
	c.Compaction = cmpOr(c.Compaction, 300*time.Millisecond)
	c.GCLease = cmpOr(c.GCLease, 2*time.Second)
	c.LinTimeout = cmpOr(c.LinTimeout, 60*time.Second)
	c.SampleEvery = cmpOr(c.SampleEvery, 10*time.Second)
	if c.Faults == nil {
		c.Faults = AllFaults
	}
	if c.ReportDir == "" {
		c.ReportDir = c.Dir
	}
	if c.Logf == nil {
		c.Logf = func(string, ...any) {}
	}
	if c.Seed == 0 {
		c.Seed = uint64(time.Now().UnixNano())
	}
}

func cmpOr[T comparable](v, def T) T {
	var zero T
	if v == zero {
		return def
	}
	return v
}

// Build builds etcd (its main package, go.etcd.io/etcd/server/v3, a
// dependency of this module) and objwatch into dir. objwatch is built with
// its test faults (the build tag objects.DebugFaultTag), which
// Config.DebugFault arms.
func Build(ctx context.Context, dir string) (etcdBin, objwatchBin string, err error) {
	etcdBin, objwatchBin = filepath.Join(dir, "etcd"), filepath.Join(dir, "objwatch")
	for _, b := range [][]string{
		{"-o", etcdBin, "go.etcd.io/etcd/server/v3"},
		{"-tags", "objwatch_debugfault", "-o", objwatchBin, "github.com/objwatch/objwatch/cmd/objwatch"},
	} {
		pkg := b[len(b)-1]
		out, err := exec.CommandContext(ctx, "go", append([]string{"build"}, b...)...).CombinedOutput()
		if err != nil {
			return "", "", fmt.Errorf("go build %s: %v\n%s", pkg, err, out)
		}
	}
	return etcdBin, objwatchBin, nil
}

// NamespacesAvailable says why etcd members cannot get network namespaces
// here (Config.Namespaces), or nil.
func NamespacesAvailable() error { return netnsAvailable() }

// BuildCached builds as Build into a directory of the user's cache named
// for the caller (name) and the working directory (a checkout's tests
// keep their own binaries): go build leaves an up-to-date binary alone,
// where linking objwatch anew takes most of a minute on a loaded machine.
func BuildCached(ctx context.Context, name string) (etcdBin, objwatchBin string, err error) {
	cache, err := os.UserCacheDir()
	if err != nil {
		cache = os.TempDir()
	}
	wd, _ := os.Getwd()
	dir := filepath.Join(cache, name, fmt.Sprintf("%x", sha256.Sum256([]byte(wd)))[:16])
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", "", err
	}
	return Build(ctx, dir)
}

// Report is a run's outcome; Run also writes it to Config.ReportDir.
type Report struct {
	Seed       uint64         `json:"seed"`
	Duration   time.Duration  `json:"duration"`
	Faults     []FaultRecord  `json:"faults"`
	Operations map[string]int `json:"operations"` // "kind code" → count ("update 0": no definite answer)
	Events     int            `json:"eventsChecked"`
	Segments   int            `json:"watchSegments"`
	Resumes    int            `json:"resumes"`
	Gone       int            `json:"gone410"`
	Relists    int            `json:"relistsAfter410"`
	Paged      int            `json:"pagedListsChecked"`
	Acked      int            `json:"acknowledgedWrites"`
	// Txns counts the multi-key transactions by outcome ("committed",
	// "failed": refused or unknown); TxnEvents the events of the
	// committed ones (the transactions are in txns.json).
	Txns      map[string]int `json:"txns"`
	TxnEvents int            `json:"txnEvents"`
	Revisions int64          `json:"etcdRevision"`
	History   int            `json:"historyEvents"`
	Leaders   []Span         `json:"leaderSpans"`
	Leases    []LeaseRecord  `json:"leaseHolders"`
	Failovers int            `json:"gcFailovers"`
	Porcupine string         `json:"porcupine"`
	// Resources is each process's first and last sample and its peaks
	// (the samples are in resources.json, drawn in resources-*.svg).
	Resources  []ResourceSummary `json:"resources"`
	Violations []Violation       `json:"violations"`
	// Findings are breaks of a guarantee that objwatch documents as
	// tolerated (the collector's stale leader after a pause).
	Findings []Violation `json:"findings"`
	// HarnessErrors are failures of the harness itself (not of the
	// server): a fault it could not inject or recover from.
	HarnessErrors []string `json:"harnessErrors,omitempty"`
	Dir           string   `json:"dir"`
}

// Summary is the report in a few lines.
func (r *Report) Summary() string {
	var b strings.Builder
	fmt.Fprintf(&b, "robustness run (seed %d): %v of traffic, report in %s\n", r.Seed, r.Duration.Round(time.Second), r.Dir)
	fmt.Fprintf(&b, "faults (%d):\n", len(r.Faults))
	for _, f := range r.Faults {
		fmt.Fprintf(&b, "  %s\n", f)
	}
	keys := slices.Sorted(func(yield func(string) bool) {
		for k := range r.Operations {
			if !yield(k) {
				return
			}
		}
	})
	var ops []string
	for _, k := range keys {
		ops = append(ops, fmt.Sprintf("%s:%d", k, r.Operations[k]))
	}
	fmt.Fprintf(&b, "operations: %s\n", strings.Join(ops, " "))
	fmt.Fprintf(&b, "etcd history: %d ConfigMap events up to rev %d; watch: %d segments (%d resumed), %d events checked; %d × 410, %d relists after 410; %d paged lists; %d acknowledged writes\n",
		r.History, r.Revisions, r.Segments, r.Resumes, r.Events, r.Gone, r.Relists, r.Paged, r.Acked)
	if len(r.Txns) > 0 {
		fmt.Fprintf(&b, "multi-key txns: %d committed (%d events, 2–5 a revision), %d failed or unknown\n", r.Txns["committed"], r.TxnEvents, r.Txns["failed"])
	}
	fmt.Fprintf(&b, "gc leader: %d spans, %d lease holder changes (%d failovers); porcupine: %s\n", len(r.Leaders), len(r.Leases), r.Failovers, r.Porcupine)
	for _, rs := range r.Resources {
		fmt.Fprintf(&b, "%s\n", rs)
	}
	for _, f := range r.Findings {
		fmt.Fprintf(&b, "finding (tolerated by design): %s\n", strings.ReplaceAll(f.String(), "\n", "\n  "))
	}
	for _, e := range r.HarnessErrors {
		fmt.Fprintf(&b, "harness error: %s\n", e)
	}
	fmt.Fprintf(&b, "violations: %d\n", len(r.Violations))
	for i, v := range r.Violations {
		if i == 20 {
			fmt.Fprintf(&b, "  ... %d more in violations.txt\n", len(r.Violations)-i)
			break
		}
		fmt.Fprintf(&b, "  %s\n", strings.ReplaceAll(v.String(), "\n", "\n  "))
	}
	return b.String()
}

// Count returns the violations of one check.
func (r *Report) Count(check string) int {
	n := 0
	for _, v := range r.Violations {
		if v.Check == check {
			n++
		}
	}
	return n
}

// run is one run's state, used by Run's goroutines.
type run struct {
	cfg     Config
	start   time.Time
	logDir  string
	etcd    *etcdCluster // where the ConfigMaps are
	main    *etcdCluster // the servers' main cluster with Config.Override, else nil
	servers []*apiServer
	hc      *http.Client // admin, for the harness's own requests
	tls     *tls.Config

	mu      sync.Mutex
	samples []LeaderSample
}

func (r *run) since() time.Duration { return time.Since(r.start) }

// currentLeader is the server whose last good sample said it leads.
func (r *run) currentLeader() *apiServer {
	r.mu.Lock()
	defer r.mu.Unlock()
	last := map[string]LeaderSample{}
	for _, s := range r.samples {
		if s.OK {
			last[s.Server] = s
		}
	}
	for _, srv := range r.servers {
		if s, ok := last[srv.name]; ok && s.Leader {
			return srv
		}
	}
	return nil
}

func (r *run) newClient() *http.Client {
	return &http.Client{Transport: &http.Transport{TLSClientConfig: r.tls.Clone(), ForceAttemptHTTP2: true, MaxIdleConnsPerHost: 4}}
}

// Run runs the harness once: cluster, servers, traffic with faults, then
// the checks. An error means the harness could not run (not a violation).
func Run(ctx context.Context, cfg Config) (_ *Report, err error) {
	cfg.defaults()
	r := &run{cfg: cfg, start: time.Now(), logDir: filepath.Join(cfg.ReportDir, "logs")}
	for _, d := range []string{r.logDir, cfg.ReportDir} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return nil, err
		}
	}
	rng := rand.New(rand.NewPCG(cfg.Seed, 1))
	if r.tls, err = sharedPKI(filepath.Join(cfg.Dir, "pki")); err != nil {
		return nil, err
	}
	r.hc = r.newClient()
	defer r.hc.CloseIdleConnections()
	if r.etcd, err = startEtcd(ctx, cfg.EtcdBin, "etcd", filepath.Join(cfg.Dir, "etcd"), r.logDir, 3, cfg.Namespaces); err != nil {
		return nil, err
	}
	defer r.etcd.close()
	mainEndpoints, overrides := r.etcd.endpoints(), []string(nil)
	if cfg.Override {
		if r.main, err = startEtcd(ctx, cfg.EtcdBin, "etcd-main", filepath.Join(cfg.Dir, "etcd-main"), r.logDir, 1, false); err != nil {
			return nil, err
		}
		defer r.main.close()
		mainEndpoints, overrides = r.main.endpoints(), r.etcd.endpoints()
	}
	defer func() {
		for _, s := range r.servers {
			s.close()
		}
	}()
	cfg.Logf("etcd cluster up after %v", r.since().Round(time.Millisecond))

	// The history starts before anything is written.
	st, err := r.etcd.cli.Get(ctx, "robustness-start")
	if err != nil {
		return nil, err
	}
	tctx, tcancel := context.WithCancel(ctx)
	tr := watchTruth(tctx, r.etcd.cli, st.Header.Revision, r.since)
	defer func() { tcancel(); <-tr.done }()

	extra := []string{"--bookmark-interval=250ms", "--gc-lease-duration=" + cfg.GCLease.String()}
	if cfg.DebugFault != "" {
		extra = append(extra, "--debug-fault="+cfg.DebugFault)
	}
	for i := range cfg.Servers {
		s, err := newAPIServer(cfg.ObjwatchBin, fmt.Sprintf("objwatch-%c", 'a'+i), filepath.Join(cfg.Dir, "servers"), filepath.Join(cfg.Dir, "pki"), r.logDir, mainEndpoints, overrides, extra)
		if err != nil {
			return nil, err
		}
		r.servers = append(r.servers, s)
		if err := s.startReady(ctx, r.hc); err != nil {
			return nil, err
		}
	}
	cfg.Logf("%d servers ready after %v", len(r.servers), r.since().Round(time.Millisecond))
	ns := map[string]any{"apiVersion": "v1", "kind": "Namespace", "metadata": map[string]any{"name": Namespace}}
	if code, _, err := DoJSON(ctx, r.hc, http.MethodPost, r.servers[0].url+"/api/v1/namespaces", ns); err != nil || code != http.StatusCreated {
		return nil, fmt.Errorf("create namespace: %d %v", code, err)
	}

	// Traffic, watchers, leader polls and compaction until the end;
	// faults meanwhile.
	endpointsFor := func() []endpoint {
		hc := r.newClient()
		var eps []endpoint
		for _, s := range r.servers {
			eps = append(eps, endpoint{name: s.name, url: s.url, hc: hc})
		}
		return eps
	}
	var keys []string
	for i := range cfg.Keys {
		keys = append(keys, fmt.Sprintf("k%d", i))
	}
	trafficStart := r.since()
	wctx, wcancel := context.WithTimeout(ctx, cfg.Duration)
	defer wcancel()
	var wg sync.WaitGroup
	clients := make([]*client, cfg.Clients)
	for i := range clients {
		c := &client{id: i, since: r.since, servers: endpointsFor(), keys: keys, rng: rand.New(rand.NewPCG(cfg.Seed, uint64(10+i))), timeout: 3 * time.Second}
		clients[i] = c
		wg.Go(func() { c.run(wctx); c.servers[0].hc.CloseIdleConnections() })
	}
	watchers := make([]*watcher, cfg.Watchers)
	for i := range watchers {
		w := &watcher{id: i, since: r.since, servers: endpointsFor(), rng: rand.New(rand.NewPCG(cfg.Seed, uint64(100+i))), idle: 3 * time.Second}
		watchers[i] = w
		wg.Go(func() { w.run(wctx); w.servers[0].hc.CloseIdleConnections() })
	}
	for _, s := range r.servers {
		wg.Go(func() { r.pollLeader(wctx, s) })
	}
	var txns *txnWriter
	if !cfg.NoTxns {
		txns = &txnWriter{cli: r.etcd.cli, since: r.since, rng: rand.New(rand.NewPCG(cfg.Seed, 2))}
		wg.Go(func() { txns.run(wctx) })
	}
	var compactions int
	wg.Go(func() { compactions = r.compact(wctx, tr) })
	var resources []ResourceSample
	wg.Go(func() { resources = r.sampleResources(wctx, trafficStart) })
	var faults []FaultRecord
	wg.Go(func() {
		sleep(wctx, cfg.FaultEvery)
		for i := 0; ; i++ {
			if dl, _ := wctx.Deadline(); time.Until(dl) < 3*time.Second || wctx.Err() != nil {
				return
			}
			kind := cfg.Faults[i%len(cfg.Faults)]
			f := r.inject(ctx, kind, rng)
			cfg.Logf("fault %s", f)
			faults = append(faults, f)
			sleep(wctx, cfg.FaultEvery/2+time.Duration(rng.Int64N(int64(cfg.FaultEvery))))
		}
	})
	wg.Wait()
	runEnd := r.since()
	cfg.Logf("traffic ended after %v, %d compactions; checking", (runEnd - trafficStart).Round(time.Millisecond), compactions)

	// Recover, read the final state from every server, complete the
	// history.
	// A harness failure here leaves the checks of what was recorded to run.
	var harnessErrs []string
	if err := r.recover(ctx); err != nil {
		harnessErrs = append(harnessErrs, "recovery after the run: "+err.Error())
	}
	final := map[string]map[string]Item{}
	for _, s := range r.servers {
		code, obj, err := DoJSON(ctx, r.hc, http.MethodGet, endpoint{url: s.url}.base(), nil)
		if err != nil || code != http.StatusOK {
			harnessErrs = append(harnessErrs, fmt.Sprintf("final list from %s: %d %v", s.name, code, err))
			continue
		}
		m := map[string]Item{}
		for _, it := range obj.Items {
			m[it.Metadata.Name] = Item{Value: it.Data["v"], RV: it.RV(), UID: it.Metadata.UID}
		}
		final[s.name] = m
	}
	// Bounded: after a failed recovery etcd may have no quorum, and an
	// unbounded Get would wait for it forever.
	ectx, ecancel := context.WithTimeout(ctx, 30*time.Second)
	cur, err := r.etcd.cli.Get(ectx, "robustness-end")
	ecancel()
	if err != nil {
		return nil, fmt.Errorf("etcd's revision after the run: %w (harness errors: %v)", err, harnessErrs)
	}
	if err := tr.waitFor(ctx, r.etcd.cli, cur.Header.Revision); err != nil {
		return nil, err
	}
	history, leases, terr := tr.history()
	if terr != nil {
		return nil, terr
	}
	rep := &Report{Seed: cfg.Seed, Duration: runEnd - trafficStart, Faults: faults, Operations: map[string]int{}, Revisions: cur.Header.Revision, History: len(history), Leases: leases, Dir: cfg.ReportDir, HarnessErrors: harnessErrs}
	var ops []Op
	var lists []PagedList
	for _, c := range clients {
		ops = append(ops, c.ops...)
		lists = append(lists, c.lists...)
	}
	for _, op := range ops {
		rep.Operations[fmt.Sprintf("%s %d", op.In.Kind, op.Out.Code)]++
	}
	var segs []Segment
	var relists []Relist
	for _, w := range watchers {
		segs = append(segs, w.segments...)
		relists = append(relists, w.relists...)
		rep.Gone += w.gone
		for _, rl := range w.relists {
			if rl.After410 {
				rep.Relists++
			}
		}
	}
	rep.Segments = len(segs)
	for _, s := range segs {
		if s.Resumed {
			rep.Resumes++
		}
	}
	for i := 1; i < len(leases); i++ {
		if leases[i].Holder != "" {
			rep.Failovers++
		}
	}
	vs, n := checkWatches(segs, history)
	rep.Events = n
	rep.Violations = append(rep.Violations, vs...)
	rep.Violations = append(rep.Violations, checkRelists(relists, segs, history, runEnd)...)
	var listGone int
	vs, rep.Paged, listGone = checkPagedLists(lists, history)
	rep.Gone += listGone
	rep.Violations = append(rep.Violations, vs...)
	vs, rep.Acked = checkAcknowledged(ops, history, final)
	rep.Violations = append(rep.Violations, vs...)
	var txnList []Txn
	if txns != nil {
		txnList = txns.txns
		rep.Txns = map[string]int{}
		for _, t := range txnList {
			if t.Rev != 0 {
				rep.Txns["committed"]++
				rep.TxnEvents += len(t.Ops)
			} else {
				rep.Txns["failed"]++
			}
		}
		vs, n := checkTxns(txnList, history)
		rep.Acked += n
		rep.Violations = append(rep.Violations, vs...)
	}
	r.mu.Lock()
	samples := r.samples
	r.mu.Unlock()
	var pauses []Pause
	for _, f := range faults {
		if f.Kind == FaultPauseServer {
			pauses = append(pauses, Pause{Server: f.Target, Stop: f.Start, Cont: f.End})
		}
	}
	vs, rep.Findings, rep.Leaders = checkLeaders(samples, leases, pauses)
	rep.Violations = append(rep.Violations, vs...)
	rep.Violations = append(rep.Violations, checkResources(resources, runEnd-trafficStart)...)
	rep.Resources = summarizeResources(resources)
	if err := writeResourceCharts(cfg.ReportDir, resources); err != nil {
		cfg.Logf("resource charts: %v", err)
	}
	res, vs, verr := checkLinearizable(ops, cfg.LinTimeout, filepath.Join(cfg.ReportDir, "linearizability.html"))
	rep.Porcupine = string(res)
	rep.Violations = append(rep.Violations, vs...)
	if verr != nil {
		cfg.Logf("porcupine visualization: %v", verr)
	}
	return rep, writeReport(rep, ops, txnList, segs, relists, lists, history, samples, resources)
}

// pollLeader samples s's objwatch_gc_leader metric every 100 ms.
func (r *run) pollLeader(ctx context.Context, s *apiServer) {
	hc := r.newClient()
	defer hc.CloseIdleConnections()
	for ctx.Err() == nil {
		pctx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
		call := r.since()
		leader, err := s.gcLeader(pctx, hc)
		ret := r.since()
		cancel()
		if ctx.Err() != nil {
			return
		}
		r.mu.Lock()
		r.samples = append(r.samples, LeaderSample{Server: s.name, Call: call, Return: ret, Leader: leader, OK: err == nil})
		r.mu.Unlock()
		sleep(ctx, 100*time.Millisecond)
	}
}

// compact compacts etcd every Config.Compaction to its current revision,
// but never past what the history has read; the main cluster of
// Config.Override to its current revision.
func (r *run) compact(ctx context.Context, tr *truth) int {
	n := 0
	var last, lastMain int64
	for {
		sleep(ctx, r.cfg.Compaction)
		if ctx.Err() != nil {
			return n
		}
		cctx, cancel := context.WithTimeout(ctx, time.Second)
		cur, err := r.etcd.cli.Get(cctx, "robustness-compact")
		if err == nil {
			rev := min(cur.Header.Revision, tr.revision())
			if rev > last {
				if _, err := r.etcd.cli.Compact(cctx, rev); err == nil || errors.Is(err, rpctypes.ErrCompacted) {
					last = rev
					n++
				}
			}
		}
		if r.main != nil {
			if cur, err := r.main.cli.Get(cctx, "robustness-compact"); err == nil && cur.Header.Revision > lastMain {
				if _, err := r.main.cli.Compact(cctx, cur.Header.Revision); err == nil || errors.Is(err, rpctypes.ErrCompacted) {
					lastMain = cur.Header.Revision
				}
			}
		}
		cancel()
	}
}

// writeReport writes the report and the raw histories to rep.Dir.
func writeReport(rep *Report, ops []Op, txns []Txn, segs []Segment, relists []Relist, lists []PagedList, history []Event, samples []LeaderSample, resources []ResourceSample) error {
	files := map[string]any{
		"report.json": rep, "operations.json": ops, "watches.json": segs, "relists.json": relists,
		"paged-lists.json": lists, "etcd-history.json": history, "gc-leader-samples.json": samples,
		"resources.json": resources, "txns.json": txns,
	}
	for name, v := range files {
		b, err := json.MarshalIndent(v, "", " ")
		if err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(rep.Dir, name), b, 0o600); err != nil {
			return err
		}
	}
	var vb strings.Builder
	for _, v := range rep.Violations {
		vb.WriteString(v.String() + "\n")
	}
	if err := os.WriteFile(filepath.Join(rep.Dir, "violations.txt"), []byte(vb.String()), 0o600); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(rep.Dir, "summary.txt"), []byte(rep.Summary()), 0o600)
}
