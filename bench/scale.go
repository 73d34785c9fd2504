package bench

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// The scale scenarios measure how cost grows with the data: objects loaded
// in steps (10k, 100k, 1M) into one server, measured after each step, and
// watches opened in steps on one or several servers of one etcd. Each
// number is a Point: a metric at one size.

// Point is one measured number at one size: X objects or X watches.
type Point struct {
	Target string  `json:"target"`
	Metric string  `json:"metric"`
	X      int     `json:"x"`
	Value  float64 `json:"value"`
	Unit   string  `json:"unit"`
}

// at turns results measured at size x into points.
func at(x int, rs []Result) []Point {
	out := make([]Point, len(rs))
	for i, r := range rs {
		out[i] = Point{r.Target, r.Metric, x, r.Value, r.Unit}
	}
	return out
}

// scaleName is the name of object i of the scale scenarios; seven digits
// keep a list's order (by name) the order of creation up to 10M.
func scaleName(i int) string { return fmt.Sprintf("scale-%07d", i) }

// Load creates objects from..to-1 (named by scaleName) with o.Clients
// concurrent clients and reports the create rate. An object that already
// exists counts as created (a retried create whose first try got through);
// 429 and 5xx answers are retried a few times.
func Load(ctx context.Context, t *Target, o *Options, from, to int) ([]Result, error) {
	all, elapsed, err := parallel(ctx, o.Clients, to-from, func(i int) error {
		i += from
		if i%10000 == 0 {
			o.progress("%s: load %d/%d", t.Name, i, to)
		}
		body := o.object(scaleName(i))
		var err error
		for try := 0; try < 5; try++ {
			_, err = t.do(ctx, "POST", o.objectsPath(), "application/json", body)
			if err == nil || statusOf(err) == http.StatusConflict {
				return nil
			}
			if s := statusOf(err); s != http.StatusTooManyRequests && s/100 != 5 {
				return err
			}
			time.Sleep(time.Duration(try+1) * 200 * time.Millisecond)
		}
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("%s: load: %w", t.Name, err)
	}
	return []Result{
		{t.Name, "creates/s", float64(len(all)) / elapsed.Seconds(), "ops/s"},
		{t.Name, "create p99", ms(all.pct(0.99)), "ms"},
	}, nil
}

// statusError is a non-2xx answer.
type statusError struct {
	code int
	msg  string
}

func (e *statusError) Error() string { return e.msg }

// statusOf is the HTTP status of an error from Target.do, 0 if none.
func statusOf(err error) int {
	var se *statusError
	if errors.As(err, &se) {
		return se.code
	}
	return 0
}

// The lists of ScaleLists, each timed to the last byte of the answer.
var scaleLists = []struct {
	metric, query string
	paged         bool
}{
	// From the watch cache, as fresh as it is.
	{"list RV=0", "resourceVersion=0", false},
	// Consistent: the server reads etcd's current revision (a quorum
	// read) and serves from its cache once it has caught up with it.
	{"consistent list", "", false},
	// Pages of 500 from a consistent first page, following continue.
	{"paginated list (limit=500)", "limit=500", true},
	// The fixed cost of a consistent read, whatever the size.
	{"consistent list limit=1", "limit=1", false},
}

// ScaleLists times each list of scaleLists o.ListRuns times and reports
// the medians; every full list must return at least n objects. The
// paginated list is walked once when n > pagedRunsUpTo (it is slow), and
// its pages are timed too ("paginated list page p50"); with maxPages > 0
// the walk stops after that many pages and only the page time is
// reported. The client only counts the items of the answers, so that a
// list of a million objects costs it no decoding.
func ScaleLists(ctx context.Context, t *Target, o *Options, n, maxPages int) ([]Result, error) {
	var out []Result
	for _, l := range scaleLists {
		var lat, pageLat latencies
		runs := max(o.ListRuns, 1)
		if l.paged && n > pagedRunsUpTo {
			runs = 1
		}
		capped := false
		for run := range runs {
			o.progress("%s: %s of %d, %d/%d", t.Name, l.metric, n, run+1, runs)
			t0 := time.Now()
			items, pages, err := listAll(ctx, t, o.objectsPath(), l.query, l.paged, maxPages, &pageLat)
			if err != nil {
				return out, fmt.Errorf("%s: %s: %w", t.Name, l.metric, err)
			}
			lat = append(lat, time.Since(t0))
			capped = l.paged && maxPages > 0 && pages >= maxPages
			if want := min(n, limitOf(l.query, l.paged)); items < want && !capped {
				return out, fmt.Errorf("%s: %s returned %d objects in %d pages, want %d", t.Name, l.metric, items, pages, want)
			}
		}
		if !capped {
			out = append(out, Result{t.Name, l.metric + " p50", ms(lat.pct(0.5)), "ms"})
		}
		if l.paged {
			out = append(out, Result{t.Name, "paginated list page p50", ms(pageLat.pct(0.5)), "ms"})
		}
	}
	return out, nil
}

// pagedRunsUpTo is the largest size whose paginated list ScaleLists walks
// o.ListRuns times.
const pagedRunsUpTo = 20000

// limitOf is the most items a list with query may return (n unlimited).
func limitOf(query string, paged bool) int {
	v, _ := url.ParseQuery(query)
	if l, err := strconv.Atoi(v.Get("limit")); err == nil && !paged {
		return l
	}
	return int(^uint(0) >> 1)
}

// listAll lists path with query, following continue tokens if paged (up
// to maxPages pages if > 0), and returns the items and pages it got; each
// page's latency is appended to pageLat if set.
func listAll(ctx context.Context, t *Target, path, query string, paged bool, maxPages int, pageLat *latencies) (items, pages int, err error) {
	cont := ""
	for {
		q := query
		if cont != "" {
			q += "&continue=" + url.QueryEscape(cont)
		}
		t0 := time.Now()
		n, next, err := t.countList(ctx, path+"?"+q)
		if err != nil {
			return items, pages, err
		}
		if pageLat != nil {
			*pageLat = append(*pageLat, time.Since(t0))
		}
		items += n
		pages++
		if !paged || next == "" || (maxPages > 0 && pages >= maxPages) {
			return items, pages, nil
		}
		cont = next
	}
}

// countList GETs a list and returns how many items it has and its continue
// token, reading the answer as a stream.
func (t *Target) countList(ctx context.Context, path string) (int, string, error) {
	req, err := http.NewRequestWithContext(ctx, "GET", t.Host+path, nil)
	if err != nil {
		return 0, "", err
	}
	req.Header.Set("Accept", "application/json")
	resp, err := t.Client.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 300))
		return 0, "", &statusError{resp.StatusCode, fmt.Sprintf("GET %s: %d %s", path, resp.StatusCode, bytes.TrimSpace(b))}
	}
	c := newItemCounter()
	if _, err := io.Copy(c, resp.Body); err != nil {
		return 0, "", err
	}
	return c.items, c.cont(), nil
}

