package endpoints

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/objwatch/objwatch/server/objects"
	"github.com/objwatch/objwatch/server/registry"
	"github.com/objwatch/objwatch/storage/watchcache"
)

// cachedList is a list of the objects whose JSON is raw, as the watch
// cache serves it.
func cachedList(meta metav1.ListMeta, raw [][]byte) *objects.List {
	l := &objects.List{Meta: meta, Raw: raw, Cached: make([]*watchcache.Object, len(raw))}
	budget := watchcache.NewBudget(1 << 30) // as a cache's objects keep theirs
	for i, b := range raw {
		l.Cached[i] = &watchcache.Object{Key: strconv.Itoa(i), JSON: b}
		budget.Hold(l.Cached[i])
	}
	return l
}

// storedJSON is obj as the cache holds it: its JSON with apiVersion and
// kind.
func storedJSON(t testing.TB, apiVersion, kind string, obj any) []byte {
	b, err := json.Marshal(obj)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	m["apiVersion"], m["kind"] = apiVersion, kind
	b, err = json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func testMeta(i int) metav1.ObjectMeta {
	return metav1.ObjectMeta{
		Name: fmt.Sprintf("o-%04d", i), Namespace: "default", UID: "2fe32495-92f5-4cac-969e-612f076ceed7",
		ResourceVersion: strconv.Itoa(100 + i), CreationTimestamp: metav1.Date(2026, 12, 3, 22, 5, 47, 0, time.UTC),
		Labels: map[string]string{"app": "x", "i": strconv.Itoa(i)},
		ManagedFields: []metav1.ManagedFieldsEntry{{
			Manager: "test", Operation: metav1.ManagedFieldsOperationUpdate, APIVersion: "v1", FieldsType: "FieldsV1",
			Time:     new(metav1.Date(2026, 12, 3, 22, 5, 47, 0, time.UTC)),
			FieldsV1: &metav1.FieldsV1{Raw: []byte(`{"f:metadata":{"f:labels":{".":{},"f:app":{}}}}`)},
		}},
	}
}

// identityKinds are the kinds TestCachedBinaryListIdentical lists, each
// with an object maker.
var identityKinds = []struct {
	res  *registry.Resource
	item func(t testing.TB, i int) []byte
}{
	{&registry.Resource{Version: "v1", Plural: "configmaps", Kind: "ConfigMap", ListKind: "ConfigMapList", Namespaced: true}, func(t testing.TB, i int) []byte {
		return storedJSON(t, "v1", "ConfigMap", &corev1.ConfigMap{ObjectMeta: testMeta(i),
			Data: map[string]string{"a": strings.Repeat("x", i*7), "é": "ü"}, BinaryData: map[string][]byte{"b": {0, 255, byte(i)}}})
	}},
	{&registry.Resource{Version: "v1", Plural: "pods", Kind: "Pod", ListKind: "PodList", Namespaced: true}, func(t testing.TB, i int) []byte {
		return storedJSON(t, "v1", "Pod", &corev1.Pod{ObjectMeta: testMeta(i), Spec: corev1.PodSpec{
			Containers: []corev1.Container{{Name: "c", Image: "busybox", Ports: []corev1.ContainerPort{{ContainerPort: 80}},
				Resources: corev1.ResourceRequirements{Limits: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("250m"), corev1.ResourceMemory: resource.MustParse("64Mi")}}}},
			NodeName: "n1", Priority: new(int32(-5)),
		}, Status: corev1.PodStatus{Phase: corev1.PodRunning, PodIP: "10.0.0.1", StartTime: new(metav1.Date(2026, 12, 3, 22, 5, 48, 0, time.UTC))}})
	}},
	{&registry.Resource{Version: "v1", Plural: "services", Kind: "Service", ListKind: "ServiceList", Namespaced: true}, func(t testing.TB, i int) []byte {
		return storedJSON(t, "v1", "Service", &corev1.Service{ObjectMeta: testMeta(i), Spec: corev1.ServiceSpec{
			Ports: []corev1.ServicePort{{Port: 80, TargetPort: intstr.FromString("http")}, {Port: 443, TargetPort: intstr.FromInt32(8443)}},
		}})
	}},
	{&registry.Resource{Group: "apps", Version: "v1", Plural: "deployments", Kind: "Deployment", ListKind: "DeploymentList", Namespaced: true}, func(t testing.TB, i int) []byte {
		return storedJSON(t, "apps/v1", "Deployment", &appsv1.Deployment{ObjectMeta: testMeta(i), Spec: appsv1.DeploymentSpec{
			Replicas: new(int32(int32(i))), Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "x"}},
		}})
	}},
	{&registry.Resource{Group: "bench.objwatch.io", Version: "v1", Plural: "things", Kind: "Thing", ListKind: "ThingList", Namespaced: true, Custom: true}, func(t testing.TB, i int) []byte {
		return []byte(fmt.Sprintf(`{"apiVersion":"bench.objwatch.io/v1","kind":"Thing","metadata":{"name":"t-%d","namespace":"default","resourceVersion":"%d","labels":{"app":"x"}},`+
			`"spec":{"n":%d,"big":9007199254740993,"f":1.5,"neg":-3,"e":1e300,"s":"ü\u0000","b":true,"nil":null,"list":[1,"a",{"x":[]}],"empty":{}}}`, i, 100+i, i))
	}},
}

