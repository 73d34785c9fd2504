package conversion_test

import (
	"bufio"
	"context"

	"encoding/json"

	"fmt"

	"net/http"

	"os"
	"os/exec"
	"strconv"
	"strings"

	"testing"
	"time"

	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/objwatch/objwatch/server"
	"github.com/objwatch/objwatch/server/servertest"
	"github.com/objwatch/objwatch/testenv"
)

// watchWidgets opens a watch and returns its events.
func watchWidgets(t *testing.T, ctx context.Context, a *servertest.API, path string) <-chan map[string]any {
	t.Helper()
	req, _ := http.NewRequestWithContext(ctx, "GET", a.Host+path, nil)
	resp, err := a.C.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK {
		resp.Body.Close()
		t.Fatalf("watch %s = %d", path, resp.StatusCode)
	}
	events := make(chan map[string]any, 100)
	go func() {
		defer close(events)
		defer resp.Body.Close()
		sc := bufio.NewScanner(resp.Body)
		for sc.Scan() {
			var ev map[string]any
			if json.Unmarshal(sc.Bytes(), &ev) == nil {
				events <- ev
			}
		}
	}()
	return events
}

func nextEvent(t *testing.T, events <-chan map[string]any, within time.Duration) map[string]any {
	t.Helper()
	select {
	case ev, ok := <-events:
		if !ok {
			t.Fatal("watch ended")
		}
		return ev
	case <-time.After(within):
		t.Fatalf("no watch event within %v", within)
	}
	return nil
}

