package informer_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/objwatch/objwatch/client"
	"github.com/objwatch/objwatch/client/informer"
)

func TestInformerSeesEveryChange(t *testing.T) {
	bothModes(t, func(t *testing.T, compact bool) { testInformerSeesEveryChange(t, compact) })
}

// testInformerSeesEveryChange runs the test, and checks on the env at the
// end of each run.
func testInformerSeesEveryChange(t *testing.T, compact bool, checks ...func(*testing.T, *env)) {
	for _, streaming := range []bool{true, false} {
		t.Run(fmt.Sprintf("streaming=%v", streaming), func(t *testing.T) {
			e := startEnv(t)
			ctx := testContext(t, 60*time.Second)
			hist := newHistory()
			w := newWriter(e.writer, hist, "default", 30, 1)
			for range 40 {
				if err := w.step(ctx); err != nil {
					t.Fatal(err)
				}
			}
			reg := prometheus.NewRegistry()
			inf, err := informer.New(client.NewClient[CM](e.reader, configMaps), informer.Options[CM]{
				DisableStreamingList: !streaming, PageSize: 7, MinWatchTimeout: 2 * time.Second, Metrics: reg, Compact: compact,
			})
			if err != nil {
				t.Fatal(err)
			}
			rec := newRecorder()
			initial := 0
			recReg, err := inf.AddHandler(rec, informer.HandlerOptions{Name: "rec"})
			if err != nil {
				t.Fatal(err)
			}
			initialCounter, err := inf.AddHandler(informer.HandlerFuncs[CM]{Add: func(_ CM, init bool) {
				if init {
					initial++
				}
			}}, informer.HandlerOptions{})
			if err != nil {
				t.Fatal(err)
			}
			run(t, inf)
			if err := informer.WaitForSync(ctx, inf.HasSynced, recReg.HasSynced, initialCounter.HasSynced); err != nil {
				t.Fatalf("WaitForSync: %v", err)
			}
			if initial != len(w.live) {
				t.Errorf("initial adds = %d, want %d", initial, len(w.live))
			}
			// Long enough for watches to time out and be renewed.
			for end := time.Now().Add(6 * time.Second); time.Now().Before(end); {
				if err := w.step(ctx); err != nil {
					t.Fatal(err)
				}
				time.Sleep(5 * time.Millisecond)
			}
			waitConsistent(t, e.writer, "default", map[string]func() map[informer.Key]string{
				"cache":    func() map[informer.Key]string { return listerRVs(inf.Lister()) },
				"recorder": rec.rvs,
			})
			rec.check(t, "recorder", hist, true)
			if got := e.cut.Streaming.Load(); (got > 0) != streaming {
				t.Errorf("streaming list requests = %d, want them iff streaming", got)
			}
			if got := e.cut.Watches.Load(); got < 2 {
				t.Errorf("watch requests = %d, want the watch renewed after its timeout", got)
			}
			if inf.LastResourceVersion() == "" {
				t.Errorf("LastResourceVersion() is empty")
			}
			// The server sends bookmarks every 300 ms; the reflector resumes
			// from them (exercised by every renewal after a quiet period).
			if n := counter(t, reg, "objwatch_informer_watch_events_total"); n == 0 {
				t.Errorf("no watch events counted")
			}
			if n := counterWith(t, reg, "objwatch_informer_watch_events_total", "type", "BOOKMARK"); n == 0 {
				t.Errorf("bookmarks received = 0, want some")
			}
			t.Logf("%d writes, %d watches, %d adds, %d updates, %d deletes", w.writes, e.cut.Watches.Load(), rec.adds, rec.updates, rec.deletes)
			for _, check := range checks {
				check(t, e)
			}
		})
	}
}

