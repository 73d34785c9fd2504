package endpoints_test

import (
	"bytes"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer/cbor"
	"k8s.io/apimachinery/pkg/runtime/serializer/protobuf"
	"k8s.io/apimachinery/pkg/runtime/serializer/streaming"
	"k8s.io/client-go/kubernetes/scheme"

	"github.com/objwatch/objwatch/server/servertest"
	"github.com/objwatch/objwatch/testenv"
)

// wireScheme knows client-go's built-in kinds and the meta.k8s.io kinds,
// as a client decoding the server's answers does.
var wireScheme = func() *runtime.Scheme {
	s := runtime.NewScheme()
	if err := scheme.AddToScheme(s); err != nil {
		panic(err)
	}
	metav1.AddToGroupVersion(s, schema.GroupVersion{Version: "v1"})
	if err := metav1.AddMetaToScheme(s); err != nil {
		panic(err)
	}
	return s
}()

// decodeWire decodes r's body, whose Content-Type must be ct, into into
// with apimachinery's serializer for ct.
func decodeWire(t *testing.T, r servertest.Response, ct string, into runtime.Object) {
	t.Helper()
	if got := r.Header.Get("Content-Type"); got != ct {
		t.Fatalf("Content-Type %q, want %q; body %s", got, ct, servertest.Truncate(r.Body))
	}
	var err error
	switch ct {
	case protobufType:
		_, _, err = protobuf.NewSerializer(wireScheme, wireScheme).Decode(r.Body, nil, into)
	case cborType:
		_, _, err = cbor.NewSerializer(wireScheme, wireScheme).Decode(r.Body, nil, into)
	}
	if err != nil {
		t.Fatalf("decode %s as %T: %v", ct, into, err)
	}
}

