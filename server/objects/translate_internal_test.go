package objects

import (
	"net/http"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/objwatch/objwatch/server/registry"
	"github.com/objwatch/objwatch/storage"
)

// An etcd event without its previous value (etcd compacted at the event's
// own revision) is a MODIFIED when the key existed before (its create
// revision is older), not an ADDED; with a selector, whether the object
// entered it is unknown and the watch ends with 410 (the client relists).
func TestTranslateWithoutPreviousValue(t *testing.T) {
	res, ok := registry.New().Get(schema.GroupVersionResource{Version: "v1", Resource: "configmaps"})
	if !ok {
		t.Fatal("configmaps not served")
	}
	value := []byte(`{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"a","namespace":"ns","labels":{"app":"x"}},"data":{"k":"v"}}`)
	event := func(created, rev int64) storage.Event {
		return storage.Event{Type: storage.Put, Revision: rev, KV: storage.KeyValue{Key: res.Key("ns", "a"), Value: value, CreateRevision: created, ModRevision: rev}}
	}
	for _, c := range []struct {
		name    string
		ev      storage.Event
		sel     selector
		want    string
		wantErr int
	}{
		{"create", event(5, 5), matchAll, "ADDED", 0},
		{"change", event(5, 9), matchAll, "MODIFIED", 0},
		{"create, selected", event(5, 5), selector{labels: labels.SelectorFromSet(labels.Set{"app": "x"}), fields: matchAll.fields}, "ADDED", 0},
		{"change, selected", event(5, 9), selector{labels: labels.SelectorFromSet(labels.Set{"app": "x"}), fields: matchAll.fields}, "", http.StatusGone},
		{"change, not selected", event(5, 9), selector{labels: labels.SelectorFromSet(labels.Set{"app": "y"}), fields: matchAll.fields}, "", 0},
		{"deletion without its last value", storage.Event{Type: storage.Delete, Revision: 11, KV: storage.KeyValue{Key: res.Key("ns", "a"), ModRevision: 11}}, matchAll, "", http.StatusGone},
		{"deletion", storage.Event{Type: storage.Delete, Revision: 11, KV: storage.KeyValue{Key: res.Key("ns", "a"), Value: value, CreateRevision: 5, ModRevision: 11}}, matchAll, "DELETED", 0},
	} {
		typ, _, _, err := translate(res, c.sel, c.ev, false)
		code := 0
		if st, ok := err.(apierrors.APIStatus); ok {
			code = int(st.Status().Code)
		} else if err != nil {
			code = -1
		}
		if typ != c.want || code != c.wantErr {
			t.Errorf("%s: %q, %v; want %q, code %d", c.name, typ, err, c.want, c.wantErr)
		}
	}
}
