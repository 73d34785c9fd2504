package server_test

import (
	"bufio"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/objwatch/objwatch/server"
	"github.com/objwatch/objwatch/testenv"
)

const (
	coreEventsPath = "/api/v1/namespaces/default/events"
	eventsV1Path   = "/apis/events.k8s.io/v1/namespaces/default/events"
)

// newEvent is an events.k8s.io/v1 event as client-go's events library
// writes it.
func newEvent(name string) string {
	return fmt.Sprintf(`{"apiVersion":"events.k8s.io/v1","kind":"Event","metadata":{"name":%q,"namespace":"default"},
		"eventTime":"2026-01-02T03:04:05.000006Z","reportingController":"example.com/ctl","reportingInstance":"ctl-1",
		"action":"Sync","reason":"Synced","note":"all good","type":"Normal",
		"regarding":{"apiVersion":"v1","kind":"ConfigMap","namespace":"default","name":"c","uid":"u-1"},
		"related":{"kind":"Secret","namespace":"default","name":"s"},
		"series":{"count":2,"lastObservedTime":"2026-01-02T03:04:06.000007Z"}}`, name)
}

// field returns the value at a dotted path of a decoded object.
func field(obj map[string]any, path string) any {
	var v any = obj
	for _, p := range strings.Split(path, ".") {
		m, _ := v.(map[string]any)
		v = m[p]
	}
	return v
}

func checkFields(t *testing.T, what string, obj map[string]any, want map[string]any) {
	t.Helper()
	for p, w := range want {
		if got := field(obj, p); fmt.Sprint(got) != fmt.Sprint(w) {
			t.Errorf("%s: %s = %v, want %v", what, p, got, w)
		}
	}
	for _, absent := range []string{"note", "regarding", "message", "involvedObject"} {
		// Each API shows only its own names.
		if _, ok := obj[absent]; ok && ((obj["apiVersion"] == "v1") == (absent == "note" || absent == "regarding")) {
			t.Errorf("%s has %s: %v", what, absent, obj)
		}
	}
}