func encodeWire(t *testing.T, ct string, obj runtime.Object) []byte {
	t.Helper()
	var buf bytes.Buffer
	var err error
	switch ct {
	case protobufType:
		err = protobuf.NewSerializer(wireScheme, wireScheme).Encode(obj, &buf)
	case cborType:
		err = cbor.NewSerializer(wireScheme, wireScheme).Encode(obj, &buf)
	}
	if err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// TestEncodingWire asserts on the wire what kube-apiserver answers to
// protobuf and CBOR clients: objects, lists, Status errors and delete
// answers in the negotiated encoding, Table only in JSON, a custom
// resource asked only for protobuf refused (406), CBOR bodies of both
// kinds, and bodies that do not decode refused (400, 415).
func TestEncodingWire(t *testing.T) {
	a := servertest.StartScale(t)
	cm := &corev1.ConfigMap{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "ConfigMap"}, ObjectMeta: metav1.ObjectMeta{Name: "w1"}, Data: map[string]string{"k": "v"}}

	// Create in protobuf, read back in protobuf, CBOR and JSON.
	r := a.Accept("POST", servertest.CMs, protobufType, protobufType, encodeWire(t, protobufType, cm))
	servertest.MustCode(t, "protobuf create", r, http.StatusCreated)
	got := &corev1.ConfigMap{}
	decodeWire(t, r, protobufType, got)
	if got.Name != "w1" || got.Data["k"] != "v" || got.UID == "" {
		t.Errorf("protobuf create answered %+v", got)
	}
	for _, ct := range []string{protobufType, cborType} {
		got := &corev1.ConfigMap{}
		decodeWire(t, a.Accept("GET", servertest.CMs+"/w1", ct, "", nil), ct, got)
		if got.Name != "w1" || got.Data["k"] != "v" || got.Kind != "ConfigMap" {
			t.Errorf("get in %s: %+v", ct, got)
		}
		l := &corev1.ConfigMapList{}
		decodeWire(t, a.Accept("GET", servertest.CMs, ct, "", nil), ct, l)
		if l.ResourceVersion == "" || len(l.Items) != 1 || l.Items[0].Name != "w1" {
			t.Errorf("list in %s: %+v", ct, l)
		}
		// A missing object's Status, in the client's encoding.
		st := &metav1.Status{}
		r := a.Accept("GET", servertest.CMs+"/nope", ct, "", nil)
		decodeWire(t, r, ct, st)
		if r.Code != http.StatusNotFound || st.Reason != metav1.StatusReasonNotFound || st.Code != http.StatusNotFound {
			t.Errorf("get of a missing object in %s: %d %+v", ct, r.Code, st)
		}
		// A Table is JSON only: the protobuf or CBOR clause is skipped.
		r = a.Accept("GET", servertest.CMs, ct+";as=Table;g=meta.k8s.io;v=v1,application/json;as=Table;g=meta.k8s.io;v=v1", "", nil)
		if r.Header.Get("Content-Type") != "application/json" || r.Object()["kind"] != "Table" {
			t.Errorf("Table asked first in %s: %s %s", ct, r.Header.Get("Content-Type"), servertest.Truncate(r.Body))
		}
		if r := a.Accept("GET", servertest.CMs, ct+";as=Table;g=meta.k8s.io;v=v1", "", nil); r.Code != http.StatusNotAcceptable {
			t.Errorf("Table asked only in %s: %d %s, want 406", ct, r.Code, servertest.Truncate(r.Body))
		}
	}

	// A custom resource: CBOR both ways, protobuf refused unless JSON is
	// acceptable too.
	w := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "scale.objwatch.io/v1", "kind": "Widget", "metadata": map[string]any{"name": "w1"}, "spec": map[string]any{"replicas": int64(2)}}}
	r = a.Accept("POST", servertest.Widgets, cborType, cborType, encodeWire(t, cborType, w))
	servertest.MustCode(t, "CBOR create of a widget", r, http.StatusCreated)
	gw := &unstructured.Unstructured{}
	decodeWire(t, r, cborType, gw)
	if n, _, _ := unstructured.NestedInt64(gw.Object, "spec", "replicas"); n != 2 || gw.GetUID() == "" {
		t.Errorf("CBOR create of a widget answered %v", gw.Object)
	}
	// Refused, in a protobuf Status as kube-apiserver negotiates an error.
	r = a.Accept("GET", servertest.Widgets+"/w1", protobufType, "", nil)
	st := &metav1.Status{}
	decodeWire(t, r, protobufType, st)
	if r.Code != http.StatusNotAcceptable || st.Reason != metav1.StatusReasonNotAcceptable {
		t.Errorf("widget in protobuf only: %d %+v, want 406 NotAcceptable", r.Code, st)
	}
	r = a.Accept("GET", servertest.Widgets+"/w1", protobufType+", application/json", "", nil)
	if r.Code != http.StatusOK || r.Header.Get("Content-Type") != "application/json" {
		t.Errorf("widget in protobuf or JSON: %d %s", r.Code, r.Header.Get("Content-Type"))
	}
	pm := &metav1.PartialObjectMetadata{}
	decodeWire(t, a.Accept("GET", servertest.Widgets+"/w1", protobufType+";as=PartialObjectMetadata;g=meta.k8s.io;v=v1", "", nil), protobufType, pm)
	if pm.Kind != "PartialObjectMetadata" || pm.Name != "w1" {
		t.Errorf("widget as protobuf PartialObjectMetadata: %+v", pm)
	}

	// Server-side apply with a CBOR body (what client-go preferring CBOR
	// sends), answered in CBOR.
	ap := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "v1", "kind": "ConfigMap", "metadata": map[string]any{"name": "ap"}, "data": map[string]any{"k": "applied"}}}
	r = a.Accept("PATCH", servertest.CMs+"/ap?fieldManager=m", cborType, "application/apply-patch+cbor", encodeWire(t, cborType, ap))
	servertest.MustCode(t, "CBOR apply", r, http.StatusCreated)
	got = &corev1.ConfigMap{}
	decodeWire(t, r, cborType, got)
	if got.Data["k"] != "applied" || len(got.ManagedFields) != 1 || got.ManagedFields[0].Manager != "m" {
		t.Errorf("CBOR apply answered %+v", got)
	}

	// Bodies that do not decode.
	for _, c := range []struct {
		what, ct string
		body     []byte
		code     int
	}{
		{"CBOR garbage", cborType, []byte{0xd9, 0xd9, 0xf7, 0xff, 0x00}, http.StatusBadRequest},
		{"CBOR of a string", cborType, []byte{0xd9, 0xd9, 0xf7, 0x61, 'a'}, http.StatusBadRequest},
		{"protobuf garbage", protobufType, []byte("k8s\x00\x0a\x03"), http.StatusBadRequest},
		{"unknown type", "application/x-unknown", []byte("{}"), http.StatusUnsupportedMediaType},
	} {
		r := a.Accept("POST", servertest.CMs, "", c.ct, c.body)
		if r.Code != c.code || r.Status().Code != int32(c.code) {
			t.Errorf("%s: %d %s, want %d", c.what, r.Code, r.Body, c.code)
		}
	}

	// Delete answers in the client's encoding: a Status once gone.
	st = &metav1.Status{}
	r = a.Accept("DELETE", servertest.CMs+"/w1", cborType, "", nil)
	decodeWire(t, r, cborType, st)
	if st.Status != metav1.StatusSuccess || st.Details == nil || st.Details.Name != "w1" {
		t.Errorf("delete in CBOR: %+v", st)
	}
}