// TestCachedBinaryListIdentical: a protobuf or CBOR list written from
// cached item encodings (writeCachedList) is byte for byte what
// apimachinery's serializers give for the same list (wireList, encode):
// built-in kinds in both, a custom resource in CBOR; empty lists, a page
// with continue and remainingItemCount (0 and more), lists long enough for
// multi-byte lengths; the first list (which encodes and keeps the items)
// and the second (which reuses them).
func TestCachedBinaryListIdentical(t *testing.T) {
	remaining, none := int64(12345), int64(0)
	metas := []metav1.ListMeta{
		{ResourceVersion: "7"},
		{ResourceVersion: "123456", Continue: "eyJ2IjoibWV0YS5rOHMuaW8vdjEiLCJydiI6MTIzNDU2LCJzdGFydCI6Im8tMDAwMlx1MDAwMCJ9", RemainingItemCount: &remaining},
		{ResourceVersion: "9", Continue: "x", RemainingItemCount: &none},
	}
	for _, k := range identityKinds {
		for _, enc := range []encoding{encProtobuf, encCBOR} {
			if enc == encProtobuf && k.res.Custom {
				continue
			}
			for _, n := range []int{0, 1, 3, 300} {
				for mi, meta := range metas {
					name := fmt.Sprintf("%s/%s/%d/meta%d", k.res.Plural, enc.contentType(false), n, mi)
					raw := make([][]byte, n)
					for i := range raw {
						raw[i] = k.item(t, i)
					}
					o := output{enc: enc}
					want := httptest.NewRecorder()
					v, err := o.wireList(k.res, &objects.List{Meta: meta, Raw: raw})
					if err != nil {
						t.Fatalf("%s: wireList: %v", name, err)
					}
					if err := enc.encode(want, http.StatusOK, v); err != nil {
						t.Fatalf("%s: encode: %v", name, err)
					}
					l := cachedList(meta, raw)
					for round := range 2 {
						got := httptest.NewRecorder()
						done, err := writeCachedList(got, k.res, l, o)
						if !done || err != nil {
							t.Fatalf("%s: writeCachedList = %v, %v", name, done, err)
						}
						if !bytes.Equal(got.Body.Bytes(), want.Body.Bytes()) {
							t.Fatalf("%s round %d: %d bytes differ from apimachinery's %d\n got %q\nwant %q", name, round, got.Body.Len(), want.Body.Len(), head(got.Body.Bytes()), head(want.Body.Bytes()))
						}
						if cl := got.Header().Get("Content-Length"); cl != strconv.Itoa(got.Body.Len()) {
							t.Fatalf("%s: Content-Length %s for %d bytes", name, cl, got.Body.Len())
						}
						if ct, wct := got.Header().Get("Content-Type"), want.Header().Get("Content-Type"); ct != wct {
							t.Fatalf("%s: Content-Type %q, want %q", name, ct, wct)
						}
					}
					for i, c := range l.Cached {
						if c.EncodedSize() == 0 {
							t.Fatalf("%s: item %d's encoding not kept", name, i)
						}
					}
				}
			}
		}
	}
}

// head is the start of b, for a failure message.
func head(b []byte) []byte { return b[:min(len(b), 200)] }

