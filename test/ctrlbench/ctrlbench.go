// Package ctrlbench measures one controller written twice, on objwatch's
// client/controller and on controller-runtime, against the same server:
// reconciles per second, event-to-reconcile latency and heap.
//
// The controller reconciles the ConfigMaps of one namespace: it reads the
// ConfigMap from its cache and, when the annotation bench.objwatch.io/observed
// differs from data.gen, writes it (an Update, retried on error). Both sides
// use their defaults (objwatch's read-your-writes Client; controller-runtime's
// cached client and priority queue), Workers workers, no client-side rate
// limit, one informer of the namespace.
//
// A run (Run) of one side, in its own process so that heaps do not mix:
//
//  1. create N ~1 KiB ConfigMaps (internal/testobj, data.gen "0");
//  2. GC, read the heap (baseline), start the controller;
//  3. initial: time until every ConfigMap carries its annotation; the
//     reconciles it took per second of that time, and objects per second;
//  4. heap: once reconciles stop, GC, the heap in use minus the baseline;
//  5. updates: an open-loop writer merge-patches data.gen to "1" on every
//     ConfigMap at UpdateRate per second (at most Writers in flight), a
//     load both sides keep up with, so that latency is the controller's
//     reaction and not a backlog: from each patch's response to the first
//     reconcile that reads the patched state (0 if it came first).
//
// Throughput is the initial pass's: a backlog of N objects, each taking a
// reconcile that writes and one that reads its own write back.
//
// This package is under test/ because it imports controller-runtime, which
// only tests may.
package ctrlbench

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/objwatch/objwatch/client"
	"github.com/objwatch/objwatch/internal/testobj"
)

// Sides are the implementations, by name; the last is the baseline.
var Sides = []string{"objwatch", "objwatch-compact", "controller-runtime"}

// Options are a run's settings.
type Options struct {
	Kubeconfig string
	Namespace  string // created if missing; its ConfigMaps are deleted at the end
	Objects    int
	Workers    int // concurrent reconciles (default 4)
	Writers    int // concurrent writers (default 32)
	UpdateRate int // patches per second of the update pass (default 250)
}

// Result is one side's measurement.
type Result struct {
	Side    string
	Objects int

	InitialSeconds    float64 // start to every object reconciled
	InitialReconciles int64
	HeapBytes         int64 // heap in use after the initial reconciles, minus before the controller

	UpdateSeconds    float64 // first patch to every object reconciled again
	UpdateReconciles int64
	P50, P99, Max    time.Duration // patch response to reconcile, at UpdateRate
	Errors           int64         // reconciles that returned an error (conflicts)
}

// InitialRate is reconciles per second of the initial pass.
func (r Result) InitialRate() float64 { return float64(r.InitialReconciles) / r.InitialSeconds }

// UpdateRate is reconciles per second of the update pass.
func (r Result) UpdateRate() float64 { return float64(r.UpdateReconciles) / r.UpdateSeconds }

const observed = "bench.objwatch.io/observed"

var configMaps = client.Resource{GVR: corev1.SchemeGroupVersion.WithResource("configmaps"), Namespaced: true, Kind: "ConfigMap"}

// recorder is the reconcile logic both sides share, and what it saw. It
// keeps only pointer-free slices, sized before the baseline heap is read.
type recorder struct {
	start      time.Time
	reconciles atomic.Int64
	errors     atomic.Int64
	seen       []atomic.Int64 // ns since start when gen "1" was first read; 0 = not yet
	written    []atomic.Int32 // gen+1 of the last annotation written
	done       [2]atomic.Int64
}

func newRecorder(n int) *recorder {
	return &recorder{start: time.Now(), seen: make([]atomic.Int64, n), written: make([]atomic.Int32, n)}
}

