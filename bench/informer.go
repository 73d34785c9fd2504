package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"math/rand/v2"
	"net/http"
	"runtime"
	"runtime/metrics"
	"strings"
	"sync/atomic"
	"text/tabwriter"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8sinformers "k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/objwatch/objwatch/client"
	"github.com/objwatch/objwatch/client/informer"
	"github.com/objwatch/objwatch/internal/testobj"
	"github.com/objwatch/objwatch/internal/watchcut"
)

// The informer scenario compares client libraries, not servers: objwatch's
// informer (with its decoded cache and with Options.Compact) and client-go's
// SharedIndexInformer cache the same o.Objects ConfigMaps of ~1 KiB from one
// target, Transform off, one after the other in this process (so the heap
// figures are this process's; keep the server elsewhere).

// InformerNamespace is the namespace the informer scenario creates, fills
// and deletes.
const InformerNamespace = "objwatch-bench-informer"

// ErrNotServed is returned by a scenario when the target does not serve the
// resource it needs (Kubernetes' apiextensions-apiserver serves no
// ConfigMaps).
var ErrNotServed = errors.New("resource not served")

const (
	informerWriters = 32               // concurrent writers of the update stream and backlog
	streamFor       = 10 * time.Second // steady update stream
	burstMax        = 6000             // backlog: below the server's per-watcher buffer
	relistChanges   = 100              // objects changed while the watch is cut
	maxHold         = 10 * time.Minute // longest wait for the server to forget history
)

type configMap = *corev1.ConfigMap

var configMaps = client.Resource{GVR: corev1.SchemeGroupVersion.WithResource("configmaps"), Namespaced: true, Kind: "ConfigMap"}

// informerSides are the implementations measured, in table order; the last
// is the baseline of ratios. Adding a side is one entry.
var informerSides = []informerSide{
	{"objwatch", startObjwatch(false)},
	{"objwatch compact", startObjwatch(true)},
	{"client-go", startClientGo},
}

// informerSide starts one informer on ns, its transport wrapped by wrap.
type informerSide struct {
	name  string
	start func(ctx context.Context, kubeconfig, ns string, wrap func(http.RoundTripper) http.RoundTripper) (*runningInformer, error)
}

// runningInformer is a started informer; stop stops it and waits for it.
type runningInformer struct {
	synced func() bool
	events func() int64 // notifications delivered to the handler
	rvs    func() map[informer.Key]string
	stop   func()
}

func startObjwatch(compact bool) func(context.Context, string, string, func(http.RoundTripper) http.RoundTripper) (*runningInformer, error) {
	return func(ctx context.Context, kubeconfig, ns string, wrap func(http.RoundTripper) http.RoundTripper) (*runningInformer, error) {
		cfg, err := client.FromKubeconfig(kubeconfig, "")
		if err != nil {
			return nil, err
		}
		cfg.WrapTransport = wrap
		rest, err := client.New(cfg)
		if err != nil {
			return nil, err
		}
		inf, err := informer.New(client.For[configMap](rest, configMaps), informer.Options[configMap]{Namespace: ns, Compact: compact})
		if err != nil {
			return nil, err
		}
		var events atomic.Int64
		reg, err := inf.AddHandler(informer.HandlerFuncs[configMap]{
			Add:    func(configMap, bool) { events.Add(1) },
			Update: func(_, _ configMap) { events.Add(1) },
			Delete: func(configMap, bool) { events.Add(1) },
		}, informer.HandlerOptions{})
		if err != nil {
			return nil, err
		}
		ctx, cancel := context.WithCancel(ctx)
		done := make(chan struct{})
		go func() { defer close(done); inf.Run(ctx) }()
		return &runningInformer{
			synced: func() bool { return inf.HasSynced() && reg.HasSynced() },
			events: events.Load,
			rvs: func() map[informer.Key]string {
				out := map[informer.Key]string{}
				for _, o := range inf.Lister().List("", nil) {
					out[informer.KeyOf(o)] = o.ResourceVersion
				}
				return out
			},
			stop: func() { cancel(); <-done; rest.CloseIdleConnections() },
		}, nil
	}
}

