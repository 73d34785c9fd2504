package server_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
	"k8s.io/client-go/dynamic"
	clientfeatures "k8s.io/client-go/features"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/component-base/featuregate"
	featuregatetesting "k8s.io/component-base/featuregate/testing"

	"github.com/objwatch/objwatch/server"
	"github.com/objwatch/objwatch/server/servertest"
	"github.com/objwatch/objwatch/testenv"
)

const (
	pbType   = "application/vnd.kubernetes.protobuf"
	cborType = "application/cbor"
)

// contentTypes records the Content-Type of every list response a client
// gets, so that a test can tell a client that fell back to JSON.
type contentTypes struct {
	mu  sync.Mutex
	got map[string]int
}

func (c *contentTypes) wrap(cfg *rest.Config) {
	c.got = map[string]int{}
	cfg.WrapTransport = func(rt http.RoundTripper) http.RoundTripper {
		return roundTripperFunc(func(r *http.Request) (*http.Response, error) {
			resp, err := rt.RoundTrip(r)
			if err == nil && r.Method == http.MethodGet {
				c.mu.Lock()
				c.got[resp.Header.Get("Content-Type")]++
				c.mu.Unlock()
			}
			return resp, err
		})
	}
}

func (c *contentTypes) only(t *testing.T, want string) {
	t.Helper()
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.got) != 1 || c.got[want] == 0 {
		t.Errorf("list responses by Content-Type %v, want only %s", c.got, want)
	}
}

type roundTripperFunc func(*http.Request) (*http.Response, error)