// TestConversionWebhook: a CRD whose versions differ in shape is served
// in every version through its conversion webhook: writes in v2 are
// stored in v1, reads and watches in v2 of objects stored in v1 (and, after
// the storage version changes, in both) are converted, and a webhook that
// fails or answers wrongly is a clear error that writes nothing.
func TestConversionWebhook(t *testing.T) {
	env, w := servertest.StartWidgets(t)
	a := servertest.NewAPI(t, env)

	// Created in v1, read in v2; created in v2, read in v1.
	servertest.MustCode(t, "create a in v1", a.JSON("POST", servertest.WidgetsV1, servertest.WidgetV1("a", "3")), http.StatusCreated)
	r := a.JSON("POST", servertest.WidgetsV2, servertest.WidgetV2("b", 5))
	servertest.MustCode(t, "create b in v2", r, http.StatusCreated)
	if got := r.Object(); got["apiVersion"] != "example.com/v2" || servertest.SpecOf(got)["replicas"] != float64(5) {
		t.Errorf("create b in v2 answered %s", r.Body)
	}
	r = a.JSON("GET", servertest.WidgetsV2+"/a", "")
	servertest.MustCode(t, "get a in v2", r, http.StatusOK)
	if got := r.Object(); got["apiVersion"] != "example.com/v2" || servertest.SpecOf(got)["replicas"] != float64(3) || servertest.SpecOf(got)["size"] != nil {
		t.Errorf("a in v2 = %s, want spec.replicas 3", r.Body)
	}
	r = a.JSON("GET", servertest.WidgetsV1+"/b", "")
	servertest.MustCode(t, "get b in v1", r, http.StatusOK)
	if got := r.Object(); got["apiVersion"] != "example.com/v1" || servertest.SpecOf(got)["size"] != "5" {
		t.Errorf("b in v1 = %s, want spec.size \"5\"", r.Body)
	}
	for _, q := range []string{"", "?resourceVersion=0", "?limit=10"} { // cache, any state, etcd
		r = a.JSON("GET", servertest.WidgetsV2+q, "")
		servertest.MustCode(t, "list in v2"+q, r, http.StatusOK)
		items, _ := r.Object()["items"].([]any)
		if len(items) != 2 || servertest.SpecOf(items[0].(map[string]any))["replicas"] != float64(3) || servertest.SpecOf(items[1].(map[string]any))["replicas"] != float64(5) {
			t.Errorf("list in v2%s = %s", q, servertest.Truncate(r.Body))
		}
	}
	w.Reset()
	servertest.MustCode(t, "list in v1 from etcd", a.JSON("GET", servertest.WidgetsV1+"?limit=10", ""), http.StatusOK)
	if calls := w.Reset(); len(calls) != 0 {
		t.Errorf("a list in the storage version called the webhook: %v", calls)
	}

	t.Run("watch", func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		rv := servertest.RVOf(t, a.JSON("GET", servertest.WidgetsV2, ""))
		w1 := watchWidgets(t, ctx, a, servertest.WidgetsV2+"?watch=1&resourceVersion="+rv)
		w2 := watchWidgets(t, ctx, a, servertest.WidgetsV2+"?watch=1&resourceVersion="+rv)
		servertest.MustCode(t, "create c in v1", a.JSON("POST", servertest.WidgetsV1, servertest.WidgetV1("c", "7")), http.StatusCreated)
		for _, events := range []<-chan map[string]any{w1, w2} {
			ev := nextEvent(t, events, 5*time.Second)
			obj, _ := ev["object"].(map[string]any)
			if ev["type"] != "ADDED" || obj["apiVersion"] != "example.com/v2" || servertest.SpecOf(obj)["replicas"] != float64(7) {
				t.Errorf("watch in v2 got %v, want c ADDED in v2", ev)
			}
		}
		// Converted once for both watchers: by the v2 watch cache.
		if n := w.CallsFor("example.com/v2", "c"); n != 1 {
			t.Errorf("c was converted to v2 %d times for two watchers, want once", n)
		}

		// The webhook fails: as in Kubernetes, the v2 cache waits for it
		// (the event is not lost, nothing newer comes), then delivers.
		w.SetMode("500")
		servertest.MustCode(t, "create d in v1", a.JSON("POST", servertest.WidgetsV1, servertest.WidgetV1("d", "1")), http.StatusCreated)
		select {
		case ev := <-w1:
			t.Fatalf("an event while the webhook fails: %v", ev)
		case <-time.After(500 * time.Millisecond):
		}
		w.SetMode("ok")
		ev := nextEvent(t, w1, 10*time.Second)
		if obj, _ := ev["object"].(map[string]any); ev["type"] != "ADDED" || servertest.SpecOf(obj)["replicas"] != float64(1) {
			t.Errorf("after the webhook recovered: %v, want d ADDED in v2", ev)
		}
		servertest.MustCode(t, "delete d", a.JSON("DELETE", servertest.WidgetsV1+"/d", ""), http.StatusOK)
	})

	t.Run("failures", func(t *testing.T) {
		defer w.SetMode("ok")
		prefix := "conversion webhook for example.com/v2, Kind=Widget "
		for _, tc := range []struct{ mode, want string }{
			{"500", prefix + `failed: an error on the server ("boom") has prevented the request from succeeding`},
			{"garbage", prefix + "failed: "},
			{"wronguid", prefix + `failed: expected response.uid=`},
			{"rename", prefix + "returned invalid object: must have the same name: x-rename != other"},
			{"refuse", prefix + "failed: cannot convert this one"},
			{"count", prefix + "returned 0 objects, expected 1"},
		} {
			w.SetMode(tc.mode)
			r := a.JSON("POST", servertest.WidgetsV2, servertest.WidgetV2("x-"+tc.mode, 1))
			st := r.Status()
			if r.Code != http.StatusInternalServerError || !strings.HasPrefix(st.Message, tc.want) {
				t.Errorf("%s: create in v2 = %d %q, want 500 %q", tc.mode, r.Code, st.Message, tc.want)
			}
			r = a.Do("PATCH", servertest.WidgetsV2+"/b", "application/merge-patch+json", []byte(`{"spec":{"replicas":9}}`))
			if r.Code != http.StatusInternalServerError {
				t.Errorf("%s: update in v2 = %d %s, want 500", tc.mode, r.Code, servertest.Truncate(r.Body))
			}
			w.SetMode("ok")
			servertest.MustCode(t, tc.mode+": x in v1", a.JSON("GET", servertest.WidgetsV1+"/x-"+tc.mode, ""), http.StatusNotFound)
			if got := servertest.SpecOf(a.JSON("GET", servertest.WidgetsV1+"/b", "").Object()); got["size"] != "5" {
				t.Errorf("%s: b after the failed update = %v, want size 5", tc.mode, got)
			}
		}

		// Reads: v2 fails clearly, v1 (the storage version) works.
		w.SetMode("500")
		r := a.JSON("GET", servertest.WidgetsV2+"/a", "")
		want := `Internal error occurred: StorageError: corrupt object, Code: 7, Key: /example.com/widgets/default/a, ResourceVersion: 0, AdditionalErrorMsg: object not decodable revision=`
		if st := r.Status(); r.Code != http.StatusInternalServerError || st.Reason != "InternalError" || !strings.HasPrefix(st.Message, want) ||
			!strings.Contains(st.Message, `conversion webhook for example.com/v1, Kind=Widget failed: an error on the server ("boom")`) {
			t.Errorf("get in v2 with the webhook failing = %d %s", r.Code, r.Body)
		}
		if r := a.JSON("GET", servertest.WidgetsV2+"?limit=10", ""); r.Code != http.StatusInternalServerError || !strings.Contains(r.Status().Message, "conversion webhook for example.com/v1, Kind=Widget failed") {
			t.Errorf("list in v2 from etcd with the webhook failing = %d %s", r.Code, servertest.Truncate(r.Body))
		}
		servertest.MustCode(t, "get in v1 with the webhook failing", a.JSON("GET", servertest.WidgetsV1+"/a", ""), http.StatusOK)
		servertest.MustCode(t, "list in v1 with the webhook failing", a.JSON("GET", servertest.WidgetsV1+"?limit=10", ""), http.StatusOK)
		servertest.MustCode(t, "create in v1 with the webhook failing", a.JSON("POST", servertest.WidgetsV1, servertest.WidgetV1("y", "2")), http.StatusCreated)

		// Labels and annotations may change in a conversion; other
		// metadata is restored.
		w.SetMode("metadata")
		r = a.JSON("GET", servertest.WidgetsV2+"/a", "")
		md, _ := r.Object()["metadata"].(map[string]any)
		if labels, _ := md["labels"].(map[string]any); labels["converted"] != "yes" || md["generation"] != float64(1) || md["finalizers"] != nil {
			t.Errorf("metadata after a conversion = %v, want the label and nothing else changed", md)
		}
	})

	t.Run("apply", func(t *testing.T) {
		// Server-side apply in v2 to an object written in v1: stored in
		// v1, the managers' entries keep their own apiVersion.
		r := a.Do("PATCH", servertest.WidgetsV2+"/a?fieldManager=applier&force=true", "application/apply-patch+yaml",
			[]byte("apiVersion: example.com/v2\nkind: Widget\nmetadata:\n  name: a\nspec:\n  replicas: 4\n"))
		servertest.MustCode(t, "apply in v2", r, http.StatusOK)
		if servertest.SpecOf(r.Object())["replicas"] != float64(4) {
			t.Errorf("apply in v2 answered %s", r.Body)
		}
		got := a.JSON("GET", servertest.WidgetsV1+"/a", "").Object()
		if servertest.SpecOf(got)["size"] != "4" {
			t.Errorf("a in v1 after the apply = %v", got)
		}
		md, _ := got["metadata"].(map[string]any)
		versions := map[string]string{}
		for _, e := range md["managedFields"].([]any) {
			e := e.(map[string]any)
			versions[e["manager"].(string)] = e["apiVersion"].(string)
		}
		if versions["applier"] != "example.com/v2" {
			t.Errorf("managedFields = %v, want applier's entry in example.com/v2", md["managedFields"])
		}
	})

	t.Run("kubectl", func(t *testing.T) {
		kubectl, err := exec.LookPath("kubectl")
		if err != nil {
			t.Skip("kubectl is not on PATH")
		}
		out, err := exec.Command(kubectl, "--kubeconfig", env.Kubeconfig, "get", "widgets.v2.example.com", "-n", "default", "a", "-o", "jsonpath={.apiVersion} {.spec.replicas}").CombinedOutput()
		if err != nil || string(out) != "example.com/v2 4" {
			t.Errorf("kubectl get widgets.v2.example.com a = %q, %v", out, err)
		}
	})

	t.Run("storage version v2", func(t *testing.T) {
		// Switch the storage version: objects stored in v1 stay there
		// until rewritten, new ones are stored in v2, and a list in
		// either version converts those stored in the other.
		cur := a.JSON("GET", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/widgets.example.com", "").Object()
		next := map[string]any{}
		json.Unmarshal([]byte(servertest.WidgetCRD(w.Srv.URL+"/convert", w.CaPEM, "v2")), &next)
		next["metadata"] = cur["metadata"]
		b, _ := json.Marshal(next)
		servertest.MustCode(t, "switch storage to v2", a.JSON("PUT", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/widgets.example.com", string(b)), http.StatusOK)
		deadline := time.Now().Add(10 * time.Second)
		for {
			res, ok := env.Server.Registry().Get(schema.GroupVersionResource{Group: "example.com", Version: "v2", Resource: "widgets"})
			if ok && res.Versions != nil && res.Versions.StorageVersion() == "v2" {
				break
			}
			if time.Now().After(deadline) {
				t.Fatal("storage version not v2 within 10 s")
			}
			time.Sleep(20 * time.Millisecond)
		}
		servertest.MustCode(t, "create e in v2", a.JSON("POST", servertest.WidgetsV2, servertest.WidgetV2("e", 6)), http.StatusCreated)
		w.Reset()
		r := a.JSON("GET", servertest.WidgetsV2+"?limit=100", "")
		servertest.MustCode(t, "list in v2", r, http.StatusOK)
		items, _ := r.Object()["items"].([]any)
		got := map[string]any{}
		for _, it := range items {
			it := it.(map[string]any)
			got[it["metadata"].(map[string]any)["name"].(string)] = servertest.SpecOf(it)["replicas"]
		}
		want := map[string]any{"a": float64(4), "b": float64(5), "c": float64(7), "e": float64(6), "y": float64(2)}
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("list in v2 = %v, want %v", got, want)
		}
		// One review for the page: the four objects stored in v1. (The
		// new watch caches convert one object per review meanwhile.)
		var toV2 []servertest.ConvCall
		for _, c := range w.Reset() {
			if c.Desired == "example.com/v2" && len(c.Names) > 1 {
				toV2 = append(toV2, c)
			}
		}
		if len(toV2) != 1 || len(toV2[0].Names) != 4 {
			t.Errorf("list in v2 made reviews %v, want one of the 4 objects stored in v1", toV2)
		}
		r = a.JSON("GET", servertest.WidgetsV1+"/e", "")
		if servertest.SpecOf(r.Object())["size"] != "6" {
			t.Errorf("e (stored in v2) in v1 = %s", r.Body)
		}
		// With the webhook gone, v2 objects stored in v2 still read.
		w.Close()
		servertest.MustCode(t, "get e in v2, webhook down", a.JSON("GET", servertest.WidgetsV2+"/e", ""), http.StatusOK)
		r = a.JSON("GET", servertest.WidgetsV2+"/b", "")
		// kube-apiserver v1.37.2, its webhook stopped: `... conversion webhook for
		// example.com/v1, Kind=Widget failed: Post "https://127.0.0.1:PORT/convert?timeout=30s":
		// dial tcp 127.0.0.1:PORT: connect: connection refused`.
		if msg := r.Status().Message; r.Code != http.StatusInternalServerError || !strings.Contains(msg, `conversion webhook for example.com/v1, Kind=Widget failed: Post "https://`) ||
			!strings.Contains(msg, `?timeout=30s": dial tcp `) {
			t.Errorf("get b (stored in v1) in v2, webhook down = %d %s", r.Code, r.Body)
		}
	})
}

// TestConversionWebhookWatchFromEtcd: a watch served from etcd (no watch
// cache) whose event does not convert ends with an ERROR event, as
// kube-apiserver's etcd watcher ends it.
func TestConversionWebhookWatchFromEtcd(t *testing.T) {
	env, w := servertest.StartWidgets(t, testenv.WithServerConfig(func(c *server.Config) { c.DisableWatchCache = true }))
	a := servertest.NewAPI(t, env)
	rv := servertest.RVOf(t, a.JSON("POST", servertest.WidgetsV1, servertest.WidgetV1("a", "3")))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	events := watchWidgets(t, ctx, a, servertest.WidgetsV2+"?watch=1&resourceVersion="+rv)
	servertest.MustCode(t, "create b", a.JSON("POST", servertest.WidgetsV1, servertest.WidgetV1("b", "4")), http.StatusCreated)
	if ev := nextEvent(t, events, 5*time.Second); ev["type"] != "ADDED" || servertest.SpecOf(ev["object"].(map[string]any))["replicas"] != float64(4) {
		t.Fatalf("watch in v2 got %v", ev)
	}
	w.SetMode("500")
	servertest.MustCode(t, "create c", a.JSON("POST", servertest.WidgetsV1, servertest.WidgetV1("c", "5")), http.StatusCreated)
	ev := nextEvent(t, events, 5*time.Second)
	st, _ := ev["object"].(map[string]any)
	if msg, _ := st["message"].(string); ev["type"] != "ERROR" || st["code"] != float64(500) || !strings.Contains(msg, "conversion webhook for example.com/v1, Kind=Widget failed") {
		t.Fatalf("after a failed conversion: %v, want an ERROR event", ev)
	}
	if ev, ok := <-events; ok {
		t.Errorf("the watch went on after its ERROR event: %v", ev)
	}
}

// BenchmarkConversionList lists N widgets stored in v1 through etcd
// (limit, so the watch cache does not answer) and through the watch cache,
// in v1 (the storage version: no conversion) and in v2 (one
// ConversionReview per etcd page; the cache holds them converted).
func BenchmarkConversionList(b *testing.B) {
	n := 500
	if s := os.Getenv("CONVERSION_BENCH_N"); s != "" {
		n, _ = strconv.Atoi(s)
	}
	env, _ := servertest.StartWidgets(b)
	c, host := env.HTTPClient(), env.Config.Host
	for i := range n {
		if code, body := servertest.RawJSON(b, c, host+servertest.WidgetsV1, "POST", servertest.WidgetV1(fmt.Sprintf("w%04d", i), strconv.Itoa(i))); code != http.StatusCreated {
			b.Fatalf("create = %d %s", code, body)
		}
	}
	for _, bc := range []struct{ name, path string }{
		{"etcd/v1", servertest.WidgetsV1 + "?limit=100000"},
		{"etcd/v2", servertest.WidgetsV2 + "?limit=100000"},
		{"cache/v1", servertest.WidgetsV1},
		{"cache/v2", servertest.WidgetsV2},
	} {
		b.Run(bc.name, func(b *testing.B) {
			for b.Loop() {
				code, body := servertest.RawJSON(b, c, host+bc.path, "GET", "")
				if code != http.StatusOK || strings.Count(string(body), `"kind":"Widget"`) != n {
					b.Fatalf("list = %d %s", code, servertest.Truncate(body))
				}
			}
			b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(b.N)/float64(n), "µs/object")
		})
	}
}