func startClientGo(ctx context.Context, kubeconfig, ns string, wrap func(http.RoundTripper) http.RoundTripper) (*runningInformer, error) {
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return nil, err
	}
	cfg.QPS, cfg.Burst = 1000, 1000
	var inner []http.RoundTripper // to close idle connections at the end
	cfg.WrapTransport = func(rt http.RoundTripper) http.RoundTripper { inner = append(inner, rt); return wrap(rt) }
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	factory := k8sinformers.NewSharedInformerFactoryWithOptions(cs, 0, k8sinformers.WithNamespace(ns))
	inf := factory.Core().V1().ConfigMaps().Informer()
	var events atomic.Int64
	reg, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { events.Add(1) },
		UpdateFunc: func(_, _ any) { events.Add(1) },
		DeleteFunc: func(any) { events.Add(1) },
	})
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(ctx)
	factory.StartWithContext(ctx)
	return &runningInformer{
		synced: func() bool { return inf.HasSynced() && reg.HasSynced() },
		events: events.Load,
		rvs: func() map[informer.Key]string {
			out := map[informer.Key]string{}
			for _, o := range inf.GetStore().List() {
				cm := o.(configMap)
				out[informer.KeyOf(cm)] = cm.ResourceVersion
			}
			return out
		},
		stop: func() {
			cancel()
			factory.Shutdown()
			for _, rt := range inner {
				if c, ok := rt.(interface{ CloseIdleConnections() }); ok {
					c.CloseIdleConnections()
				}
			}
		},
	}, nil
}

// InformerSide is one informer implementation's measurements. Heap figures
// are this process's heap above its level before the informer started.
type InformerSide struct {
	Name     string
	Heap     uint64        // live heap after sync (after a forced GC)
	Synced   time.Duration // from start to synced
	StreamPS float64       // events/s under a steady update stream
	KeptUp   float64       // fraction of the stream's writes delivered
	BurstPS  float64       // events/s draining a backlog
	Steady   uint64        // live heap before the relist
	Peak     uint64        // peak heap (live and garbage) during the relist
	Relist   time.Duration // from the watch's release to the changes delivered
	// Relisted is false when the server still had the history after
	// maxHold: the watch resumed, no 410, and Peak and Relist mean nothing.
	Relisted bool
}

// InformerReport is the informer scenario's outcome on one target.
type InformerReport struct {
	Target  string
	Objects int
	Sides   []InformerSide // the last is the baseline of ratios
}

// Informer creates o.Objects ConfigMaps in InformerNamespace and measures
// each informer side on them in turn: heap after sync, time to synced,
// events/s under a steady update stream and draining a backlog, and heap
// and time of a relist forced by 410 Gone. It deletes the namespace at the
// end. The relist waits until the server has forgotten the history (its
// compaction interval; up to maxHold). It returns ErrNotServed if the
// target serves no ConfigMaps.
func Informer(ctx context.Context, t *Target, o *Options) (*InformerReport, error) {
	if o.Objects < 1 {
		return nil, fmt.Errorf("informer %s: no objects", t.Name)
	}
	cfg, err := client.FromKubeconfig(t.Kubeconfig, "")
	if err != nil {
		return nil, fmt.Errorf("informer %s: %w", t.Name, err)
	}
	rest, err := client.New(cfg)
	if err != nil {
		return nil, fmt.Errorf("informer %s: %w", t.Name, err)
	}
	defer rest.CloseIdleConnections()
	if _, err := rest.Resource(ctx, configMaps.GVR); errors.Is(err, client.ErrNotFound) {
		return nil, fmt.Errorf("informer %s: v1 configmaps: %w", t.Name, ErrNotServed)
	} else if err != nil {
		return nil, fmt.Errorf("informer %s: %w", t.Name, err)
	}
	ns := InformerNamespace
	namespaces := client.For[*corev1.Namespace](rest, client.Resource{GVR: corev1.SchemeGroupVersion.WithResource("namespaces"), Kind: "Namespace"})
	if err := createNamespace(ctx, namespaces, ns); err != nil {
		return nil, fmt.Errorf("informer %s: %w", t.Name, err)
	}
	defer func() {
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer cancel()
		namespaces.Delete(ctx, "", ns, metav1.DeleteOptions{})
	}()

	writer := client.For[configMap](rest, configMaps)
	start := time.Now()
	_, _, err = parallel(ctx, informerWriters, o.Objects, func(i int) error {
		if i%1000 == 0 {
			o.progress("%s: informer: create %d/%d", t.Name, i, o.Objects)
		}
		_, err := writer.Create(ctx, testobj.ConfigMap(ns, i, rand.New(rand.NewPCG(uint64(i), 0))), metav1.CreateOptions{})
		if err == nil || errors.Is(err, client.ErrAlreadyExists) {
			return nil
		}
		return fmt.Errorf("create %d: %w", i, err)
	})
	if err != nil {
		return nil, fmt.Errorf("informer %s: create: %w", t.Name, err)
	}
	o.progress("%s: informer: created %d ConfigMaps in %v", t.Name, o.Objects, time.Since(start).Round(time.Millisecond))

	m := &informerRun{t: t, o: o, ns: ns, writer: writer, cut: watchcut.New()}
	rep := &InformerReport{Target: t.Name, Objects: o.Objects}
	for i, side := range informerSides {
		s, err := m.measure(ctx, i, side)
		if err != nil {
			return rep, fmt.Errorf("informer %s: %s: %w", t.Name, side.name, err)
		}
		rep.Sides = append(rep.Sides, s)
	}
	return rep, nil
}