// TestCachedBinaryListReuses: a second list reuses each item's kept
// encoding (the encoder is not called again); a list of another encoding
// of the same objects makes its own; lists the cached path does not serve
// (JSON, managedFields dropped, as=, not from the cache, protobuf of a
// custom resource) are left to the caller, with nothing written.
func TestCachedBinaryListReuses(t *testing.T) {
	k := identityKinds[0]
	raw := [][]byte{k.item(t, 1), k.item(t, 2)}
	l := cachedList(metav1.ListMeta{ResourceVersion: "5"}, raw)
	rec := httptest.NewRecorder()
	if done, err := writeCachedList(rec, k.res, l, output{enc: encProtobuf}); !done || err != nil {
		t.Fatalf("first list: %v %v", done, err)
	}
	pb := l.Cached[0].EncodedSize()
	items, ok, err := l.Encoded(protobufItemKey, func([]byte) ([]byte, error) {
		t.Fatal("encoded again")
		return nil, nil
	})
	if !ok || err != nil || len(items) != 2 || len(items[0]) != pb {
		t.Fatalf("kept items = %d, %v, %v", len(items), ok, err)
	}
	if done, err := writeCachedList(httptest.NewRecorder(), k.res, l, output{enc: encCBOR}); !done || err != nil {
		t.Fatalf("cbor list: %v %v", done, err)
	}
	if n := l.Cached[0].EncodedSize(); n <= pb {
		t.Fatalf("CBOR encoding not kept beside protobuf's: %d bytes, protobuf's %d", n, pb)
	}
	custom := identityKinds[len(identityKinds)-1].res
	for name, c := range map[string]struct {
		res *registry.Resource
		l   *objects.List
		o   output
	}{
		"json":            {k.res, l, output{enc: encJSON}},
		"drop":            {k.res, l, output{enc: encProtobuf, drop: true}},
		"as":              {k.res, l, output{enc: encProtobuf, as: asPartial}},
		"from etcd":       {k.res, &objects.List{Raw: raw}, output{enc: encCBOR}},
		"custom protobuf": {custom, cachedList(metav1.ListMeta{}, raw), output{enc: encProtobuf}},
	} {
		rec := httptest.NewRecorder()
		if done, err := writeCachedList(rec, c.res, c.l, c.o); done || err != nil || rec.Body.Len() != 0 || rec.Code != 200 || len(rec.Header()) != 0 {
			t.Errorf("%s: writeCachedList = %v, %v, wrote %d bytes", name, done, err, rec.Body.Len())
		}
	}
	// An item that does not decode into its Go type is an error.
	bad := cachedList(metav1.ListMeta{}, [][]byte{[]byte(`{"data":5}`)})
	if done, err := writeCachedList(httptest.NewRecorder(), k.res, bad, output{enc: encProtobuf}); !done || err == nil {
		t.Errorf("undecodable item: %v, %v", done, err)
	}
}

// FuzzCachedBinaryList: for any list metadata, item count and item
// content (a ConfigMap's data, a custom resource's whole JSON), a list
// written from cached item encodings is apimachinery's encoding of the
// same list, or both fail.
func FuzzCachedBinaryList(f *testing.F) {
	f.Add("7", "", int64(0), false, uint16(0), "v", []byte(`{"apiVersion":"bench.objwatch.io/v1","kind":"Thing","metadata":{"name":"a"},"spec":{"n":1.5e300,"s":"\u00e9"}}`))
	f.Add("123456", "eyJ2IjoibWV0YS5rOHMuaW8vdjEifQ", int64(99), true, uint16(130), "\x00\xff", []byte(`{"a":[1,-2,{"b":null}],"c":true,"d":9007199254740993}`))
	cms, crs := identityKinds[0].res, identityKinds[len(identityKinds)-1].res
	f.Fuzz(func(t *testing.T, rv, cont string, remaining int64, hasRemaining bool, n uint16, data string, custom []byte) {
		meta := metav1.ListMeta{ResourceVersion: rv, Continue: cont}
		if hasRemaining {
			meta.RemainingItemCount = &remaining
		}
		cm, err := json.Marshal(map[string]any{"apiVersion": "v1", "kind": "ConfigMap", "metadata": map[string]any{"name": "x", "resourceVersion": rv}, "data": map[string]string{"k": data}})
		if err != nil {
			t.Skip()
		}
		for _, c := range []struct {
			res  *registry.Resource
			item []byte
			enc  encoding
		}{{cms, cm, encProtobuf}, {cms, cm, encCBOR}, {crs, custom, encCBOR}} {
			raw := make([][]byte, int(n%300))
			for i := range raw {
				raw[i] = c.item
			}
			o := output{enc: c.enc}
			want := httptest.NewRecorder()
			v, werr := o.wireList(c.res, &objects.List{Meta: meta, Raw: raw})
			if werr == nil {
				werr = c.enc.encode(want, http.StatusOK, v)
			}
			got := httptest.NewRecorder()
			done, gerr := writeCachedList(got, c.res, cachedList(meta, raw), o)
			if !done {
				t.Fatalf("%s %s: not written from the cache", c.res.Plural, c.enc.contentType(false))
			}
			if (werr != nil) != (gerr != nil) {
				t.Fatalf("%s %s: apimachinery's error %v, the cached path's %v", c.res.Plural, c.enc.contentType(false), werr, gerr)
			}
			if werr == nil && !bytes.Equal(got.Body.Bytes(), want.Body.Bytes()) {
				t.Fatalf("%s %s: %d bytes differ from apimachinery's %d", c.res.Plural, c.enc.contentType(false), got.Body.Len(), want.Body.Len())
			}
		}
	})
}
