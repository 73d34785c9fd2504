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
	"github.com/objwatch/objwatch/server/servertest"
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

// TestEventsBothAPIs: events.k8s.io/v1 and core/v1 events are one set of
// objects, each API showing them with its own field names.
func TestEventsBothAPIs(t *testing.T) {
	env := testenv.Start(t)
	a := servertest.NewAPI(t, env)

	// Discovery and OpenAPI list the group.
	if r := a.JSON("GET", "/apis/events.k8s.io/v1", ""); r.Code != 200 || !strings.Contains(string(r.Body), `"name":"events"`) {
		t.Fatalf("GET /apis/events.k8s.io/v1 = %d %s", r.Code, r.Body)
	}
	if d := servertest.OpenAPIDiscovery(t, a); d.Paths["apis/events.k8s.io/v1"].ServerRelativeURL == "" {
		t.Errorf("/openapi/v3 has no apis/events.k8s.io/v1: %v", d.Paths)
	}
	if sw, _ := servertest.OpenAPIV2(t, a); func() bool { n, _ := servertest.V2Kind(sw, "events.k8s.io", "v1", "Event"); return n == "" }() {
		t.Errorf("/openapi/v2 has no events.k8s.io/v1 Event")
	}

	// Written through events.k8s.io, read through both.
	r := a.JSON("POST", eventsV1Path, newEvent("e1"))
	if r.Code != http.StatusCreated {
		t.Fatalf("create events.k8s.io event = %d %s", r.Code, r.Body)
	}
	created := r.Object()
	eventsV1 := map[string]any{
		"apiVersion": "events.k8s.io/v1", "kind": "Event", "note": "all good", "regarding.name": "c", "regarding.uid": "u-1",
		"reportingController": "example.com/ctl", "reportingInstance": "ctl-1", "action": "Sync", "reason": "Synced",
		"type": "Normal", "related.name": "s", "series.count": 2, "eventTime": "2026-01-02T03:04:05.000006Z",
		"series.lastObservedTime": "2026-01-02T03:04:06.000007Z",
	}
	servertest.CheckFields(t, "create response", created, eventsV1)
	core := a.JSON("GET", coreEventsPath+"/e1", "").Object()
	servertest.CheckFields(t, "core/v1 GET", core, map[string]any{
		"apiVersion": "v1", "kind": "Event", "message": "all good", "involvedObject.name": "c", "involvedObject.uid": "u-1",
		"reportingComponent": "example.com/ctl", "reportingInstance": "ctl-1", "action": "Sync", "reason": "Synced",
		"type": "Normal", "related.name": "s", "series.count": 2, "eventTime": "2026-01-02T03:04:05.000006Z",
		"metadata.resourceVersion": servertest.Field(created, "metadata.resourceVersion"), "metadata.uid": servertest.Field(created, "metadata.uid"),
	})
	// resourceVersion=0 may answer from a cache that has not seen the
	// create yet (as in Kubernetes): wait until it has.
	eventsGVR := schema.GroupVersionResource{Group: "events.k8s.io", Version: "v1", Resource: "events"}
	waitCache(t, env, eventsGVR, servertest.Field(created, "metadata.resourceVersion").(string))
	servertest.CheckFields(t, "events.k8s.io GET", a.JSON("GET", eventsV1Path+"/e1?resourceVersion=0", "").Object(), eventsV1)

	// Written through core/v1 (as the legacy recorder does), read through
	// events.k8s.io with the deprecated fields.
	r = a.JSON("POST", coreEventsPath, `{"apiVersion":"v1","kind":"Event","metadata":{"name":"e2"},
		"involvedObject":{"kind":"ConfigMap","namespace":"default","name":"c"},"reason":"Old","message":"legacy",
		"source":{"component":"kubelet","host":"n1"},"firstTimestamp":"2026-01-02T03:04:05Z","lastTimestamp":"2026-01-02T03:04:09Z","count":3,"type":"Warning"}`)
	if r.Code != http.StatusCreated {
		t.Fatalf("create core event = %d %s", r.Code, r.Body)
	}
	servertest.CheckFields(t, "events.k8s.io GET of a core event", a.JSON("GET", eventsV1Path+"/e2", "").Object(), map[string]any{
		"apiVersion": "events.k8s.io/v1", "note": "legacy", "regarding.name": "c", "deprecatedSource.component": "kubelet",
		"deprecatedSource.host": "n1", "deprecatedFirstTimestamp": "2026-01-02T03:04:05Z", "deprecatedLastTimestamp": "2026-01-02T03:04:09Z",
		"deprecatedCount": 3, "type": "Warning", "reason": "Old",
	})

	// Lists (watch cache and etcd) and field selectors with each API's names.
	waitCache(t, env, eventsGVR, servertest.RVOf(t, r))
	for _, q := range []string{"", "?resourceVersion=0", "?limit=10"} {
		l := a.JSON("GET", eventsV1Path+q, "").Object()
		items, _ := l["items"].([]any)
		if l["kind"] != "EventList" || l["apiVersion"] != "events.k8s.io/v1" || len(items) != 2 {
			t.Fatalf("list events.k8s.io%s = %v", q, l)
		}
		for _, it := range items {
			// The events.k8s.io form (note, not message), bare as kube's
			// typed list items are (no apiVersion and kind).
			if it.(map[string]any)["apiVersion"] != nil || it.(map[string]any)["note"] == nil || it.(map[string]any)["message"] != nil {
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
		l := a.JSON("GET", q.path+"?fieldSelector="+q.sel, "").Object()
		items, _ := l["items"].([]any)
		if len(items) != 1 || servertest.Field(items[0].(map[string]any), "metadata.name") != q.want {
			t.Errorf("GET %s?fieldSelector=%s = %v, want only %s", q.path, q.sel, l, q.want)
		}
	}
	if r := a.JSON("GET", eventsV1Path+"?fieldSelector=involvedObject.name%3Dc", ""); r.Code != http.StatusBadRequest {
		t.Errorf("events.k8s.io selector on involvedObject.name = %d, want 400 (not a field of this API)", r.Code)
	}

	// A patch through events.k8s.io (series) is seen through core/v1; one
	// that changes nothing writes nothing.
	rv := servertest.RVOf(t, a.JSON("GET", coreEventsPath+"/e1", ""))
	r = a.Do("PATCH", eventsV1Path+"/e1", "application/merge-patch+json", []byte(`{"series":{"count":3,"lastObservedTime":"2026-01-02T03:05:00.000000Z"}}`))
	if r.Code != 200 || servertest.Field(r.Object(), "series.count") != float64(3) || r.Object()["note"] != "all good" {
		t.Fatalf("patch events.k8s.io series = %d %s", r.Code, r.Body)
	}
	if got := servertest.Field(a.JSON("GET", coreEventsPath+"/e1", "").Object(), "series.count"); got != float64(3) {
		t.Errorf("core series.count after the patch = %v, want 3", got)
	}
	rv2 := servertest.RVOf(t, r)
	for range 2 {
		if r := a.Do("PATCH", eventsV1Path+"/e1", "application/merge-patch+json", []byte(`{}`)); r.Code != 200 || servertest.RVOf(t, r) != rv2 {
			t.Errorf("empty patch = %d rv %s, want 200 and rv %s (was %s)", r.Code, servertest.RVOf(t, r), rv2, rv)
		}
	}
	// Immutable through events.k8s.io, as in Kubernetes.
	if r := a.Do("PATCH", eventsV1Path+"/e1", "application/merge-patch+json", []byte(`{"note":"changed"}`)); r.Code != http.StatusUnprocessableEntity || !strings.Contains(r.Status().Message, "message: Invalid value") {
		t.Errorf("patch of note = %d %s, want 422 (message is immutable)", r.Code, r.Body)
	}

	// Deleting through one API removes it from both.
	if r := a.JSON("DELETE", eventsV1Path+"/e2", ""); r.Code != 200 {
		t.Fatalf("delete = %d %s", r.Code, r.Body)
	}
	if r := a.JSON("GET", coreEventsPath+"/e2", ""); r.Code != http.StatusNotFound {
		t.Errorf("core GET after delete = %d", r.Code)
	}
	if r := a.JSON("GET", eventsV1Path+"/e2", ""); r.Code != http.StatusNotFound || !strings.Contains(r.Status().Message, `events.events.k8s.io "e2" not found`) {
		t.Errorf("events.k8s.io GET after delete = %d %s", r.Code, r.Body)
	}
}

// TestEventsValidation: events.k8s.io/v1 creates are validated as
// Kubernetes validates them; core/v1 keeps the legacy rules.
func TestEventsValidation(t *testing.T) {
	env := testenv.Start(t)
	a := servertest.NewAPI(t, env)
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
		r := a.JSON("POST", eventsV1Path, tc.body)
		if r.Code != http.StatusUnprocessableEntity || !strings.Contains(r.Status().Message, tc.want) {
			t.Errorf("%s: create = %d %s, want 422 with %q", tc.name, r.Code, r.Body, tc.want)
		}
	}
	// The legacy API accepts an event without eventTime and reporting fields.
	if r := a.JSON("POST", coreEventsPath, `{"metadata":{"name":"old"},"involvedObject":{"kind":"Pod","namespace":"default","name":"p"},"reason":"R"}`); r.Code != http.StatusCreated {
		t.Errorf("core create of a legacy event = %d %s", r.Code, r.Body)
	}
	// ... but not a new-style one without them.
	if r := a.JSON("POST", coreEventsPath, `{"metadata":{"name":"half"},"eventTime":"2026-01-02T03:04:05.000000Z","involvedObject":{"kind":"Pod","namespace":"default","name":"p"}}`); r.Code != http.StatusUnprocessableEntity || !strings.Contains(r.Status().Message, "reportingComponent") && !strings.Contains(r.Status().Message, "reportingController") {
		t.Errorf("core create of a new-style event without reporting fields = %d %s, want 422", r.Code, r.Body)
	}
}

// TestEventsWatchBothAPIs: a watch through events.k8s.io delivers core
// writes converted, from the watch cache and from etcd.
func TestEventsWatchBothAPIs(t *testing.T) {
	for _, cache := range []bool{true, false} {
		t.Run(fmt.Sprintf("cache=%v", cache), func(t *testing.T) {
			env := testenv.Start(t, testenv.WithServerConfig(func(c *server.Config) { c.DisableWatchCache = !cache }))
			a := servertest.NewAPI(t, env)
			rv := servertest.RVOf(t, a.JSON("POST", coreEventsPath, `{"metadata":{"name":"w0"},"involvedObject":{"kind":"Pod","namespace":"default","name":"p"},"message":"zero"}`))
			resp, err := a.C.Get(a.Host + eventsV1Path + "?watch=true&allowWatchBookmarks=true&resourceVersion=" + rv)
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
			a.JSON("POST", coreEventsPath, `{"metadata":{"name":"w1"},"involvedObject":{"kind":"Pod","namespace":"default","name":"p"},"message":"one"}`)
			typ, obj := next()
			if typ != "ADDED" || obj["apiVersion"] != "events.k8s.io/v1" || obj["note"] != "one" || servertest.Field(obj, "regarding.name") != "p" {
				t.Fatalf("event = %s %v, want ADDED w1 in the events.k8s.io form", typ, obj)
			}
			a.Do("PATCH", coreEventsPath+"/w1", "application/merge-patch+json", []byte(`{"count":5}`))
			if typ, obj = next(); typ != "MODIFIED" || obj["deprecatedCount"] != float64(5) {
				t.Fatalf("event = %s %v, want MODIFIED with deprecatedCount 5", typ, obj)
			}
			a.JSON("DELETE", eventsV1Path+"/w1", "")
			if typ, obj = next(); typ != "DELETED" || obj["note"] != "one" {
				t.Fatalf("event = %s %v, want DELETED w1", typ, obj)
			}
		})
	}
}