// createNamespace creates ns, first waiting for an earlier one to finish
// terminating.
func createNamespace(ctx context.Context, c *client.Client[*corev1.Namespace], ns string) error {
	deadline := time.Now().Add(2 * time.Minute)
	for {
		_, err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{})
		if !errors.Is(err, client.ErrAlreadyExists) && !errors.Is(err, client.ErrConflict) {
			return err
		}
		old, err := c.Get(ctx, "", ns, metav1.GetOptions{})
		if err == nil && old.DeletionTimestamp == nil {
			return nil // left over from an interrupted run: reuse it
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("namespace %s still terminating", ns)
		}
		time.Sleep(time.Second)
	}
}

// informerRun is what the sides of one Informer call share.
type informerRun struct {
	t      *Target
	o      *Options
	ns     string
	writer *client.Client[configMap] // never cut
	cut    *watchcut.Cutter          // wraps the informers' transports
}

// update writes up to n updates of random objects (seeded by i and seed)
// on informerWriters writers for up to d and returns how many succeeded.
// Writes in flight at d complete, so that each one counted is an event.
func (m *informerRun) update(ctx context.Context, d time.Duration, n int, seed uint64) (int64, error) {
	stop, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	var writes atomic.Int64
	_, _, err := parallel(stop, informerWriters, n, func(i int) error {
		cm := testobj.ConfigMap(m.ns, rand.IntN(m.o.Objects), rand.New(rand.NewPCG(uint64(i), seed)))
		if _, err := m.writer.Update(ctx, cm, metav1.UpdateOptions{}); err != nil {
			return fmt.Errorf("update %s: %w", cm.Name, err)
		}
		writes.Add(1)
		return nil
	})
	if errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil {
		err = nil // d is up
	}
	return writes.Load(), err
}