func TestStreamingListFallback(t *testing.T) {
	e := startEnv(t)
	ctx := testContext(t, 30*time.Second)
	e.cut.RejectStreaming.Store(true)
	for i := range 5 {
		if _, err := e.writer.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: fmt.Sprint("cm", i)}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	inf, err := informer.New(client.NewClient[CM](e.reader, configMaps), informer.Options[CM]{InitialBackoff: 10 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	run(t, inf)
	if err := inf.WaitForSync(ctx); err != nil {
		t.Fatal(err)
	}
	if n := inf.Lister().Len(); n != 5 {
		t.Errorf("Len() = %d, want 5", n)
	}
	if got := e.cut.Streaming.Load(); got != 1 {
		t.Errorf("streaming list attempts = %d, want 1 then fallback", got)
	}
}

// TestRelistAppliesOnlyDifferences cuts the watch and keeps it down until
// the server compacted its history, changes a few objects meanwhile, and
// checks that the 410 relist delivers exactly those changes.
func TestRelistAppliesOnlyDifferences(t *testing.T) {
	bothModes(t, func(t *testing.T, compact bool) { testRelistAppliesOnlyDifferences(t, compact) })
}

// testRelistAppliesOnlyDifferences runs the test, and checks on the env
// at the end of each run.
func testRelistAppliesOnlyDifferences(t *testing.T, compact bool, checks ...func(*testing.T, *env)) {
	for _, streaming := range []bool{true, false} {
		t.Run(fmt.Sprintf("streaming=%v", streaming), func(t *testing.T) {
			e := startEnv(t, compacting(100*time.Millisecond)...)
			ctx := testContext(t, 60*time.Second)
			live := map[string]CM{}
			for i := range 50 {
				cm, err := e.writer.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: fmt.Sprint("cm", i)},
					Data: map[string]string{"v": "0"}}, metav1.CreateOptions{})
				if err != nil {
					t.Fatal(err)
				}
				live[cm.Name] = cm
			}
			reg := prometheus.NewRegistry()
			inf, err := informer.New(client.NewClient[CM](e.reader, configMaps), informer.Options[CM]{
				DisableStreamingList: !streaming, Metrics: reg, Name: "cms", InitialBackoff: 10 * time.Millisecond, Compact: compact,
			})
			if err != nil {
				t.Fatal(err)
			}
			rec := newRecorder()
			if _, err := inf.AddHandler(rec, informer.HandlerOptions{}); err != nil {
				t.Fatal(err)
			}
			run(t, inf)
			if err := inf.WaitForSync(ctx); err != nil {
				t.Fatal(err)
			}
			waitConsistent(t, e.writer, "default", map[string]func() map[informer.Key]string{"recorder": rec.rvs})
			rec.mu.Lock()
			rec.adds, rec.updates, rec.deletes, rec.unknown = 0, 0, 0, 0
			rec.mu.Unlock()

			e.cut.Cut(1500 * time.Millisecond)
			for _, n := range []string{"cm1", "cm2", "cm3"} {
				cm := live[n].DeepCopy()
				cm.Data["v"] = "1"
				if _, err := e.writer.Update(ctx, cm, metav1.UpdateOptions{}); err != nil {
					t.Fatal(err)
				}
			}
			for _, n := range []string{"cm4", "cm5", "cm6"} {
				if err := e.writer.Delete(ctx, "default", n, metav1.DeleteOptions{}); err != nil {
					t.Fatal(err)
				}
			}
			for _, n := range []string{"new1", "new2", "cm6"} { // cm6 re-created: a new UID
				if _, err := e.writer.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: n}}, metav1.CreateOptions{}); err != nil {
					t.Fatal(err)
				}
			}
			waitConsistent(t, e.writer, "default", map[string]func() map[informer.Key]string{
				"cache": func() map[informer.Key]string { return listerRVs(inf.Lister()) }, "recorder": rec.rvs,
			})
			rec.mu.Lock()
			got := []int{rec.adds, rec.updates, rec.deletes, rec.unknown}
			errs := rec.errs
			rec.mu.Unlock()
			if want := []int{3, 3, 3, 3}; fmt.Sprint(got) != fmt.Sprint(want) {
				t.Errorf("after the relist: adds, updates, deletes, unknown deletes = %v, want %v", got, want)
			}
			for _, e := range errs {
				t.Error(e)
			}
			if lists := counter(t, reg, "objwatch_informer_lists_total"); lists != 2 {
				t.Errorf("lists = %v, want 2 (initial and one relist after 410)", lists)
			}
			for _, check := range checks {
				check(t, e)
			}
		})
	}
}

// metric sums the series of the named metric (with label = want, when
// label is set) and reports whether there were any.
func metric(t *testing.T, g prometheus.Gatherer, name, label, want string) (float64, bool) {
	t.Helper()
	mfs, err := g.Gather()
	if err != nil {
		t.Fatalf("Gather: %v", err)
	}
	var sum float64
	found := false
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			if label == "" || slices.ContainsFunc(m.GetLabel(), func(l *dto.LabelPair) bool { return l.GetName() == label && l.GetValue() == want }) {
				sum += value(m)
				found = true
			}
		}
	}
	return sum, found
}

// counter reads a metric's value (the sum over its series).
func counter(t *testing.T, g prometheus.Gatherer, name string) float64 {
	t.Helper()
	v, _ := metric(t, g, name, "", "")
	return v
}

// counterWith sums the series of a metric that have label = want.
func counterWith(t *testing.T, g prometheus.Gatherer, name, label, want string) float64 {
	t.Helper()
	v, _ := metric(t, g, name, label, want)
	return v
}

// gauge reads one handler's series of a metric, which must exist.
func gauge(t *testing.T, g prometheus.Gatherer, name, handler string) float64 {
	t.Helper()
	v, ok := metric(t, g, name, "handler", handler)
	if !ok {
		t.Fatalf("no %s for handler %s", name, handler)
	}
	return v
}

func value(m *dto.Metric) float64 {
	switch {
	case m.Counter != nil:
		return m.Counter.GetValue()
	case m.Gauge != nil:
		return m.Gauge.GetValue()
	}
	return 0
}

func TestRunTwice(t *testing.T) {
	e := startEnv(t)
	inf, err := informer.New(client.NewClient[CM](e.reader, configMaps), informer.Options[CM]{})
	if err != nil {
		t.Fatal(err)
	}
	stop := run(t, inf)
	stop()
	if err := inf.Run(context.Background()); err == nil {
		t.Errorf("second Run() = nil, want an error")
	}
	if _, err := informer.New(client.NewClient[CM](e.reader, configMaps), informer.Options[CM]{LabelSelector: "a in ((("}); err == nil {
		t.Errorf("New(bad selector) error = nil, want an error")
	}
	reg := prometheus.NewRegistry()
	if _, err := informer.New(client.NewClient[CM](e.reader, configMaps), informer.Options[CM]{Metrics: reg, Name: "x"}); err != nil {
		t.Fatal(err)
	}
	if _, err := informer.New(client.NewClient[CM](e.reader, configMaps), informer.Options[CM]{Metrics: reg, Name: "x"}); err == nil {
		t.Errorf("New(duplicate metrics name) error = nil, want an error")
	}
	_ = errors.New
}