func (f roundTripperFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// pages lists with opts page by page (limit per page) through list, and
// returns every page's items; every page but the last must be full and,
// without selectors, have a remaining count.
func pages[T any](t *testing.T, what string, limit int64, opts metav1.ListOptions, list func(metav1.ListOptions) ([]T, metav1.ListMeta, error)) []T {
	t.Helper()
	opts.Limit = limit
	var all []T
	for i := 0; ; i++ {
		items, lm, err := list(opts)
		if err != nil {
			t.Fatalf("%s: page %d: %v", what, i, err)
		}
		all = append(all, items...)
		if lm.Continue == "" {
			return all
		}
		// A list with a selector has no remaining count (as in Kubernetes).
		selected := opts.LabelSelector != "" || opts.FieldSelector != ""
		if int64(len(items)) != limit || !selected && (lm.RemainingItemCount == nil || *lm.RemainingItemCount <= 0) {
			t.Fatalf("%s: page %d of %d items, remaining %v", what, i, len(items), lm.RemainingItemCount)
		}
		opts.Continue = lm.Continue
	}
}

// TestCachedBinaryLists: client-go's protobuf and CBOR lists of
// ConfigMaps and Pods, and CBOR lists of a custom resource, served from
// the watch cache from each object's kept encoding, are the JSON lists:
// whole, page by page (limit and continue), with label and field
// selectors. Each object is encoded once per revision and encoding: a
// second list encodes nothing, a list after an update encodes the updated
// object alone and returns its new revision.
func TestCachedBinaryLists(t *testing.T) {
	featuregatetesting.SetFeatureGatesDuringTest(t, utilfeature.DefaultFeatureGate, featuregatetesting.FeatureOverrides{
		featuregate.Feature(clientfeatures.ClientsAllowCBOR): true, featuregate.Feature(clientfeatures.ClientsPreferCBOR): true,
	})
	env := testenv.Start(t)
	a := servertest.NewAPI(t, env)
	ctx := t.Context()
	if r := a.JSON("POST", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions", servertest.ScaleCRD); r.Code != http.StatusCreated {
		t.Fatalf("create CRD = %d %s", r.Code, r.Body)
	}
	servertest.EventuallyWithin(t, 10*time.Second, func() bool { return a.JSON("GET", servertest.Widgets, "").Code == http.StatusOK })

	// clientset is a typed client in encoding ct (recording its list
	// responses' Content-Types in wire, if set).
	clientset := func(ct string, wire *contentTypes) *kubernetes.Clientset {
		cfg := env.Config.RESTConfig()
		cfg.ContentType, cfg.AcceptContentTypes = ct, ct
		if wire != nil {
			wire.wrap(cfg)
		}
		cs, err := kubernetes.NewForConfig(cfg)
		if err != nil {
			t.Fatal(err)
		}
		return cs
	}
	var pbWire, cborWire, dynWire contentTypes
	js, pb, cb := clientset("application/json", nil), clientset(pbType, &pbWire), clientset(cborType, &cborWire)
	dynCfg := env.Config.RESTConfig()
	dynWire.wrap(dynCfg)
	dyn, err := dynamic.NewForConfig(dynCfg)
	if err != nil {
		t.Fatal(err)
	}

	const n = 24
	for i := range n {
		app := []string{"a", "b", "c"}[i%3]
		if _, err := js.CoreV1().ConfigMaps("default").Create(ctx, &corev1.ConfigMap{
			ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("cm-%02d", i), Labels: map[string]string{"app": app}},
			Data:       map[string]string{"k": fmt.Sprint("v", i)}, BinaryData: map[string][]byte{"b": {0, 255, byte(i)}},
		}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		if _, err := js.CoreV1().Pods("default").Create(ctx, &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("pod-%02d", i), Labels: map[string]string{"app": app}},
			Spec:       corev1.PodSpec{NodeName: fmt.Sprint("node-", i%2), Containers: []corev1.Container{{Name: "c", Image: "busybox"}}},
		}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		if r := a.JSON("POST", servertest.Widgets, fmt.Sprintf(`{"apiVersion":"scale.objwatch.io/v1","kind":"Widget","metadata":{"name":"w-%02d","labels":{"app":%q}},"spec":{"replicas":%d,"image":"x"}}`, i, app, i)); r.Code != http.StatusCreated {
			t.Fatalf("create widget = %d %s", r.Code, r.Body)
		}
	}

	cmsJSON := func(opts metav1.ListOptions) []corev1.ConfigMap {
		l, err := js.CoreV1().ConfigMaps("default").List(ctx, opts)
		if err != nil {
			t.Fatal(err)
		}
		return l.Items
	}
	cmsIn := func(c *kubernetes.Clientset) func(metav1.ListOptions) ([]corev1.ConfigMap, metav1.ListMeta, error) {
		return func(opts metav1.ListOptions) ([]corev1.ConfigMap, metav1.ListMeta, error) {
			l, err := c.CoreV1().ConfigMaps("default").List(ctx, opts)
			if err != nil {
				return nil, metav1.ListMeta{}, err
			}
			return l.Items, l.ListMeta, nil
		}
	}
	same := func(what string, got, want any) {
		t.Helper()
		if !reflect.DeepEqual(got, want) {
			t.Errorf("%s differs from the JSON list:\n got %+v\nwant %+v", what, got, want)
		}
	}
	encoded := func() int64 { return server.ListItemsEncoded(env.Server) }

	// Whole lists: each object is encoded once per encoding.
	want := cmsJSON(metav1.ListOptions{})
	if len(want) != n {
		t.Fatalf("JSON list of %d ConfigMaps, want %d", len(want), n)
	}
	binary := []struct {
		name string
		cs   *kubernetes.Clientset
	}{{"protobuf", pb}, {"cbor", cb}}
	// listAll lists every ConfigMap in each binary encoding: the lists
	// must be want, and encode wantMade items each.
	listAll := func(what string, want []corev1.ConfigMap, wantMade int64) {
		t.Helper()
		for _, c := range binary {
			before := encoded()
			got, _, err := cmsIn(c.cs)(metav1.ListOptions{})
			if err != nil {
				t.Fatal(err)
			}
			same(c.name+" ConfigMaps, "+what, got, want)
			if made := encoded() - before; made != wantMade {
				t.Errorf("%s list, %s, encoded %d items, want %d", c.name, what, made, wantMade)
			}
		}
	}
	listAll("first", want, n)
	listAll("again", want, 0)

	// An update: the next lists have the new revision, encoded anew.
	cm := want[5].DeepCopy()
	cm.Data["k"] = "updated"
	updated, err := js.CoreV1().ConfigMaps("default").Update(ctx, cm, metav1.UpdateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	want = cmsJSON(metav1.ListOptions{})
	if want[5].Data["k"] != "updated" || want[5].ResourceVersion != updated.ResourceVersion {
		t.Fatalf("JSON list after the update has %v", want[5])
	}
	listAll("after an update", want, 1)

	// Pages and selectors.
	for _, opts := range []metav1.ListOptions{{}, {LabelSelector: "app=b"}, {LabelSelector: "app!=a"}, {FieldSelector: "metadata.name=cm-07"}} {
		want := cmsJSON(opts)
		if len(want) == 0 {
			t.Fatalf("no ConfigMaps for %+v", opts)
		}
		for name, c := range map[string]*kubernetes.Clientset{"protobuf": pb, "cbor": cb} {
			got, _, err := cmsIn(c)(opts)
			if err != nil {
				t.Fatal(err)
			}
			same(fmt.Sprintf("%s ConfigMaps %+v", name, opts), got, want)
			same(fmt.Sprintf("%s ConfigMaps %+v in pages of 5", name, opts), pages(t, name, 5, opts, cmsIn(c)), want)
		}
	}

	podsIn := func(c *kubernetes.Clientset) func(metav1.ListOptions) ([]corev1.Pod, metav1.ListMeta, error) {
		return func(opts metav1.ListOptions) ([]corev1.Pod, metav1.ListMeta, error) {
			l, err := c.CoreV1().Pods("default").List(ctx, opts)
			if err != nil {
				return nil, metav1.ListMeta{}, err
			}
			return l.Items, l.ListMeta, nil
		}
	}
	for _, opts := range []metav1.ListOptions{{}, {FieldSelector: "spec.nodeName=node-1"}, {LabelSelector: "app=c", FieldSelector: "spec.nodeName=node-0"}} {
		want, _, err := podsIn(js)(opts)
		if err != nil || len(want) == 0 {
			t.Fatalf("JSON Pods %+v: %d, %v", opts, len(want), err)
		}
		for name, c := range map[string]*kubernetes.Clientset{"protobuf": pb, "cbor": cb} {
			got, _, err := podsIn(c)(opts)
			if err != nil {
				t.Fatal(err)
			}
			same(fmt.Sprintf("%s Pods %+v", name, opts), got, want)
			same(fmt.Sprintf("%s Pods %+v in pages of 4", name, opts), pages(t, name, 4, opts, podsIn(c)), want)
		}
	}

	// The custom resource, in CBOR through the dynamic client.
	widgets := dyn.Resource(schema.GroupVersionResource{Group: "scale.objwatch.io", Version: "v1", Resource: "widgets"}).Namespace("default")
	widgetsJSON := func(query string) []unstructured.Unstructured {
		r := a.JSON("GET", servertest.Widgets+query, "")
		var l unstructured.UnstructuredList
		if r.Code != http.StatusOK || json.Unmarshal(r.Body, &l) != nil {
			t.Fatalf("JSON list of widgets%s = %d %s", query, r.Code, r.Body)
		}
		return l.Items
	}
	widgetsIn := func(opts metav1.ListOptions) ([]unstructured.Unstructured, metav1.ListMeta, error) {
		l, err := widgets.List(ctx, opts)
		if err != nil {
			return nil, metav1.ListMeta{}, err
		}
		return l.Items, metav1.ListMeta{Continue: l.GetContinue(), RemainingItemCount: l.GetRemainingItemCount()}, nil
	}
	before := encoded()
	got, _, err := widgetsIn(metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	same("CBOR widgets", got, widgetsJSON(""))
	if made := encoded() - before; made != n {
		t.Errorf("first CBOR list of widgets encoded %d items, want %d", made, n)
	}
	same("CBOR widgets app=a in pages of 3", pages(t, "widgets", 3, metav1.ListOptions{LabelSelector: "app=a"}, widgetsIn), widgetsJSON("?labelSelector=app%3Da"))
	if r := a.Do("PATCH", servertest.Widgets+"/w-03", "application/merge-patch+json", []byte(`{"spec":{"replicas":99}}`)); r.Code != http.StatusOK {
		t.Fatalf("patch widget = %d %s", r.Code, r.Body)
	}
	before = encoded()
	got, _, err = widgetsIn(metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	wantW := widgetsJSON("")
	same("CBOR widgets after an update", got, wantW)
	if r, _, _ := unstructured.NestedInt64(got[3].Object, "spec", "replicas"); r != 99 {
		t.Errorf("CBOR list after the update has w-03's replicas %d", r)
	}
	if made := encoded() - before; made != 1 {
		t.Errorf("CBOR list of widgets after one update encoded %d items, want 1", made)
	}

	// Lists concurrent with updates (run with -race): every item is one
	// revision's, and the last lists are the JSON list.
	var wg sync.WaitGroup
	stop := make(chan struct{})
	wg.Go(func() {
		defer close(stop)
		for i := range 40 {
			cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("cm-%02d", i%4), Labels: map[string]string{"app": "a", "n": fmt.Sprint(i)}}, Data: map[string]string{"k": fmt.Sprint(i)}}
			if _, err := js.CoreV1().ConfigMaps("default").Update(ctx, cm, metav1.UpdateOptions{}); err != nil {
				t.Error(err)
				return
			}
		}
	})
	for _, c := range []*kubernetes.Clientset{pb, pb, cb} {
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				items, _, err := cmsIn(c)(metav1.ListOptions{})
				if err != nil {
					t.Error(err)
					return
				}
				for _, it := range items[:4] {
					if n, ok := it.Labels["n"]; ok && it.Data["k"] != n {
						t.Errorf("%s: data %v with label n=%s", it.Name, it.Data, n)
					}
				}
			}
		})
	}
	wg.Wait()
	want = cmsJSON(metav1.ListOptions{})
	for name, c := range map[string]*kubernetes.Clientset{"protobuf": pb, "cbor": cb} {
		got, _, err := cmsIn(c)(metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		same(name+" ConfigMaps after concurrent updates", got, want)
	}

	pbWire.only(t, pbType)
	cborWire.only(t, cborType)
	dynWire.only(t, cborType)
}

