package informer_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/objwatch/objwatch/client"
	"github.com/objwatch/objwatch/client/informer"
)

// histogram returns the metric name's series whose labels include labels.
func histogram(t *testing.T, g prometheus.Gatherer, name string, labels map[string]string) *dto.Histogram {
	t.Helper()
	mfs, err := g.Gather()
	if err != nil {
		t.Fatalf("Gather: %v", err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	series:
		for _, m := range mf.GetMetric() {
			got := map[string]string{}
			for _, l := range m.GetLabel() {
				got[l.GetName()] = l.GetValue()
			}
			for k, v := range labels {
				if got[k] != v {
					continue series
				}
			}
			return m.GetHistogram()
		}
	}
	return nil
}

// counting is a handler that counts its calls.
type counting struct {
	mu                     sync.Mutex
	adds, updates, deletes int
}

func (c *counting) OnAdd(CM, bool) { c.mu.Lock(); c.adds++; c.mu.Unlock() }

func (c *counting) OnUpdate(CM, CM) { c.mu.Lock(); c.updates++; c.mu.Unlock() }

func (c *counting) OnDelete(CM, bool) { c.mu.Lock(); c.deletes++; c.mu.Unlock() }

func (c *counting) counts() [3]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return [3]int{c.adds, c.updates, c.deletes}
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestEventLagFromCommit checks that objwatch's server stamps watch events
// with their commit time, and that the informer measures handler lag from
// it (source="commit") for watched changes and from receipt for the list.
func TestEventLagFromCommit(t *testing.T) {
	if preferCBOR(t) {
		t.Skip("CBOR watch events carry no commit time (see the client package doc, CBOR)")
	}
	e := startEnv(t)
	ctx := testContext(t, 60*time.Second)
	for i := range 3 {
		if _, err := e.writer.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: fmt.Sprint("old", i)}},
			metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}

	// The stamp itself: after the write started, before we read it.
	w, err := e.writer.Watch(ctx, "default", metav1.ListOptions{ResourceVersion: "0"})
	if err != nil {
		t.Fatal(err)
	}
	before := time.Now()
	if _, err := e.writer.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "probe"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	for {
		ev, err := w.Next()
		if err != nil {
			t.Fatal(err)
		}
		if ev.Object.Name != "probe" {
			continue
		}
		if now := time.Now(); ev.CommitTime.Before(before) || ev.CommitTime.After(now) {
			t.Errorf("CommitTime = %v, want within [%v, %v]", ev.CommitTime, before, now)
		}
		break
	}
	w.Stop()

	reg := prometheus.NewPedanticRegistry()
	inf, err := informer.New(client.NewClient[CM](e.reader, configMaps), informer.Options[CM]{Metrics: reg, Name: "cms"})
	if err != nil {
		t.Fatal(err)
	}
	h := &counting{}
	if _, err := inf.AddHandler(h, informer.HandlerOptions{Name: "h"}); err != nil {
		t.Fatal(err)
	}
	run(t, inf)
	if err := inf.WaitForSync(ctx); err != nil {
		t.Fatal(err)
	}
	const n = 10
	for i := range n {
		cm, err := e.writer.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: fmt.Sprint("cm", i)}},
			metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		cm.Data = map[string]string{"v": "1"}
		if _, err := e.writer.Update(ctx, cm, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, "the handler to see every change", func() bool { c := h.counts(); return c[0] == 4+n && c[1] == n })

	commit := histogram(t, reg, "objwatch_informer_event_lag_seconds", map[string]string{"informer": "cms", "handler": "h", "source": "commit"})
	if commit == nil || commit.GetSampleCount() != 2*n {
		t.Fatalf("event lag, source=commit: %v, want %d observations", commit, 2*n)
	}
	if s := commit.GetSampleSum(); s < 0 || s/float64(2*n) > 1 {
		t.Errorf("event lag, source=commit: sum %v s over %d, want a small non-negative mean", s, 2*n)
	}
	for _, b := range commit.GetBucket() {
		if b.GetUpperBound() >= 2 && b.GetCumulativeCount() != 2*n {
			t.Errorf("event lag, source=commit: %d of %d observations ≤ %v s, want all", b.GetCumulativeCount(), 2*n, b.GetUpperBound())
			break
		}
	}
	// The initial list (a streaming list: initial events are not stamped).
	if recv := histogram(t, reg, "objwatch_informer_event_lag_seconds", map[string]string{"handler": "h", "source": "receive"}); recv.GetSampleCount() != 4 {
		t.Errorf("event lag, source=receive: %v, want 4 observations (the initial list)", recv)
	}
	if d := histogram(t, reg, "objwatch_informer_handler_duration_seconds", map[string]string{"handler": "h"}); d.GetSampleCount() != 4+2*n {
		t.Errorf("handler duration: %v, want %d observations", d, 4+2*n)
	}
}

