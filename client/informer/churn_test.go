package informer_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/objwatch/objwatch/client"
	"github.com/objwatch/objwatch/client/informer"
)

// clientGoInformer runs client-go's SharedIndexInformer for ConfigMaps in
// namespace "default" through the cutter, as the reference, with a
// recorder as its handler, in reference mode (see recorder.reference).
func clientGoInformer(t *testing.T, e *env) (cache.SharedIndexInformer, *recorder, func()) {
	t.Helper()
	cfg, err := clientcmd.BuildConfigFromFlags("", e.Kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	cfg.QPS, cfg.Burst = 1000, 1000
	var inner []http.RoundTripper
	cfg.WrapTransport = func(rt http.RoundTripper) http.RoundTripper {
		inner = append(inner, rt)
		return e.cut.Wrap(rt)
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	factory := informers.NewSharedInformerFactoryWithOptions(cs, 0, informers.WithNamespace("default"))
	inf := factory.Core().V1().ConfigMaps().Informer()
	rec := newRecorder()
	rec.reference = true
	if _, err := inf.AddEventHandler(cache.ResourceEventHandlerDetailedFuncs{
		AddFunc:    func(obj any, initial bool) { rec.OnAdd(obj.(CM), initial) },
		UpdateFunc: func(old, new any) { rec.OnUpdate(old.(CM), new.(CM)) },
		DeleteFunc: func(obj any) {
			if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				rec.OnDelete(d.Obj.(CM), true)
				return
			}
			rec.OnDelete(obj.(CM), false)
		},
	}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	factory.StartWithContext(ctx)
	stop := func() {
		cancel()
		factory.Shutdown()
		for _, rt := range inner {
			if c, ok := rt.(interface{ CloseIdleConnections() }); ok {
				c.CloseIdleConnections()
			}
		}
	}
	t.Cleanup(stop)
	return inf, rec, stop
}

func storeRVs(s cache.Store) map[informer.Key]string {
	out := map[informer.Key]string{}
	for _, o := range s.List() {
		cm := o.(*corev1.ConfigMap)
		out[informer.KeyOf(cm)] = cm.ResourceVersion
	}
	return out
}

// TestChurn writes objects at random while watches are cut over and over
// and the server's history is compacted, so that watches resume, fail with
// 410 Gone and relist. Handlers are added and removed meanwhile. At the
// end every handler must have seen, per object, a subsequence of the true
// history and hold exactly what a fresh LIST returns; client-go's
// informer, run alongside as a reference, must agree.
func TestChurn(t *testing.T) {
	if testing.Short() {
		t.Skip("churn takes a while")
	}
	bothModes(t, func(t *testing.T, compact bool) {
		for _, streaming := range []bool{true, false} {
			t.Run(fmt.Sprintf("streaming=%v", streaming), func(t *testing.T) { churn(t, streaming, compact) })
		}
	})
}

func churn(t *testing.T, streaming, compact bool) {
	e := startEnv(t, compacting(150*time.Millisecond)...)
	ctx := testContext(t, 3*time.Minute)
	hist := newHistory()
	w := newWriter(e.writer, hist, "default", 80, 42)
	for range 150 {
		if err := w.step(ctx); err != nil {
			t.Fatal(err)
		}
	}

	reg := prometheus.NewRegistry()
	inf, err := informer.New(client.NewClient[CM](e.reader, configMaps), informer.Options[CM]{
		Name: "churn", Metrics: reg, DisableStreamingList: !streaming, PageSize: 25, Compact: compact,
		MinWatchTimeout: 2 * time.Second, InitialBackoff: 20 * time.Millisecond, MaxBackoff: 300 * time.Millisecond,
		DetectMutations: true, OnMutation: func(err error) { t.Errorf("mutation: %v", err) },
	})
	if err != nil {
		t.Fatal(err)
	}
	fast, slow, removed := newRecorder(), newRecorder(), newRecorder()
	slow.delay = 2 * time.Millisecond
	fastReg, err := inf.AddHandler(fast, informer.HandlerOptions{Name: "fast"})
	if err != nil {
		t.Fatal(err)
	}
	slowReg, err := inf.AddHandler(slow, informer.HandlerOptions{Name: "slow", Bound: 20})
	if err != nil {
		t.Fatal(err)
	}
	removedReg, err := inf.AddHandler(removed, informer.HandlerOptions{Name: "removed"})
	if err != nil {
		t.Fatal(err)
	}
	run(t, inf)
	cg, cgRec, cgStop := clientGoInformer(t, e)
	if err := informer.WaitForSync(ctx, fastReg.HasSynced, slowReg.HasSynced, cg.HasSynced); err != nil {
		t.Fatalf("WaitForSync: %v", err)
	}

	// Churn: writes, and a cut every 300 ms, half of them held back long
	// enough for the history to be compacted.
	churnCtx, stopChurn := context.WithTimeout(ctx, 8*time.Second)
	defer stopChurn()
	var wg sync.WaitGroup
	wg.Go(func() {
		rnd := rand.New(rand.NewPCG(7, 7))
		for {
			select {
			case <-churnCtx.Done():
				return
			case <-time.After(300 * time.Millisecond):
			}
			hold := []time.Duration{0, 0, 500 * time.Millisecond, time.Second}[rnd.IntN(4)]
			e.cut.Cut(hold)
		}
	})
	var late *recorder
	var lateReg *informer.Registration[CM]
	var removedAt int
	start := time.Now()
	for churnCtx.Err() == nil {
		if err := w.step(ctx); err != nil {
			t.Fatal(err)
		}
		switch {
		case late == nil && time.Since(start) > 3*time.Second:
			late = newRecorder()
			if lateReg, err = inf.AddHandler(late, informer.HandlerOptions{Name: "late"}); err != nil {
				t.Fatal(err)
			}
		case removedAt == 0 && time.Since(start) > 4*time.Second:
			removedReg.Remove()
			<-removedReg.Done()
			removed.mu.Lock()
			removedAt = removed.adds + removed.updates + removed.deletes
			removed.mu.Unlock()
		}
	}
	wg.Wait()
	e.cut.Cut(0)

	views := map[string]func() map[informer.Key]string{
		"cache":             func() map[informer.Key]string { return listerRVs(inf.Lister()) },
		"fast":              fast.rvs,
		"slow":              slow.rvs,
		"late":              late.rvs,
		"client-go cache":   func() map[informer.Key]string { return storeRVs(cg.GetStore()) },
		"client-go handler": cgRec.rvs,
	}
	waitConsistent(t, e.writer, "default", views)
	for name, r := range map[string]*recorder{"fast": fast, "slow": slow, "late": late, "removed": removed, "client-go": cgRec} {
		r.check(t, name, hist, false)
	}
	if err := informer.WaitForSync(ctx, lateReg.HasSynced); err != nil {
		t.Errorf("late handler never synced: %v", err)
	}
	removed.mu.Lock()
	if n := removed.adds + removed.updates + removed.deletes; n != removedAt {
		t.Errorf("removed handler got %d notifications after Done, want none", n-removedAt)
	}
	removed.mu.Unlock()
	if err := inf.CheckMutations(); err != nil {
		t.Errorf("CheckMutations: %v", err)
	}
	cgStop()

	lists := counter(t, reg, "objwatch_informer_lists_total")
	if lists < 2 {
		t.Errorf("lists = %v, want relists after 410 Gone", lists)
	}
	if got := gauge(t, reg, "objwatch_informer_handler_coalesced_total", "slow"); got == 0 {
		t.Logf("slow handler never coalesced")
	}
	t.Logf("%d writes, %d cuts, %d watch requests (both informers), %v lists; fast: %d adds %d updates %d deletes (%d unknown); slow: %d updates, %v coalesced; client-go: %d adds %d updates (%d no-op) %d deletes (%d unknown)",
		w.writes, e.cut.Cuts.Load(), e.cut.Watches.Load(), lists,
		fast.adds, fast.updates, fast.deletes, fast.unknown,
		slow.updates, gauge(t, reg, "objwatch_informer_handler_coalesced_total", "slow"),
		cgRec.adds, cgRec.updates, cgRec.noops, cgRec.deletes, cgRec.unknown)
}