// TestEventsBothAPIs: events.k8s.io/v1 and core/v1 events are one set of
// objects, each API showing them with its own field names.
func TestEventsBothAPIs(t *testing.T) {
	env := testenv.Start(t)
	a := newAPI(t, env)

	// Discovery and OpenAPI list the group.
	if r := a.json("GET", "/apis/events.k8s.io/v1", ""); r.code != 200 || !strings.Contains(string(r.body), `"name":"events"`) {
		t.Fatalf("GET /apis/events.k8s.io/v1 = %d %s", r.code, r.body)
	}
	if d := openAPIDiscovery(t, a); d.Paths["apis/events.k8s.io/v1"].ServerRelativeURL == "" {
		t.Errorf("/openapi/v3 has no apis/events.k8s.io/v1: %v", d.Paths)
	}
	if sw, _ := openAPIV2(t, a); func() bool { n, _ := v2Kind(sw, "events.k8s.io", "v1", "Event"); return n == "" }() {
		t.Errorf("/openapi/v2 has no events.k8s.io/v1 Event")
	}

	// Written through events.k8s.io, read through both.
	r := a.json("POST", eventsV1Path, newEvent("e1"))
	if r.code != http.StatusCreated {
		t.Fatalf("create events.k8s.io event = %d %s", r.code, r.body)
	}
	created := r.object()
	eventsV1 := map[string]any{
		"apiVersion": "events.k8s.io/v1", "kind": "Event", "note": "all good", "regarding.name": "c", "regarding.uid": "u-1",
		"reportingController": "example.com/ctl", "reportingInstance": "ctl-1", "action": "Sync", "reason": "Synced",
		"type": "Normal", "related.name": "s", "series.count": 2, "eventTime": "2026-01-02T03:04:05.000006Z",
		"series.lastObservedTime": "2026-01-02T03:04:06.000007Z",
	}
	checkFields(t, "create response", created, eventsV1)
	core := a.json("GET", coreEventsPath+"/e1", "").object()
	checkFields(t, "core/v1 GET", core, map[string]any{
		"apiVersion": "v1", "kind": "Event", "message": "all good", "involvedObject.name": "c", "involvedObject.uid": "u-1",
		"reportingComponent": "example.com/ctl", "reportingInstance": "ctl-1", "action": "Sync", "reason": "Synced",
		"type": "Normal", "related.name": "s", "series.count": 2, "eventTime": "2026-01-02T03:04:05.000006Z",
		"metadata.resourceVersion": field(created, "metadata.resourceVersion"), "metadata.uid": field(created, "metadata.uid"),
	})
	// resourceVersion=0 may answer from a cache that has not seen the
	// create yet (as in Kubernetes): wait until it has.
	eventsGVR := schema.GroupVersionResource{Group: "events.k8s.io", Version: "v1", Resource: "events"}
	waitCache(t, env, eventsGVR, field(created, "metadata.resourceVersion").(string))
	checkFields(t, "events.k8s.io GET", a.json("GET", eventsV1Path+"/e1?resourceVersion=0", "").object(), eventsV1)

	// Written through core/v1 (as the legacy recorder does), read through
	// events.k8s.io with the deprecated fields.
	r = a.json("POST", coreEventsPath, `{"apiVersion":"v1","kind":"Event","metadata":{"name":"e2"},
		"involvedObject":{"kind":"ConfigMap","namespace":"default","name":"c"},"reason":"Old","message":"legacy",
		"source":{"component":"kubelet","host":"n1"},"firstTimestamp":"2026-01-02T03:04:05Z","lastTimestamp":"2026-01-02T03:04:09Z","count":3,"type":"Warning"}`)
	if r.code != http.StatusCreated {
		t.Fatalf("create core event = %d %s", r.code, r.body)
	}
	checkFields(t, "events.k8s.io GET of a core event", a.json("GET", eventsV1Path+"/e2", "").object(), map[string]any{
		"apiVersion": "events.k8s.io/v1", "note": "legacy", "regarding.name": "c", "deprecatedSource.component": "kubelet",
		"deprecatedSource.host": "n1", "deprecatedFirstTimestamp": "2026-01-02T03:04:05Z", "deprecatedLastTimestamp": "2026-01-02T03:04:09Z",
		"deprecatedCount": 3, "type": "Warning", "reason": "Old",
	})

	// Lists (watch cache and etcd) and field selectors with each API's names.
	waitCache(t, env, eventsGVR, rvOf(t, r))
	for _, q := range []string{"", "?resourceVersion=0", "?limit=10"} {
		l := a.json("GET", eventsV1Path+q, "").object()
		items, _ := l["items"].([]any)
		if l["kind"] != "EventList" || l["apiVersion"] != "events.k8s.io/v1" || len(items) != 2 {
			t.Fatalf("list events.k8s.io%s = %v", q, l)
		}
		for _, it := range items {
			if it.(map[string]any)["apiVersion"] != "events.k8s.io/v1" || it.(map[string]any)["note"] == nil {
				t.Errorf("list events.k8s.io%s item = %v, want the events.k8s.io form", q, it)
			}
		}
	}
	for _, q := range []struct{ path, sel, want string }{
		{eventsV1Path, "regarding.name%3Dc,reason%3DSynced", "e1"},
		{eventsV1Path, "reportingController%3Dexample.com/ctl", "e1"},
		{eventsV1Path, "source%3Dkubelet", "e2"},
		{coreEventsPath, "involvedObject.uid%3Du-1", "e1"},
		{coreEventsPath, "reportingComponent%3Dexample.com/ctl", "e1"},
	} {
		l := a.json("GET", q.path+"?fieldSelector="+q.sel, "").object()
		items, _ := l["items"].([]any)
		if len(items) != 1 || field(items[0].(map[string]any), "metadata.name") != q.want {
			t.Errorf("GET %s?fieldSelector=%s = %v, want only %s", q.path, q.sel, l, q.want)
		}
	}
	if r := a.json("GET", eventsV1Path+"?fieldSelector=involvedObject.name%3Dc", ""); r.code != http.StatusBadRequest {
		t.Errorf("events.k8s.io selector on involvedObject.name = %d, want 400 (not a field of this API)", r.code)
	}

	// A patch through events.k8s.io (series) is seen through core/v1; one
	// that changes nothing writes nothing.
	rv := rvOf(t, a.json("GET", coreEventsPath+"/e1", ""))
	r = a.do("PATCH", eventsV1Path+"/e1", "application/merge-patch+json", []byte(`{"series":{"count":3,"lastObservedTime":"2026-01-02T03:05:00.000000Z"}}`))
	if r.code != 200 || field(r.object(), "series.count") != float64(3) || r.object()["note"] != "all good" {
		t.Fatalf("patch events.k8s.io series = %d %s", r.code, r.body)
	}
	if got := field(a.json("GET", coreEventsPath+"/e1", "").object(), "series.count"); got != float64(3) {
		t.Errorf("core series.count after the patch = %v, want 3", got)
	}
	rv2 := rvOf(t, r)
	for range 2 {
		if r := a.do("PATCH", eventsV1Path+"/e1", "application/merge-patch+json", []byte(`{}`)); r.code != 200 || rvOf(t, r) != rv2 {
			t.Errorf("empty patch = %d rv %s, want 200 and rv %s (was %s)", r.code, rvOf(t, r), rv2, rv)
		}
	}
	// Immutable through events.k8s.io, as in Kubernetes.
	if r := a.do("PATCH", eventsV1Path+"/e1", "application/merge-patch+json", []byte(`{"note":"changed"}`)); r.code != http.StatusUnprocessableEntity || !strings.Contains(r.status().Message, "message: Invalid value") {
		t.Errorf("patch of note = %d %s, want 422 (message is immutable)", r.code, r.body)
	}

	// Deleting through one API removes it from both.
	if r := a.json("DELETE", eventsV1Path+"/e2", ""); r.code != 200 {
		t.Fatalf("delete = %d %s", r.code, r.body)
	}
	if r := a.json("GET", coreEventsPath+"/e2", ""); r.code != http.StatusNotFound {
		t.Errorf("core GET after delete = %d", r.code)
	}
	if r := a.json("GET", eventsV1Path+"/e2", ""); r.code != http.StatusNotFound || !strings.Contains(r.status().Message, `events.events.k8s.io "e2" not found`) {
		t.Errorf("events.k8s.io GET after delete = %d %s", r.code, r.body)
	}
}

