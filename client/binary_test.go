package client_test

import (
	"context"
	"errors"
	"net/http"
	"reflect"
	"strconv"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/objwatch/objwatch/client"
	"github.com/objwatch/objwatch/testenv"
)

// wire records the Content-Type of every response, by the request's
// method and path.
type wire struct {
	mu    sync.Mutex
	types map[string][]string // "GET /api/v1/..." -> Content-Types in order
	// jsonOnly rewrites each request's Accept to JSON, as a server
	// without CBOR answers.
	jsonOnly bool
}

func (w *wire) wrap(rt http.RoundTripper) http.RoundTripper {
	return roundTripFunc(func(req *http.Request) (*http.Response, error) {
		if w.jsonOnly && req.Header.Get("Accept") != "" {
			req = req.Clone(req.Context())
			req.Header.Set("Accept", "application/json")
		}
		resp, err := rt.RoundTrip(req)
		if err == nil {
			w.mu.Lock()
			k := req.Method + " " + req.URL.Path
			w.types[k] = append(w.types[k], resp.Header.Get("Content-Type"))
			w.mu.Unlock()
		}
		return resp, err
	})
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// last is the Content-Type of the last response to method path.
func (w *wire) last(t *testing.T, method, path string) string {
	t.Helper()
	w.mu.Lock()
	defer w.mu.Unlock()
	ts := w.types[method+" "+path]
	if len(ts) == 0 {
		t.Fatalf("no response to %s %s recorded", method, path)
	}
	return ts[len(ts)-1]
}

// binaryEncoding is one of the binary encodings a client can prefer
// (Config.PreferCBOR, Config.PreferProtobuf), as the tests of both see
// it.
type binaryEncoding struct {
	name      string
	object    string // the Content-Type of objects, lists and errors
	watch     string // the Content-Type of watches
	configure func(*client.Config)
	is        func(client.Raw[*corev1.ConfigMap]) bool
	off       func(*client.Client[*corev1.ConfigMap]) *client.Client[*corev1.ConfigMap]
}

var (
	cborEncoding = binaryEncoding{
		name: "CBOR", object: "application/cbor", watch: "application/cbor-seq",
		configure: func(c *client.Config) { c.PreferCBOR = true },
		is:        client.Raw[*corev1.ConfigMap].IsCBOR,
		off: func(c *client.Client[*corev1.ConfigMap]) *client.Client[*corev1.ConfigMap] {
			return c.WithCBOR(false)
		},
	}
	protobufEncoding = binaryEncoding{
		name: "protobuf", object: "application/vnd.kubernetes.protobuf", watch: "application/vnd.kubernetes.protobuf;stream=watch",
		configure: func(c *client.Config) { c.PreferProtobuf = true },
		is:        client.Raw[*corev1.ConfigMap].IsProtobuf,
		off: func(c *client.Client[*corev1.ConfigMap]) *client.Client[*corev1.ConfigMap] {
			return c.WithProtobuf(false)
		},
	}
)

// startCBOR starts a server and returns a JSON REST and a REST with
// PreferCBOR whose responses w records.
func startCBOR(t *testing.T, opts ...testenv.Option) (jsonRC, cborRC *client.REST, w *wire) {
	return startBinary(t, cborEncoding, opts...)
}

// startBinary starts a server and returns a JSON REST and a REST
// preferring enc whose responses w records.
func startBinary(t *testing.T, enc binaryEncoding, opts ...testenv.Option) (jsonRC, binRC *client.REST, w *wire) {
	t.Helper()
	env, jsonRC := start(t, opts...)
	w = &wire{types: map[string][]string{}}
	cfg, err := client.FromKubeconfig(env.Kubeconfig, "")
	if err != nil {
		t.Fatal(err)
	}
	enc.configure(cfg)
	cfg.WrapTransport = w.wrap
	if binRC, err = client.New(cfg); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(binRC.CloseIdleConnections)
	return jsonRC, binRC, w
}

const cmPath = "/api/v1/namespaces/default/configmaps"

func cborTestCM(i int) *corev1.ConfigMap {
	cm := newCM("default", "cm-"+strconv.Itoa(i), map[string]string{"k": "v" + strconv.Itoa(i), "empty": ""})
	cm.Labels = map[string]string{"app": "cbor", "i": strconv.Itoa(i)}
	cm.Annotations = map[string]string{"note": "ünïcode ✓"}
	cm.BinaryData = map[string][]byte{"bin": {0, 1, 2, 0xff, byte(i)}}
	return cm
}

// TestCBORTyped and TestProtobufTyped read ConfigMaps over CBOR and
// protobuf (get, list, list pages, ListRaw, errors) and check the wire was
// in that encoding and the objects equal what the JSON path decodes.
func TestCBORTyped(t *testing.T)     { testBinaryTyped(t, cborEncoding) }
func TestProtobufTyped(t *testing.T) { testBinaryTyped(t, protobufEncoding) }

func testBinaryTyped(t *testing.T, enc binaryEncoding) {
	jrc, crc, w := startBinary(t, enc)
	ctx := ctxFor(t)
	jc := client.NewClient[*corev1.ConfigMap](jrc, configMaps)
	cc := client.NewClient[*corev1.ConfigMap](crc, configMaps)
	for i := range 5 {
		if _, err := jc.Create(ctx, cborTestCM(i), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}

	want, err := jc.Get(ctx, "default", "cm-3", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	got, err := cc.Get(ctx, "default", "cm-3", metav1.GetOptions{})
	if err != nil {
		t.Fatalf("binary Get: %v", err)
	}
	if ct := w.last(t, "GET", cmPath+"/cm-3"); ct != enc.object {
		t.Errorf("Get answered %q, want %s", ct, enc.object)
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("binary Get =\n%+v\nJSON Get =\n%+v", got, want)
	}
	if string(got.BinaryData["bin"]) != "\x00\x01\x02\xff\x03" || len(got.ManagedFields) == 0 {
		t.Errorf("binary Get binaryData = %q, managedFields %d; want the bytes written and managedFields", got.BinaryData["bin"], len(got.ManagedFields))
	}

	wantList, err := jc.List(ctx, "default", metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	gotList, err := cc.List(ctx, "default", metav1.ListOptions{})
	if err != nil {
		t.Fatalf("binary List: %v", err)
	}
	if ct := w.last(t, "GET", cmPath); ct != enc.object {
		t.Errorf("List answered %q, want %s", ct, enc.object)
	}
	if len(gotList.Items) != 5 || gotList.ResourceVersion == "" || !reflect.DeepEqual(gotList, wantList) {
		t.Errorf("binary List = %d items rv %q, JSON List = %d items rv %q; want 5 equal items", len(gotList.Items), gotList.ResourceVersion, len(wantList.Items), wantList.ResourceVersion)
	}

	// Pages: the continue token and remaining count come through.
	var names []string
	opts := metav1.ListOptions{Limit: 2}
	for pages := 0; ; pages++ {
		if pages > 5 {
			t.Fatal("more than 5 pages of 2 for 5 objects")
		}
		page, err := cc.List(ctx, "default", opts)
		if err != nil {
			t.Fatalf("binary List page: %v", err)
		}
		for _, cm := range page.Items {
			names = append(names, cm.Name)
		}
		if page.Continue == "" {
			break
		}
		if page.RemainingItemCount == nil || *page.RemainingItemCount != int64(5-len(names)) {
			t.Errorf("page remainingItemCount = %v, want %d", page.RemainingItemCount, 5-len(names))
		}
		opts.Continue = page.Continue
	}
	if want := []string{"cm-0", "cm-1", "cm-2", "cm-3", "cm-4"}; !reflect.DeepEqual(names, want) {
		t.Errorf("paged binary list names = %v, want %v", names, want)
	}

	// ListRaw: CBOR items whose identity reads without decoding the rest.
	i := 0
	_, err = cc.ListRaw(ctx, "default", metav1.ListOptions{}, func(r client.Raw[*corev1.ConfigMap]) error {
		if !enc.is(r) {
			t.Errorf("ListRaw item %d is not in the binary encoding", i)
		}
		m, err := r.Meta()
		if err != nil {
			return err
		}
		pm, err := r.PeekMeta()
		if err != nil {
			return err
		}
		w := wantList.Items[i]
		if m != (client.Meta{Namespace: "default", Name: w.Name, UID: string(w.UID), ResourceVersion: w.ResourceVersion}) ||
			string(pm.Name) != w.Name || string(pm.ResourceVersion) != w.ResourceVersion || string(pm.UID) != string(w.UID) {
			t.Errorf("ListRaw item %d Meta = %+v, PeekMeta name %s; want %s/%s", i, m, pm.Name, w.Name, w.ResourceVersion)
		}
		i++
		return nil
	})
	if err != nil || i != 5 {
		t.Errorf("binary ListRaw: %d items, %v", i, err)
	}

	// Errors in CBOR are the same Go errors as in JSON.
	_, jerr := jc.Get(ctx, "default", "missing", metav1.GetOptions{})
	_, cerr := cc.Get(ctx, "default", "missing", metav1.GetOptions{})
	if ct := w.last(t, "GET", cmPath+"/missing"); ct != enc.object {
		t.Errorf("404 answered %q, want %s", ct, enc.object)
	}
	var jse, cse *client.StatusError
	if !errors.As(jerr, &jse) || !errors.As(cerr, &cse) || !errors.Is(cerr, client.ErrNotFound) {
		t.Fatalf("Get(missing): JSON %v, binary %#v; want StatusErrors matching ErrNotFound", jerr, cerr)
	}
	if !reflect.DeepEqual(cse.ErrStatus, jse.ErrStatus) {
		t.Errorf("binary Status = %+v\nJSON Status = %+v", cse.ErrStatus, jse.ErrStatus)
	}
	_, err = cc.List(ctx, "default", metav1.ListOptions{LabelSelector: "a b c"})
	if !errors.Is(err, client.ErrBadRequest) {
		t.Errorf("List(bad selector) in the binary encoding = %v, want ErrBadRequest", err)
	}

	// WithoutManagedFields keeps asking for CBOR, without them.
	got, err = cc.WithoutManagedFields().Get(ctx, "default", "cm-3", metav1.GetOptions{})
	if err != nil || len(got.ManagedFields) != 0 || got.Data["k"] != "v3" {
		t.Errorf("binary Get without managedFields = %+v, %v", got, err)
	}
	if ct := w.last(t, "GET", cmPath+"/cm-3"); ct != enc.object {
		t.Errorf("Get without managedFields answered %q, want %s", ct, enc.object)
	}

	// WithCBOR(false) and writes stay JSON.
	if _, err := enc.off(cc).Get(ctx, "default", "cm-3", metav1.GetOptions{}); err != nil {
		t.Fatal(err)
	}
	if ct := w.last(t, "GET", cmPath+"/cm-3"); ct != "application/json" {
		t.Errorf("turned off Get answered %q, want application/json", ct)
	}
	got.Data["k"] = "updated"
	if _, err := cc.Update(ctx, got, metav1.UpdateOptions{}); err != nil {
		t.Fatalf("Update over the binary client: %v", err)
	}
	if ct := w.last(t, "PUT", cmPath+"/cm-3"); ct != "application/json" {
		t.Errorf("Update answered %q, want application/json", ct)
	}
}

// TestCBORServerWithoutCBOR and TestProtobufServerWithoutProtobuf check
// that a client preferring CBOR or protobuf works
// with a server that answers JSON (here the Accept header is rewritten on
// the way, as if the server did not offer the encoding).
func TestCBORServerWithoutCBOR(t *testing.T)         { testBinaryServerWithoutIt(t, cborEncoding) }
func TestProtobufServerWithoutProtobuf(t *testing.T) { testBinaryServerWithoutIt(t, protobufEncoding) }

func testBinaryServerWithoutIt(t *testing.T, enc binaryEncoding) {
	jrc, crc, w := startBinary(t, enc)
	w.jsonOnly = true
	ctx := ctxFor(t)
	jc := client.NewClient[*corev1.ConfigMap](jrc, configMaps)
	cc := client.NewClient[*corev1.ConfigMap](crc, configMaps)
	created, err := jc.Create(ctx, cborTestCM(1), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	got, err := cc.Get(ctx, "default", "cm-1", metav1.GetOptions{})
	if err != nil || !reflect.DeepEqual(got, created) {
		t.Errorf("Get = %v, %v; want %v", got, err, created)
	}
	if ct := w.last(t, "GET", cmPath+"/cm-1"); ct != "application/json" {
		t.Errorf("Get answered %q, want application/json", ct)
	}
	l, err := cc.List(ctx, "default", metav1.ListOptions{})
	if err != nil || len(l.Items) != 1 {
		t.Errorf("List = %v, %v", l, err)
	}
	wt, err := cc.Watch(ctx, "default", metav1.ListOptions{ResourceVersion: l.ResourceVersion})
	if err != nil {
		t.Fatal(err)
	}
	defer wt.Stop()
	if err := jc.Delete(ctx, "default", "cm-1", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	ev, err := wt.Next()
	if err != nil || ev.Type != client.Deleted || ev.Object.Name != "cm-1" {
		t.Errorf("watch Next = %v %v, %v; want DELETED cm-1", ev.Type, ev.Object, err)
	}
	if ct := w.last(t, "GET", cmPath); ct != "application/json" {
		t.Errorf("watch answered %q, want application/json", ct)
	}
	if _, err := cc.Get(ctx, "default", "cm-1", metav1.GetOptions{}); !errors.Is(err, client.ErrNotFound) {
		t.Errorf("Get(deleted) = %v, want ErrNotFound", err)
	}
}

// TestCBORWatch and TestProtobufWatch watch over CBOR or protobuf and
// over JSON from the same resourceVersion and check both see the same
// events, the wire being the encoding's stream; then a watch from a
// compacted resourceVersion ends with ErrGone from an ERROR event in the
// encoding.
func TestCBORWatch(t *testing.T)     { testBinaryWatch(t, cborEncoding) }
func TestProtobufWatch(t *testing.T) { testBinaryWatch(t, protobufEncoding) }

func testBinaryWatch(t *testing.T, enc binaryEncoding) {
	jrc, crc, w := startBinary(t, enc, testenv.WithHistory(100*time.Millisecond), testenv.WithBookmarkInterval(200*time.Millisecond))
	ctx := ctxFor(t)
	jc := client.NewClient[*corev1.ConfigMap](jrc, configMaps)
	cc := client.NewClient[*corev1.ConfigMap](crc, configMaps)
	l, err := jc.List(ctx, "default", metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	opts := metav1.ListOptions{ResourceVersion: l.ResourceVersion}
	jw, err := jc.Watch(ctx, "default", opts)
	if err != nil {
		t.Fatal(err)
	}
	defer jw.Stop()
	cw, err := cc.Watch(ctx, "default", opts)
	if err != nil {
		t.Fatal(err)
	}
	defer cw.Stop()
	if ct := w.last(t, "GET", cmPath); ct != enc.watch {
		t.Errorf("watch answered %q, want %s", ct, enc.watch)
	}
	cm, err := jc.Create(ctx, cborTestCM(7), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cm.Data["k"] = "changed"
	if _, err := jc.Update(ctx, cm, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := jc.Delete(ctx, "default", cm.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	for i, typ := range []client.EventType{client.Added, client.Modified, client.Deleted} {
		je, err := jw.Next()
		if err != nil {
			t.Fatalf("JSON event %d: %v", i, err)
		}
		typR, raw, err := cw.NextRaw()
		if err != nil {
			t.Fatalf("binary event %d: %v", i, err)
		}
		if !enc.is(raw) {
			t.Errorf("binary event %d's Raw is not in the binary encoding", i)
		}
		obj, err := raw.Decode()
		if err != nil {
			t.Fatalf("binary event %d decode: %v", i, err)
		}
		if je.Type != typ || typR != typ || !reflect.DeepEqual(obj, je.Object) {
			t.Errorf("event %d: binary %s %+v, JSON %s %+v; want equal %s", i, typR, obj, je.Type, je.Object, typ)
		}
	}

	// A bookmark comes through as one.
	bw, err := cc.Watch(ctx, "default", metav1.ListOptions{ResourceVersion: l.ResourceVersion, AllowWatchBookmarks: true})
	if err != nil {
		t.Fatal(err)
	}
	defer bw.Stop()
	for {
		ev, err := bw.Next()
		if err != nil {
			t.Fatalf("bookmark watch: %v", err)
		}
		if ev.Type == client.Bookmark {
			if ev.Object.ResourceVersion == "" {
				t.Errorf("bookmark without resourceVersion: %+v", ev.Object)
			}
			break
		}
	}

	// A resourceVersion compacted away: 410 as a CBOR ERROR event (or
	// as the watch's CBOR error response).
	var gone error
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
		for i := range 5 { // history to compact
			if _, err := jc.Create(ctx, cborTestCM(100+i), metav1.CreateOptions{}); err != nil && !errors.Is(err, client.ErrAlreadyExists) {
				t.Fatal(err)
			}
			jc.Delete(ctx, "default", "cm-"+strconv.Itoa(100+i), metav1.DeleteOptions{})
		}
		ow, err := cc.Watch(ctx, "default", metav1.ListOptions{ResourceVersion: l.ResourceVersion})
		if err != nil {
			gone = err
		} else {
			for err == nil {
				_, _, err = ow.NextRaw()
			}
			ow.Stop()
			gone = err
		}
		if errors.Is(gone, client.ErrGone) {
			break
		}
	}
	var se *client.StatusError
	if !errors.Is(gone, client.ErrGone) || !errors.As(gone, &se) || se.ErrStatus.Code != http.StatusGone {
		t.Errorf("watch from a compacted resourceVersion in the binary encoding = %v, want a 410 StatusError", gone)
	}
}

// TestCBORUnstructured reads custom resources (a CRD) over CBOR as
// unstructured and typed objects, equal to what JSON gives.
func TestCBORUnstructured(t *testing.T) {
	jrc, crc, w := startCBOR(t)
	ctx := ctxFor(t)
	res := installCRD(t, jrc, gizmoCRD, schema.GroupVersionKind{Group: "test.objwatch.io", Version: "v1", Kind: "Gizmo"})
	ju := client.NewUnstructured(jrc, res)
	cu := client.NewUnstructured(crc, res)
	for i := range 3 {
		g := &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "test.objwatch.io/v1", "kind": "Gizmo",
			"metadata": map[string]any{"namespace": "default", "name": "g" + strconv.Itoa(i), "labels": map[string]any{"n": strconv.Itoa(i)}},
			"spec":     map[string]any{"size": "s" + strconv.Itoa(i)},
		}}
		if _, err := ju.Create(ctx, g, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	path := "/apis/test.objwatch.io/v1/namespaces/default/gizmos"
	want, err := ju.Get(ctx, "default", "g1", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	got, err := cu.Get(ctx, "default", "g1", metav1.GetOptions{})
	if err != nil {
		t.Fatalf("CBOR Get: %v", err)
	}
	if ct := w.last(t, "GET", path+"/g1"); ct != "application/cbor" {
		t.Errorf("Get answered %q, want application/cbor", ct)
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("CBOR Get =\n%v\nJSON Get =\n%v", got.Object, want.Object)
	}
	wl, err := ju.List(ctx, "default", metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	gl, err := cu.List(ctx, "default", metav1.ListOptions{})
	if err != nil {
		t.Fatalf("CBOR List: %v", err)
	}
	if ct := w.last(t, "GET", path); ct != "application/cbor" {
		t.Errorf("List answered %q, want application/cbor", ct)
	}
	if len(gl.Items) != 3 || !reflect.DeepEqual(gl, wl) {
		t.Errorf("CBOR List (%d items) differs from JSON List (%d items)", len(gl.Items), len(wl.Items))
	}
	// A typed custom-resource struct without generated deep copies is
	// not a runtime.Object: it reads JSON, whatever the config prefers.
	gz, err := client.NewClient[*Gizmo](crc, res).Get(ctx, "default", "g2", metav1.GetOptions{})
	if err != nil || gz.Spec.Size != "s2" {
		t.Errorf("typed Gizmo Get = %+v, %v", gz, err)
	}
	if ct := w.last(t, "GET", path+"/g2"); ct != "application/json" {
		t.Errorf("typed Gizmo Get answered %q, want application/json", ct)
	}
	// Watch.
	cw, err := cu.Watch(ctx, "default", metav1.ListOptions{ResourceVersion: wl.ResourceVersion})
	if err != nil {
		t.Fatal(err)
	}
	defer cw.Stop()
	if err := ju.Delete(ctx, "default", "g0", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	ev, err := cw.Next()
	if err != nil || ev.Type != client.Deleted || ev.Object.GetName() != "g0" || ev.Object.GetKind() != "Gizmo" {
		t.Errorf("CBOR watch Next = %v %v, %v; want DELETED Gizmo g0", ev.Type, ev.Object, err)
	}
	if ct := w.last(t, "GET", path); ct != "application/cbor-seq" {
		t.Errorf("watch answered %q, want application/cbor-seq", ct)
	}
}

// installCRD creates the CRD crdJSON and waits until gvk is served.
func installCRD(tb testing.TB, rc *client.REST, crdJSON string, gvk schema.GroupVersionKind) client.Resource {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	crds, err := rc.Resource(ctx, schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"})
	if err != nil {
		tb.Fatal(err)
	}
	crd := &unstructured.Unstructured{}
	if err := crd.UnmarshalJSON([]byte(crdJSON)); err != nil {
		tb.Fatal(err)
	}
	if _, err := client.NewUnstructured(rc, crds).Create(ctx, crd, metav1.CreateOptions{}); err != nil {
		tb.Fatalf("create CRD: %v", err)
	}
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		res, err := rc.ResourceFor(ctx, gvk)
		if err == nil {
			return res
		}
		if !errors.Is(err, client.ErrNotFound) || time.Now().After(deadline) {
			tb.Fatalf("ResourceFor(%v): %v", gvk, err)
		}
	}
}

// TestBothBinaryEncodingsPreferred: with PreferProtobuf and PreferCBOR
// both, a client of a generated type reads protobuf and an unstructured
// client (which protobuf cannot decode into) reads CBOR, as the package
// doc says; WithProtobuf(false) falls back to CBOR.
func TestBothBinaryEncodingsPreferred(t *testing.T) {
	jrc, rc, w := startBinary(t, binaryEncoding{configure: func(c *client.Config) { c.PreferProtobuf, c.PreferCBOR = true, true }})
	ctx := ctxFor(t)
	if _, err := client.NewClient[*corev1.ConfigMap](jrc, configMaps).Create(ctx, cborTestCM(1), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	typed := client.NewClient[*corev1.ConfigMap](rc, configMaps)
	for _, c := range []struct {
		what string
		get  func() error
		want string
	}{
		{"typed", func() error { _, err := typed.Get(ctx, "default", "cm-1", metav1.GetOptions{}); return err }, protobufEncoding.object},
		{"unstructured", func() error {
			_, err := client.NewUnstructured(rc, configMaps).Get(ctx, "default", "cm-1", metav1.GetOptions{})
			return err
		}, cborEncoding.object},
		{"typed WithProtobuf(false)", func() error {
			_, err := typed.WithProtobuf(false).Get(ctx, "default", "cm-1", metav1.GetOptions{})
			return err
		}, cborEncoding.object},
	} {
		if err := c.get(); err != nil {
			t.Fatalf("%s Get: %v", c.what, err)
		}
		if ct := w.last(t, "GET", cmPath+"/cm-1"); ct != c.want {
			t.Errorf("%s Get answered %q, want %s", c.what, ct, c.want)
		}
	}
}