// measure runs one side through every phase. Sides run one after the other
// so that their heaps do not mix. Its updates are seeded by round so that
// none repeats an earlier side's (a no-op the server would not turn into an
// event).
func (m *informerRun) measure(ctx context.Context, round int, side informerSide) (InformerSide, error) {
	s := InformerSide{Name: side.name}
	name := m.t.Name + ": informer: " + side.name
	base := heapLive()
	t0 := time.Now()
	inf, err := side.start(ctx, m.t.Kubeconfig, m.ns, m.cut.Wrap)
	if err != nil {
		return s, err
	}
	defer inf.stop()
	syncCtx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	err = informer.WaitForSync(syncCtx, inf.synced)
	cancel()
	if err != nil {
		return s, fmt.Errorf("sync: %w", err)
	}
	s.Synced = time.Since(t0)
	s.Heap = above(heapLive(), base)
	m.o.progress("%s: synced in %v", name, s.Synced.Round(time.Millisecond))

	// Steady stream: the informer keeps up; the server's write rate decides.
	before := inf.events()
	t1 := time.Now()
	writes, err := m.update(ctx, streamFor, 1<<30, 10*uint64(round)+1)
	if err != nil {
		return s, fmt.Errorf("update stream: %w", err)
	}
	// Count the tail still in flight at the end of the stream too, over the
	// time until it was delivered.
	for inf.events() < before+writes && time.Since(t1) < streamFor+30*time.Second {
		time.Sleep(time.Millisecond)
	}
	delivered := inf.events() - before
	s.StreamPS = float64(delivered) / time.Since(t1).Seconds()
	s.KeptUp = float64(delivered) / float64(max(writes, 1))
	m.o.progress("%s: update stream: %d writes, %d events delivered", name, writes, delivered)

	// Backlog: stop reading the watch (the connection stays up and the
	// server's sends back up) while writing, then time the drain: the
	// informer's own throughput (decode, cache, handler).
	m.cut.Pause()
	before = inf.events()
	writes, err = m.update(ctx, 5*time.Second, burstMax, 10*uint64(round)+2)
	if err != nil {
		m.cut.Resume()
		return s, fmt.Errorf("backlog: %w", err)
	}
	time.Sleep(time.Second) // let the server queue it all
	t2 := time.Now()
	m.cut.Resume()
	for inf.events() < before+writes && time.Since(t2) < time.Minute {
		time.Sleep(100 * time.Microsecond)
	}
	if got := inf.events() - before; got < writes {
		return s, fmt.Errorf("backlog: %d of %d events delivered", got, writes)
	}
	s.BurstPS = float64(inf.events()-before) / time.Since(t2).Seconds()
	m.o.progress("%s: backlog of %d events drained in %v", name, writes, time.Since(t2).Round(time.Millisecond))

	// Relist: cut the watch and hold new ones back until the server has
	// forgotten the history, changing relistChanges objects meanwhile; then
	// sample the heap until the informer delivered those changes (which
	// both libraries only do once the relist is complete).
	m.cut.Cut(-1)
	list, err := m.writer.List(ctx, m.ns, metav1.ListOptions{Limit: 1})
	if err != nil {
		m.cut.Release()
		return s, fmt.Errorf("relist: %w", err)
	}
	before = inf.events()
	if _, _, err := parallel(ctx, informerWriters, relistChanges, func(i int) error {
		cm := testobj.ConfigMap(m.ns, i*97%m.o.Objects, rand.New(rand.NewPCG(uint64(i), 10*uint64(round)+3)))
		if _, err := m.writer.Update(ctx, cm, metav1.UpdateOptions{}); err != nil {
			return fmt.Errorf("update %s: %w", cm.Name, err)
		}
		return nil
	}); err != nil {
		m.cut.Release()
		return s, fmt.Errorf("relist: %w", err)
	}
	s.Steady = above(heapLive(), base)
	s.Relisted, err = m.waitGone(ctx, name, list.ResourceVersion)
	if err != nil {
		m.cut.Release()
		return s, fmt.Errorf("relist: %w", err)
	}
	// Collect the garbage of the benchmark's own probes and writes, so
	// that the peak is the steady heap plus what the relist allocates.
	runtime.GC()
	t3 := time.Now()
	sampler := sampleHeap()
	m.cut.Release()
	for inf.events() < before+relistChanges && time.Since(t3) < 2*time.Minute {
		time.Sleep(time.Millisecond)
	}
	s.Relist = time.Since(t3)
	s.Peak = above(sampler.stop(), base)
	if !s.Relisted {
		m.o.progress("%s: the server kept the history for %v: no 410, no relist", name, maxHold)
	}
	return s, m.waitEqual(ctx, inf.rvs)
}