// TestBinaryListsWithoutKeptEncodings: with a negative
// ListEncodingsMaxSize (--watch-cache-list-encodings-max-size=0, or the
// deprecated --watch-cache-list-encodings=false) protobuf and CBOR lists
// from the watch cache still equal the JSON list, and no encoding is
// kept: every list encodes its items anew.
func TestBinaryListsWithoutKeptEncodings(t *testing.T) {
	env := testenv.Start(t, testenv.WithServerConfig(func(c *server.Config) { c.ListEncodingsMaxSize = -1 }))
	a := servertest.NewAPI(t, env)
	ctx := t.Context()
	typed := func(ct string) *kubernetes.Clientset { return typedClient(t, env, ct) }
	js := typed("application/json")
	for i := range 10 {
		if _, err := js.CoreV1().ConfigMaps("default").Create(ctx, &corev1.ConfigMap{
			ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("cm-%02d", i)}, Data: map[string]string{"k": fmt.Sprint(i)},
		}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	want, err := js.CoreV1().ConfigMaps("default").List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, ct := range []string{pbType, cborType} {
		for range 2 {
			got, err := typed(ct).CoreV1().ConfigMaps("default").List(ctx, metav1.ListOptions{ResourceVersion: want.ResourceVersion, ResourceVersionMatch: metav1.ResourceVersionMatchNotOlderThan})
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got.Items, want.Items) {
				t.Fatalf("%s list differs from the JSON list:\n got %+v\nwant %+v", ct, got.Items, want.Items)
			}
		}
	}
	if n := server.ListItemsEncoded(env.Server); n != 0 {
		t.Errorf("%d list items kept encoded, want none", n)
	}
	if n := keptEncodingBytes(a); n != 0 {
		t.Errorf("%d bytes of encodings kept, want none", n)
	}
}