// TestEncodingWatchFrames reads protobuf and CBOR watches as client-go's
// stream decoders read them: protobuf length-prefixed WatchEvents, a CBOR
// sequence of WatchEvents; bookmarks included.
func TestEncodingWatchFrames(t *testing.T) {
	env := testenv.Start(t)
	a := servertest.NewAPI(t, env)
	for _, n := range []string{"f1", "f2"} {
		servertest.MustCode(t, "create", a.JSON("POST", servertest.CMs, servertest.CM(n, "")), http.StatusCreated)
	}
	for _, c := range []struct {
		accept, ct string
		framer     runtime.Framer
		events     runtime.Decoder
	}{
		{protobufType, protobufType + ";stream=watch", protobuf.LengthDelimitedFramer, protobuf.NewRawSerializer(wireScheme, wireScheme)},
		{cborType, "application/cbor-seq", cbor.NewFramer(), cbor.NewSerializer(wireScheme, wireScheme, cbor.Transcode(false))},
	} {
		req, _ := http.NewRequest("GET", env.Config.Host+servertest.CMs+"?watch=1&timeoutSeconds=2&sendInitialEvents=true&resourceVersionMatch=NotOlderThan&allowWatchBookmarks=true", nil)
		req.Header.Set("Accept", c.accept)
		resp, err := a.C.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		if resp.Header.Get("Content-Type") != c.ct {
			t.Errorf("watch in %s: Content-Type %q, want %q", c.accept, resp.Header.Get("Content-Type"), c.ct)
		}
		embedded := protobuf.NewSerializer(wireScheme, wireScheme)
		var objs runtime.Decoder = embedded
		if c.accept == cborType {
			objs = cbor.NewSerializer(wireScheme, wireScheme)
		}
		dec := streaming.NewDecoder(c.framer.NewFrameReader(resp.Body), c.events)
		var seen []string
		deadline := time.Now().Add(10 * time.Second)
		for time.Now().Before(deadline) {
			ev := &metav1.WatchEvent{}
			if _, _, err := dec.Decode(nil, ev); err == io.EOF {
				break
			} else if err != nil {
				t.Fatalf("watch in %s: %v after %v", c.accept, err, seen)
			}
			obj, _, err := objs.Decode(ev.Object.Raw, nil, nil)
			if err != nil {
				t.Fatalf("watch in %s: %s event's object: %v", c.accept, ev.Type, err)
			}
			cm, ok := obj.(*corev1.ConfigMap)
			if !ok {
				t.Fatalf("watch in %s: %s event of %T", c.accept, ev.Type, obj)
			}
			seen = append(seen, ev.Type+" "+cm.Name)
			if ev.Type == "BOOKMARK" {
				if cm.ResourceVersion == "" || cm.Annotations["k8s.io/initial-events-end"] != "true" {
					t.Errorf("watch in %s: bookmark %+v", c.accept, cm.ObjectMeta)
				}
				break
			}
		}
		resp.Body.Close()
		if got, want := strings.Join(seen, ","), "ADDED f1,ADDED f2,BOOKMARK "; got != want {
			t.Errorf("watch in %s: %s, want %s", c.accept, got, want)
		}
	}
}