// waitGone waits until a watch from rv gets 410 Gone, for up to maxHold,
// and reports whether it did.
func (m *informerRun) waitGone(ctx context.Context, name, rv string) (bool, error) {
	start := time.Now()
	for {
		pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		w, err := m.writer.Watch(pctx, m.ns, metav1.ListOptions{ResourceVersion: rv})
		if err == nil {
			_, _, err = w.NextRaw()
			w.Stop()
		}
		cancel()
		switch {
		case errors.Is(err, client.ErrGone):
			return true, nil
		case ctx.Err() != nil:
			return false, ctx.Err()
		case err != nil && pctx.Err() == nil && !errors.Is(err, io.EOF):
			return false, fmt.Errorf("watch from %s: %w", rv, err)
		case time.Since(start) > maxHold:
			return false, nil
		}
		m.o.progress("%s: waiting %v for the server to forget resourceVersion %s (410 Gone)", name, time.Since(start).Round(time.Second), rv)
		time.Sleep(2 * time.Second)
	}
}

// waitEqual waits until the cache equals a fresh list.
func (m *informerRun) waitEqual(ctx context.Context, rvs func() map[informer.Key]string) error {
	l, err := m.writer.List(ctx, m.ns, metav1.ListOptions{})
	if err != nil {
		return err
	}
	want := make(map[informer.Key]string, len(l.Items))
	for _, o := range l.Items {
		want[informer.KeyOf(o)] = o.ResourceVersion
	}
	deadline := time.Now().Add(2 * time.Minute)
	for !maps.Equal(rvs(), want) {
		if time.Now().After(deadline) {
			return errors.New("the cache never caught up with the server")
		}
		time.Sleep(10 * time.Millisecond)
	}
	return nil
}

func above(v, base uint64) uint64 {
	if v < base {
		return 0
	}
	return v - base
}

// heapLive returns the live heap after a full GC.
func heapLive() uint64 {
	runtime.GC()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}

// heapSampler keeps the peak of the heap (live objects and garbage not yet
// collected: what the process holds), sampled every millisecond by a
// goroutine that stop ends.
type heapSampler struct {
	peak        uint64 // written by the sampling goroutine until done is closed
	stopc, done chan struct{}
}

func sampleHeap() *heapSampler {
	s := &heapSampler{stopc: make(chan struct{}), done: make(chan struct{})}
	sample := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}
	go func() {
		defer close(s.done)
		t := time.NewTicker(time.Millisecond)
		defer t.Stop()
		for {
			metrics.Read(sample)
			s.peak = max(s.peak, sample[0].Value.Uint64())
			select {
			case <-s.stopc:
				return
			case <-t.C:
			}
		}
	}()
	return s
}

// stop ends the sampling and returns the peak.
func (s *heapSampler) stop() uint64 {
	close(s.stopc)
	<-s.done
	return s.peak
}

// informerMetrics are the report's rows, for the table and for Results.
var informerMetrics = []struct {
	name, unit string
	value      func(s *InformerSide) (float64, bool) // false: not measured
	format     func(float64) string
	ratio      bool   // ratio to the baseline side
	target     string // issue 3's goal
}{
	{"heap after sync", "MiB", func(s *InformerSide) (float64, bool) { return mib(s.Heap), true }, fmtMiB, true, "<= 0.5 (compact)"},
	{"time to synced", "s", func(s *InformerSide) (float64, bool) { return s.Synced.Seconds(), true }, fmtSeconds, true, "<= 1"},
	{"events/s, steady update stream", "events/s", func(s *InformerSide) (float64, bool) { return s.StreamPS, true }, fmtRate, false, "(the server's write rate)"},
	{"  of the stream delivered", "%", func(s *InformerSide) (float64, bool) { return 100 * s.KeptUp, true }, func(v float64) string { return fmt.Sprintf("%.1f%%", v) }, false, ""},
	{"events/s, draining a backlog", "events/s", func(s *InformerSide) (float64, bool) { return s.BurstPS, true }, fmtRate, true, ">= 1"},
	{"steady heap before relist", "MiB", func(s *InformerSide) (float64, bool) { return mib(s.Steady), true }, fmtMiB, false, ""},
	{"peak heap during 410 relist", "MiB", func(s *InformerSide) (float64, bool) { return mib(s.Peak), s.Relisted }, fmtMiB, false, ""},
	{"  peak / steady", "x", func(s *InformerSide) (float64, bool) {
		return float64(s.Peak) / float64(max(s.Steady, 1)), s.Relisted
	}, func(v float64) string { return fmt.Sprintf("%.2fx", v) }, false, "<= 1.25x (objwatch)"},
	{"relist: release to changes delivered", "s", func(s *InformerSide) (float64, bool) { return s.Relist.Seconds(), s.Relisted }, fmtSeconds, false, ""},
}