// itemCounter counts the items of a streamed list of benchmark objects (the
// occurrences of their kind) and finds the list's continue token, without
// decoding the list. It is not safe for concurrent use.
type itemCounter struct {
	items int
	head  []byte // the start of the list (metadata first: Kubernetes' order)
	end   []byte // its last bytes (metadata last: keys in sorted order)
}

const (
	itemKey     = `"kind":"BenchObject"`
	continueKey = `"continue":"`
	edgeLen     = 4 << 10 // bytes of the start and of the end kept
)

func newItemCounter() *itemCounter { return &itemCounter{} }

func (c *itemCounter) Write(p []byte) (int, error) {
	if len(c.head) < edgeLen {
		c.head = append(c.head, p[:min(len(p), edgeLen-len(c.head))]...)
	}
	key := []byte(itemKey)
	// A key within the last bytes so far (those before p) and p's first
	// bytes that starts before p and ends in it: counted here, once.
	tail := c.end[max(len(c.end)-(len(key)-1), 0):]
	edge := append(tail[:len(tail):len(tail)], p[:min(len(p), len(key)-1)]...)
	c.items += bytes.Count(edge, key) + bytes.Count(p, key)
	if len(p) >= edgeLen {
		c.end = append(c.end[:0], p[len(p)-edgeLen:]...)
	} else {
		c.end = append(c.end, p...)
		c.end = c.end[:copy(c.end, c.end[max(len(c.end)-edgeLen, 0):])]
	}
	return len(p), nil
}

// cont is the list's metadata.continue, "" if it has none: looked for
// before the items, then after the last one.
func (c *itemCounter) cont() string {
	head := c.head
	if i := bytes.Index(head, []byte(`"items":`)); i >= 0 {
		if t := tokenAfter(head[:i]); t != "" {
			return t
		}
	}
	end := c.end
	if i := bytes.LastIndex(end, []byte(itemKey)); i >= 0 {
		end = end[i:]
	}
	return tokenAfter(end)
}

// tokenAfter returns the string value of the last "continue" key in b.
func tokenAfter(b []byte) string {
	i := bytes.LastIndex(b, []byte(continueKey))
	if i < 0 {
		return ""
	}
	rest := b[i+len(continueKey):]
	j := bytes.IndexByte(rest, '"')
	if j < 0 {
		return ""
	}
	return string(rest[:j])
}