// reconcile is called with the ConfigMap read from the cache; it returns
// the annotation to write, if it is out of date.
func (r *recorder) reconcile(cm *corev1.ConfigMap) (gen string, write bool) {
	r.reconciles.Add(1)
	i, ok := index(cm.Name, len(r.seen))
	if !ok {
		return "", false
	}
	gen = cm.Data["gen"]
	if gen == "1" {
		r.seen[i].CompareAndSwap(0, int64(time.Since(r.start)))
	}
	return gen, cm.Annotations[observed] != gen
}

// annotate sets the annotation on cm, which the caller owns.
func annotate(cm *corev1.ConfigMap, gen string) {
	if cm.Annotations == nil {
		cm.Annotations = map[string]string{}
	}
	cm.Annotations[observed] = gen
}

// wrote records a successful write of cm.
func (r *recorder) wrote(cm *corev1.ConfigMap) {
	i, _ := index(cm.Name, len(r.seen))
	g, err := strconv.Atoi(cm.Annotations[observed])
	if err != nil || g > 1 {
		return
	}
	if r.written[i].Swap(int32(g+1)) != int32(g+1) {
		r.done[g].Add(1)
	}
}

func index(name string, n int) (int, bool) {
	s, ok := strings.CutPrefix(name, "cm-")
	i, err := strconv.Atoi(s)
	return i, ok && err == nil && i >= 0 && i < n
}

// side is a running controller; stop stops it and waits for it.
type side struct{ stop func() error }

type startFunc func(ctx context.Context, o Options, r *recorder) (side, error)

var starts = map[string]startFunc{
	"objwatch":           startObjwatch(false),
	"objwatch-compact":   startObjwatch(true),
	"controller-runtime": startControllerRuntime,
}

// Run measures one side (see the package documentation).
func Run(ctx context.Context, name string, o Options) (Result, error) {
	start, ok := starts[name]
	if !ok {
		return Result{}, fmt.Errorf("unknown side %q", name)
	}
	o.Workers = cmp(o.Workers, 4)
	o.Writers = cmp(o.Writers, 32)
	o.UpdateRate = cmp(o.UpdateRate, 250)
	cfg, err := client.FromKubeconfig(o.Kubeconfig, "")
	if err != nil {
		return Result{}, err
	}
	rest, err := client.New(cfg)
	if err != nil {
		return Result{}, err
	}
	defer rest.CloseIdleConnections()
	cms := client.For[*corev1.ConfigMap](rest, configMaps)
	nss := client.For[*corev1.Namespace](rest, client.Resource{GVR: corev1.SchemeGroupVersion.WithResource("namespaces"), Kind: "Namespace"})
	if _, err := nss.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: o.Namespace}}, metav1.CreateOptions{}); err != nil && !errors.Is(err, client.ErrAlreadyExists) {
		return Result{}, err
	}
	rnd := rand.New(rand.NewPCG(1, 2))
	objs := make([]*corev1.ConfigMap, o.Objects)
	for i := range objs {
		objs[i] = testobj.ConfigMap(o.Namespace, i, rnd)
		objs[i].Data["gen"] = "0"
	}
	if err := parallel(ctx, o.Writers, len(objs), func(ctx context.Context, i int) error {
		_, err := cms.Create(ctx, objs[i], metav1.CreateOptions{})
		return err
	}); err != nil {
		return Result{}, fmt.Errorf("create: %w", err)
	}
	objs = nil
	defer cms.DeleteCollection(context.WithoutCancel(ctx), o.Namespace, metav1.DeleteOptions{}, metav1.ListOptions{})

	rec := newRecorder(o.Objects)
	sent := make([]int64, o.Objects) // ns since rec.start of each patch's response
	base := heap()
	rec.start = time.Now()
	s, err := start(ctx, o, rec)
	if err != nil {
		return Result{}, err
	}
	stopped := false
	defer func() {
		if !stopped {
			s.stop()
		}
	}()
	res := Result{Side: name, Objects: o.Objects}
	if err := waitFor(ctx, func() bool { return rec.done[0].Load() == int64(o.Objects) }); err != nil {
		return res, fmt.Errorf("initial: %d of %d reconciled: %w", rec.done[0].Load(), o.Objects, err)
	}
	res.InitialSeconds = time.Since(rec.start).Seconds()
	res.InitialReconciles = rec.reconciles.Load()
	quiet(ctx, rec)
	res.HeapBytes = int64(heap()) - int64(base)

	before := rec.reconciles.Load()
	t0 := time.Now()
	if err := paced(ctx, o.UpdateRate, o.Writers, o.Objects, func(ctx context.Context, i int) error {
		_, err := cms.Patch(ctx, o.Namespace, fmt.Sprintf("cm-%05d", i), types.MergePatchType, []byte(`{"data":{"gen":"1"}}`), metav1.PatchOptions{}, "")
		sent[i] = int64(time.Since(rec.start))
		return err
	}); err != nil {
		return res, fmt.Errorf("patch: %w", err)
	}
	if err := waitFor(ctx, func() bool { return rec.done[1].Load() == int64(o.Objects) }); err != nil {
		return res, fmt.Errorf("updates: %d of %d reconciled: %w", rec.done[1].Load(), o.Objects, err)
	}
	res.UpdateSeconds = time.Since(t0).Seconds()
	res.UpdateReconciles = rec.reconciles.Load() - before
	lat := make([]time.Duration, o.Objects)
	for i := range lat {
		lat[i] = time.Duration(max(0, rec.seen[i].Load()-sent[i]))
	}
	slices.Sort(lat)
	res.P50, res.P99, res.Max = lat[len(lat)/2], lat[len(lat)*99/100], lat[len(lat)-1]
	res.Errors = rec.errors.Load()
	stopped = true
	return res, s.stop()
}