// typedClient is a typed client of env's server in encoding ct, without
// client-go's rate limit.
func typedClient(t *testing.T, env *testenv.Env, ct string) *kubernetes.Clientset {
	t.Helper()
	cfg := env.Config.RESTConfig()
	cfg.ContentType, cfg.AcceptContentTypes = ct, ct
	cfg.QPS, cfg.Burst = -1, 0
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return cs
}

// keptEncodingBytes is the server's gauge of the bytes kept with its
// watch caches' objects for binary lists.
func keptEncodingBytes(a *servertest.API) int {
	return servertest.MetricValue(a, "objwatch_watch_cache_kept_encoding_bytes ")
}

// deleteAllKeepsNone deletes every ConfigMap of the default namespace
// and fails unless the server then keeps no encoding: the consistent
// list that finds none has waited for the cache to apply the deletions.
func deleteAllKeepsNone(t *testing.T, a *servertest.API, js *kubernetes.Clientset) {
	t.Helper()
	ctx := t.Context()
	if err := js.CoreV1().ConfigMaps("default").DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{}); err != nil {
		t.Fatal(err)
	}
	if l, err := js.CoreV1().ConfigMaps("default").List(ctx, metav1.ListOptions{}); err != nil || len(l.Items) != 0 {
		t.Fatalf("after deleting every ConfigMap: %d, %v", len(l.Items), err)
	}
	if kept := keptEncodingBytes(a); kept != 0 {
		t.Fatalf("after every object was deleted, %d bytes kept, want 0", kept)
	}
}