func mib(n uint64) float64     { return float64(n) / (1 << 20) }
func fmtMiB(v float64) string  { return fmt.Sprintf("%.1f MiB", v) }
func fmtRate(v float64) string { return fmt.Sprintf("%.0f", v) }
func fmtSeconds(v float64) string {
	return fmt.Sprint(time.Duration(v * float64(time.Second)).Round(time.Millisecond))
}
func fmtRatio(v float64) string { return fmt.Sprintf("%.2f", v) }

func (r *InformerReport) baseline() *InformerSide { return &r.Sides[len(r.Sides)-1] }

// ratio returns side's value of metric i over the baseline's.
func (r *InformerReport) ratio(i, side int) (float64, bool) {
	m := informerMetrics[i]
	v, ok := m.value(&r.Sides[side])
	b, okb := m.value(r.baseline())
	if !ok || !okb || b == 0 {
		return 0, false
	}
	return v / b, true
}

// Results flattens the report: one row per metric and side, labelled
// "informer METRIC [SIDE]", and ratio rows "[SIDE / BASELINE]".
func (r *InformerReport) Results() []Result {
	var out []Result
	if len(r.Sides) == 0 {
		return nil
	}
	for i, m := range informerMetrics {
		name := "informer " + strings.TrimSpace(m.name)
		for j := range r.Sides {
			if v, ok := m.value(&r.Sides[j]); ok {
				out = append(out, Result{r.Target, name + " [" + r.Sides[j].Name + "]", v, m.unit})
			}
		}
		if !m.ratio {
			continue
		}
		for j := range r.Sides[:len(r.Sides)-1] {
			if v, ok := r.ratio(i, j); ok {
				out = append(out, Result{r.Target, name + " [" + r.Sides[j].Name + " / " + r.baseline().Name + "]", v, "ratio"})
			}
		}
	}
	return out
}

// WriteTable writes the report as a table: sides as columns, then the
// ratios to the baseline and issue 3's targets.
func (r *InformerReport) WriteTable(w io.Writer) error {
	if len(r.Sides) == 0 {
		return nil
	}
	others := r.Sides[:len(r.Sides)-1]
	fmt.Fprintf(w, "informer on %s: %d ConfigMaps of ~1 KiB; %s; ratios to %s\n", r.Target, r.Objects, runtime.Version(), r.baseline().Name)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprint(tw, "\t")
	for _, s := range r.Sides {
		fmt.Fprintf(tw, "%s\t", s.Name)
	}
	for _, s := range others {
		fmt.Fprintf(tw, "%s / %s\t", s.Name, r.baseline().Name)
	}
	fmt.Fprintln(tw, "target")
	for i, m := range informerMetrics {
		fmt.Fprintf(tw, "%s\t", m.name)
		for j := range r.Sides {
			if v, ok := m.value(&r.Sides[j]); ok {
				fmt.Fprintf(tw, "%s\t", m.format(v))
			} else {
				fmt.Fprint(tw, "-\t")
			}
		}
		for j := range others {
			if v, ok := r.ratio(i, j); ok && m.ratio {
				fmt.Fprintf(tw, "%s\t", fmtRatio(v))
			} else {
				fmt.Fprint(tw, "\t")
			}
		}
		fmt.Fprintln(tw, m.target)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, s := range r.Sides {
		if !s.Relisted {
			_, err := fmt.Fprintf(w, "-: the server still had the history after %v: no 410 Gone, no relist\n", maxHold)
			return err
		}
	}
	return nil
}