// TestEventsValidation: events.k8s.io/v1 creates are validated as
// Kubernetes validates them; core/v1 keeps the legacy rules.
func TestEventsValidation(t *testing.T) {
	env := testenv.Start(t)
	a := newAPI(t, env)
	base := newEvent("x")
	tests := []struct {
		name, body, want string
	}{
		{"no eventTime", strings.Replace(base, `"eventTime":"2026-01-02T03:04:05.000006Z",`, "", 1), "eventTime: Required value"},
		{"no reportingController", strings.Replace(base, `"reportingController":"example.com/ctl",`, "", 1), "reportingController: Required value"},
		{"no action", strings.Replace(base, `"action":"Sync",`, "", 1), "action: Required value"},
		{"bad type", strings.Replace(base, `"type":"Normal"`, `"type":"Bad"`, 1), "type: Invalid value"},
		{"deprecated count", strings.Replace(base, `"type":"Normal"`, `"type":"Normal","deprecatedCount":2`, 1), "count: Invalid value"},
		{"short series", strings.Replace(base, `"count":2`, `"count":1`, 1), "series.count: Invalid value"},
	}
	for _, tc := range tests {
		r := a.json("POST", eventsV1Path, tc.body)
		if r.code != http.StatusUnprocessableEntity || !strings.Contains(r.status().Message, tc.want) {
			t.Errorf("%s: create = %d %s, want 422 with %q", tc.name, r.code, r.body, tc.want)
		}
	}
	// The legacy API accepts an event without eventTime and reporting fields.
	if r := a.json("POST", coreEventsPath, `{"metadata":{"name":"old"},"involvedObject":{"kind":"Pod","namespace":"default","name":"p"},"reason":"R"}`); r.code != http.StatusCreated {
		t.Errorf("core create of a legacy event = %d %s", r.code, r.body)
	}
	// ... but not a new-style one without them.
	if r := a.json("POST", coreEventsPath, `{"metadata":{"name":"half"},"eventTime":"2026-01-02T03:04:05.000000Z","involvedObject":{"kind":"Pod","namespace":"default","name":"p"}}`); r.code != http.StatusUnprocessableEntity || !strings.Contains(r.status().Message, "reportingComponent") && !strings.Contains(r.status().Message, "reportingController") {
		t.Errorf("core create of a new-style event without reporting fields = %d %s, want 422", r.code, r.body)
	}
}

// TestEventsWatchBothAPIs: a watch through events.k8s.io delivers core
// writes converted, from the watch cache and from etcd.
func TestEventsWatchBothAPIs(t *testing.T) {
	for _, cache := range []bool{true, false} {
		t.Run(fmt.Sprintf("cache=%v", cache), func(t *testing.T) {
			env := testenv.Start(t, testenv.WithServerConfig(func(c *server.Config) { c.DisableWatchCache = !cache }))
			a := newAPI(t, env)
			rv := rvOf(t, a.json("POST", coreEventsPath, `{"metadata":{"name":"w0"},"involvedObject":{"kind":"Pod","namespace":"default","name":"p"},"message":"zero"}`))
			resp, err := a.c.Get(a.host + eventsV1Path + "?watch=true&allowWatchBookmarks=true&resourceVersion=" + rv)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			sc := bufio.NewScanner(resp.Body)
			next := func() (string, map[string]any) {
				t.Helper()
				for sc.Scan() {
					var ev struct {
						Type   string
						Object map[string]any
					}
					if err := json.Unmarshal(sc.Bytes(), &ev); err != nil {
						t.Fatal(err)
					}
					if ev.Type != "BOOKMARK" {
						return ev.Type, ev.Object
					}
				}
				t.Fatalf("watch ended: %v", sc.Err())
				return "", nil
			}
			a.json("POST", coreEventsPath, `{"metadata":{"name":"w1"},"involvedObject":{"kind":"Pod","namespace":"default","name":"p"},"message":"one"}`)
			typ, obj := next()
			if typ != "ADDED" || obj["apiVersion"] != "events.k8s.io/v1" || obj["note"] != "one" || field(obj, "regarding.name") != "p" {
				t.Fatalf("event = %s %v, want ADDED w1 in the events.k8s.io form", typ, obj)
			}
			a.do("PATCH", coreEventsPath+"/w1", "application/merge-patch+json", []byte(`{"count":5}`))
			if typ, obj = next(); typ != "MODIFIED" || obj["deprecatedCount"] != float64(5) {
				t.Fatalf("event = %s %v, want MODIFIED with deprecatedCount 5", typ, obj)
			}
			a.json("DELETE", eventsV1Path+"/w1", "")
			if typ, obj = next(); typ != "DELETED" || obj["note"] != "one" {
				t.Fatalf("event = %s %v, want DELETED w1", typ, obj)
			}
		})
	}
}