// TestEventLagFromReceipt runs the informer against a server that does not
// stamp events (like Kubernetes): lag is measured from receipt.
func TestEventLagFromReceipt(t *testing.T) {
	const cm = `{"kind":"ConfigMap","apiVersion":"v1","metadata":{"namespace":"default","name":"a","uid":"u1","resourceVersion":"%d"}}`
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		q := r.URL.Query()
		w.Header().Set("Content-Type", "application/json")
		switch {
		case r.URL.Path != "/api/v1/configmaps":
			http.NotFound(w, r)
		case q.Get("watch") != "true" && q.Get("watch") != "1":
			fmt.Fprintf(w, `{"kind":"ConfigMapList","apiVersion":"v1","metadata":{"resourceVersion":"1"},"items":[`+cm+`]}`, 1)
		case q.Get("sendInitialEvents") == "true":
			w.WriteHeader(http.StatusBadRequest)
			fmt.Fprint(w, `{"kind":"Status","apiVersion":"v1","status":"Failure","reason":"BadRequest","code":400,"message":"no streaming lists"}`)
		case q.Get("resourceVersion") == "1":
			for rv := 2; rv <= 4; rv++ {
				fmt.Fprintf(w, `{"type":"MODIFIED","object":`+cm+"}\n", rv)
			}
			w.(http.Flusher).Flush()
			<-r.Context().Done()
		default:
			<-r.Context().Done()
		}
	}))
	t.Cleanup(srv.Close)
	rc, err := client.New(&client.Config{Host: srv.URL})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(rc.CloseIdleConnections)
	reg := prometheus.NewPedanticRegistry()
	inf, err := informer.New(client.NewClient[CM](rc, configMaps), informer.Options[CM]{Metrics: reg, Name: "cms", InitialBackoff: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	h := &counting{}
	if _, err := inf.AddHandler(h, informer.HandlerOptions{Name: "h"}); err != nil {
		t.Fatal(err)
	}
	stop := run(t, inf)
	// Lag is observed before the handler is called: once the handler has
	// seen every change, every observation is in.
	waitFor(t, "the handler to see every change", func() bool { return h.counts() == [3]int{1, 3, 0} })

	if c := histogram(t, reg, "objwatch_informer_event_lag_seconds", map[string]string{"source": "commit"}); c != nil {
		t.Errorf("event lag, source=commit: %v, want no series", c)
	}
	r := histogram(t, reg, "objwatch_informer_event_lag_seconds", map[string]string{"informer": "cms", "handler": "h", "source": "receive"})
	if r.GetSampleCount() != 4 || r.GetSampleSum() < 0 {
		t.Errorf("event lag, source=receive: %v, want 4 non-negative observations", r)
	}
	stop() // a stopped informer's series are unregistered
	if r := histogram(t, reg, "objwatch_informer_event_lag_seconds", map[string]string{"informer": "cms"}); r != nil {
		t.Errorf("event lag after Run returned: %v, want no series", r)
	}
}