// TestBinaryListsBoundedKeptEncodings: with ListEncodingsMaxSize room for
// some of the ConfigMaps' protobuf encodings, a list keeps those that
// fit (the gauge never passes the bound) and encodes the others anew at
// every list, and every list is still the JSON list; the bytes come back
// when the objects are updated or deleted: after every object was
// deleted the gauge is 0.
func TestBinaryListsBoundedKeptEncodings(t *testing.T) {
	const n, max = 20, 10000 // about 8 of the 1.1 KB ConfigMaps
	env := testenv.Start(t, testenv.WithServerConfig(func(c *server.Config) { c.ListEncodingsMaxSize = max }))
	a := servertest.NewAPI(t, env)
	ctx := t.Context()
	typed := func(ct string) *kubernetes.Clientset { return typedClient(t, env, ct) }
	js, pb, cb := typed("application/json"), typed(pbType), typed(cborType)
	big := strings.Repeat("x", 1000)
	for i := range n {
		if _, err := js.CoreV1().ConfigMaps("default").Create(ctx, &corev1.ConfigMap{
			ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("cm-%02d", i)}, Data: map[string]string{"k": big},
		}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	counts := func() (made int64, notKept int, kept int) {
		return server.ListItemsEncoded(env.Server), servertest.MetricValue(a, "objwatch_watch_cache_encodings_not_kept_total "), keptEncodingBytes(a)
	}
	// list lists the ConfigMaps through c, checks them against the JSON
	// list and the gauge against the bound, and returns how many items it
	// encoded and how many of those it did not keep.
	list := func(what string, c *kubernetes.Clientset) (made int64, notKept int) {
		t.Helper()
		want, err := js.CoreV1().ConfigMaps("default").List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		made0, notKept0, _ := counts()
		got, err := c.CoreV1().ConfigMaps("default").List(ctx, metav1.ListOptions{ResourceVersion: want.ResourceVersion, ResourceVersionMatch: metav1.ResourceVersionMatchNotOlderThan})
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got.Items, want.Items) {
			t.Fatalf("%s: list differs from the JSON list:\n got %+v\nwant %+v", what, got.Items, want.Items)
		}
		made1, notKept1, kept := counts()
		if kept > max {
			t.Fatalf("%s: %d bytes kept, over the bound of %d", what, kept, max)
		}
		return made1 - made0, notKept1 - notKept0
	}

	made, notKept := list("first protobuf list", pb)
	kept := keptEncodingBytes(a)
	if made != n || notKept <= 0 || notKept >= n || kept <= max/2 {
		t.Fatalf("first protobuf list: encoded %d, %d not kept, %d bytes kept; want %d encoded, some but not all kept, more than half the bound", made, notKept, kept, n)
	}
	if again, notAgain := list("second protobuf list", pb); again != int64(notKept) || notAgain != notKept || keptEncodingBytes(a) != kept {
		t.Fatalf("second protobuf list: encoded %d, %d not kept, %d bytes kept; want the %d not kept encoded again, %d bytes", again, notAgain, keptEncodingBytes(a), notKept, kept)
	}
	list("a CBOR list (the budget is shared)", cb)

	// Updates: the new revisions keep nothing until listed; the old ones'
	// bytes are back.
	for i := range n {
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("cm-%02d", i)}, Data: map[string]string{"k": big, "v": "2"}}
		if _, err := js.CoreV1().ConfigMaps("default").Update(ctx, cm, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	list("after the updates, in JSON", js)
	if kept := keptEncodingBytes(a); kept != 0 {
		t.Fatalf("after every object was updated, %d bytes kept, want 0", kept)
	}
	list("a protobuf list after the updates", pb)
	kept = keptEncodingBytes(a)
	if kept <= max/2 {
		t.Fatalf("protobuf list after the updates kept %d bytes, want more than half the bound", kept)
	}
	if err := js.CoreV1().ConfigMaps("default").Delete(ctx, "cm-00", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	list("after a deletion, in JSON", js)
	if after := keptEncodingBytes(a); after >= kept {
		t.Fatalf("after a kept object was deleted, %d bytes kept, want fewer than %d", after, kept)
	}
	deleteAllKeepsNone(t, a, js)
}

// TestBinaryListsKeptEncodingsRace: protobuf and CBOR lists concurrent
// with updates of the same objects, with a bound that keeps some of
// their encodings, then every object deleted: the gauge is exactly 0. Run
// with -race.
func TestBinaryListsKeptEncodingsRace(t *testing.T) {
	const n = 8
	env := testenv.Start(t, testenv.WithServerConfig(func(c *server.Config) { c.ListEncodingsMaxSize = 1000 }))
	a := servertest.NewAPI(t, env)
	ctx := t.Context()
	typed := func(ct string) *kubernetes.Clientset { return typedClient(t, env, ct) }
	js := typed("application/json")
	for i := range n {
		if _, err := js.CoreV1().ConfigMaps("default").Create(ctx, &corev1.ConfigMap{
			ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("cm-%d", i)}, Data: map[string]string{"k": "0"},
		}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for _, ct := range []string{pbType, pbType, cborType} {
		c := typed(ct)
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				l, err := c.CoreV1().ConfigMaps("default").List(ctx, metav1.ListOptions{})
				if err != nil {
					t.Error(err)
					return
				}
				for _, it := range l.Items {
					if n, ok := it.Labels["n"]; ok && it.Data["k"] != n {
						t.Errorf("%s: data %v with label n=%s", it.Name, it.Data, n)
					}
				}
			}
		})
	}
	for i := range 60 {
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("cm-%d", i%n), Labels: map[string]string{"n": fmt.Sprint(i)}}, Data: map[string]string{"k": fmt.Sprint(i)}}
		if _, err := js.CoreV1().ConfigMaps("default").Update(ctx, cm, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	close(stop)
	wg.Wait()
	if kept := keptEncodingBytes(a); kept <= 0 || kept > 1000 {
		t.Errorf("after the lists, %d bytes kept, want some, at most 1000", kept)
	}
	deleteAllKeepsNone(t, a, js)
}