// CacheStart restarts the server with restart (which must return once the
// new server process has started) and measures, from restart's return,
// the time until /readyz answers 200 ("readyz after restart") and until
// the first list with resourceVersion=0 (served from the watch cache)
// returns all n objects ("first RV=0 list after restart", which includes
// that list's own latency). Lists are sent once /readyz is ok and retried
// every 100 ms while they fail or return fewer objects.
func CacheStart(ctx context.Context, t *Target, o *Options, n int, restart func(context.Context) error) ([]Result, error) {
	if err := restart(ctx); err != nil {
		return nil, fmt.Errorf("%s: restart: %w", t.Name, err)
	}
	t.Client.CloseIdleConnections()
	t0 := time.Now()
	deadline := t0.Add(30 * time.Minute)
	var ready, full time.Duration
	for {
		if _, err := t.do(ctx, "GET", "/readyz", "", nil); err == nil {
			ready = time.Since(t0)
			break
		}
		if ctx.Err() != nil || time.Now().After(deadline) {
			return nil, fmt.Errorf("%s: never ready after restart", t.Name)
		}
		time.Sleep(50 * time.Millisecond)
	}
	o.progress("%s: ready %v after restart", t.Name, ready.Round(time.Millisecond))
	for {
		items, _, err := listAll(ctx, t, o.objectsPath(), "resourceVersion=0", false, 0, nil)
		if err == nil && items >= n {
			full = time.Since(t0)
			break
		}
		if ctx.Err() != nil || time.Now().After(deadline) {
			return nil, fmt.Errorf("%s: no full list after restart: %d items, %v", t.Name, items, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	return []Result{
		{t.Name, "readyz after restart", ready.Seconds(), "s"},
		{t.Name, "first RV=0 list after restart", full.Seconds(), "s"},
	}, nil
}

// ShellRestart is a CacheStart restart that runs command with sh -c; its
// output goes to this process's standard error.
func ShellRestart(command string) func(context.Context) error {
	return func(ctx context.Context) error {
		cmd := exec.CommandContext(ctx, "sh", "-c", command)
		cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
		return cmd.Run()
	}
}

// RaiseFileLimit raises this process's open-file limit to want (the hard
// limit too, which needs privilege; else as far as the hard limit) and
// returns the soft limit it ends with.
func RaiseFileLimit(want uint64) (uint64, error) {
	var l syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &l); err != nil {
		return 0, err
	}
	if l.Cur >= want {
		return l.Cur, nil
	}
	if l.Max < want {
		if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &syscall.Rlimit{Cur: want, Max: want}); err == nil {
			return want, nil
		}
	}
	l.Cur = min(want, l.Max)
	err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &l)
	return l.Cur, err
}

// MemoryGuard cancels its context when the machine's available memory
// (MemAvailable in /proc/meminfo) drops below floor bytes, checked every
// second, so that a run that would exhaust a shared machine stops. Stop
// ends its goroutine; Err says whether it fired.
type MemoryGuard struct {
	cancel context.CancelFunc
	done   chan struct{}
	mu     sync.Mutex
	err    error
}

// GuardMemory starts a MemoryGuard on ctx.
func GuardMemory(ctx context.Context, floor uint64) (context.Context, *MemoryGuard) {
	ctx, cancel := context.WithCancel(ctx)
	g := &MemoryGuard{cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(g.done)
		tick := time.NewTicker(time.Second)
		defer tick.Stop()
		for {
			if avail, err := memAvailable(); err == nil && avail < floor {
				g.mu.Lock()
				g.err = fmt.Errorf("aborted: available memory %d MiB below %d MiB", avail>>20, floor>>20)
				g.mu.Unlock()
				cancel()
				return
			}
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
		}
	}()
	return ctx, g
}

// Stop ends the guard and waits for its goroutine.
func (g *MemoryGuard) Stop() { g.cancel(); <-g.done }

// Err is why the guard cancelled the context, nil if it did not.
func (g *MemoryGuard) Err() error { g.mu.Lock(); defer g.mu.Unlock(); return g.err }

func memAvailable() (uint64, error) {
	f, err := os.Open("/proc/meminfo")
	if err != nil {
		return 0, err
	}
	defer f.Close()
	return parseMemAvailable(f)
}

// parseMemAvailable reads MemAvailable (bytes) from /proc/meminfo's text.
func parseMemAvailable(r io.Reader) (uint64, error) {
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) >= 2 && f[0] == "MemAvailable:" {
			kb, err := strconv.ParseUint(f[1], 10, 64)
			if err != nil {
				return 0, fmt.Errorf("meminfo: %w", err)
			}
			return kb << 10, nil
		}
	}
	if err := sc.Err(); err != nil {
		return 0, err
	}
	return 0, errors.New("meminfo: no MemAvailable")
}