func cmp(v, def int) int {
	if v > 0 {
		return v
	}
	return def
}

// heap returns the bytes of heap in use after a full GC.
func heap() uint64 {
	var m runtime.MemStats
	runtime.GC()
	runtime.GC()
	runtime.ReadMemStats(&m)
	return m.HeapInuse
}

// quiet waits until no reconcile happened for 300 ms (the reconciles of
// the controller's own writes are over).
func quiet(ctx context.Context, r *recorder) {
	last := r.reconciles.Load()
	for ctx.Err() == nil {
		time.Sleep(300 * time.Millisecond)
		n := r.reconciles.Load()
		if n == last {
			return
		}
		last = n
	}
}

func waitFor(ctx context.Context, cond func() bool) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Minute)
	defer cancel()
	for !cond() {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(time.Millisecond):
		}
	}
	return nil
}

// paced calls f(i) for i in [0, n), the i-th i/rate seconds after the
// first, from at most workers goroutines at a time, and returns the first
// error after every call returned.
func paced(ctx context.Context, rate, workers, n int, f func(ctx context.Context, i int) error) error {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	sem := make(chan struct{}, workers) // the calls in flight
	var wg sync.WaitGroup
	t0 := time.Now()
	for i := 0; i < n && ctx.Err() == nil; i++ {
		if d := time.Until(t0.Add(time.Duration(i) * time.Second / time.Duration(rate))); d > 0 {
			time.Sleep(d)
		}
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			if err := f(ctx, i); err != nil {
				cancel(err)
			}
		})
	}
	wg.Wait()
	return context.Cause(ctx)
}

// parallel calls f(i) for i in [0, n) from workers goroutines and returns
// the first error, after every call returned.
func parallel(ctx context.Context, workers, n int, f func(ctx context.Context, i int) error) error {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	var next atomic.Int64
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for ctx.Err() == nil {
				i := int(next.Add(1) - 1)
				if i >= n {
					return
				}
				if err := f(ctx, i); err != nil {
					cancel(err)
				}
			}
		})
	}
	wg.Wait()
	return context.Cause(ctx)
}