// ScaleConfig is how ScaleObjects runs.
type ScaleConfig struct {
	Sizes    []int // object counts to load up to and measure at, growing
	MaxPages int   // pages the paginated list walks at most (0: all)
	// Restart restarts the server and returns once the new process has
	// started (nil: no restart measurement).
	Restart func(context.Context) error
	// DirectEtcd, if set, is the server's etcd: objects beyond DirectAbove
	// are written there by LoadDirect, under DirectPrefix, not through the
	// API.
	DirectEtcd, DirectPrefix string
	DirectAbove              int
	// Save gets every point so far after each measurement.
	Save func([]Point) error
}

// ScaleObjects loads objects into t in steps up to each of c.Sizes
// (cumulative: the objects of one step stay for the next) and after each
// step measures the create rate of the step, heap and RSS per object
// (against the server before the first step), the lists of ScaleLists and,
// with c.Restart, the start after a restart (CacheStart) and heap and RSS
// per object of the restarted server (against the same first sample: use
// the same binary and flags). Points are saved after each measurement, so
// that an interrupted run keeps what it measured. The objects are left in
// place: use a fresh server.
func ScaleObjects(ctx context.Context, t *Target, o *Options, c ScaleConfig) ([]Point, error) {
	if err := Setup(ctx, t, o); err != nil {
		return nil, err
	}
	mem0, err := SampleMemory(ctx, t)
	if err != nil {
		return nil, err
	}
	var points []Point
	step := func(n int, f func() ([]Result, error)) error {
		rs, err := f()
		points = append(points, at(n, rs)...)
		if serr := c.Save(points); err == nil {
			err = serr
		}
		return err
	}
	loaded := 0
	for _, n := range c.Sizes {
		if n < loaded {
			return points, fmt.Errorf("sizes must grow: %d after %d", n, loaded)
		}
		on := *o
		on.Objects = n
		load := func() ([]Result, error) { return Load(ctx, t, o, loaded, n) }
		if c.DirectEtcd != "" && n > c.DirectAbove {
			load = func() ([]Result, error) {
				rs, err := Load(ctx, t, o, loaded, max(loaded, min(n, c.DirectAbove)))
				if err != nil {
					return rs, err
				}
				drs, err := LoadDirect(ctx, t, c.DirectEtcd, c.DirectPrefix, o, max(loaded, c.DirectAbove), n)
				if err != nil {
					return append(rs, drs...), err
				}
				return append(rs, drs...), waitCached(ctx, t, o, n)
			}
		}
		steps := []func() ([]Result, error){
			load,
			func() ([]Result, error) { return Memory(ctx, t, &on, mem0) },
			func() ([]Result, error) { return ScaleLists(ctx, t, o, n, c.MaxPages) },
		}
		if c.Restart != nil {
			steps = append(steps,
				func() ([]Result, error) { return CacheStart(ctx, t, o, n, c.Restart) },
				func() ([]Result, error) {
					rs, err := Memory(ctx, t, &on, mem0)
					for i := range rs {
						rs[i].Metric += " after restart"
					}
					return rs, err
				})
		}
		for _, f := range steps {
			if err := step(n, f); err != nil {
				return points, err
			}
		}
		loaded = n
	}
	return points, nil
}

// waitCached waits until a list from the server's cache (RV=0) has n
// objects: the server's watch of etcd has seen writes made behind its back.
func waitCached(ctx context.Context, t *Target, o *Options, n int) error {
	for {
		items, _, err := listAll(ctx, t, o.objectsPath(), "resourceVersion=0", false, 0, nil)
		if err == nil && items >= n {
			return nil
		}
		o.progress("%s: waiting for the cache: %d of %d objects (%v)", t.Name, items, n, err)
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(2 * time.Second):
		}
	}
}

// ScaleWatches runs the fan-out (FanoutAcross, with memory per watch) once
// for each watch count in counts: writes to t at o.WriteRate for
// o.Duration, watches spread over ts. It saves the points after each count.
func ScaleWatches(ctx context.Context, t *Target, ts []*Target, o *Options, counts []int, save func([]Point) error) ([]Point, error) {
	for _, s := range ts {
		if err := Setup(ctx, s, o); err != nil {
			return nil, err
		}
	}
	var points []Point
	for _, n := range counts {
		on := *o
		on.Watchers = n
		rs, err := FanoutAcross(ctx, t, ts, &on, true)
		points = append(points, at(n, rs)...)
		if serr := save(points); err == nil {
			err = serr
		}
		if err != nil {
			return points, err
		}
	}
	return points, nil
}
