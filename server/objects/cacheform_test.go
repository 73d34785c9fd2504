package objects_test

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"go/version"
	"maps"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/objwatch/objwatch/server"
	"github.com/objwatch/objwatch/server/objects"
	"github.com/objwatch/objwatch/server/registry"
	"github.com/objwatch/objwatch/server/servertest"
	"github.com/objwatch/objwatch/storage"
	"github.com/objwatch/objwatch/testenv"
)

var (
	update      = flag.Bool("update", false, "rewrite testdata/cachedform/golden.json (refused when the cached form changed and objects.CachedForm did not)")
	regenStored = flag.Bool("regen-stored", false, "rewrite testdata/cachedform/stored.json from a test server (then regenerate the golden with -update)")
)

const (
	formDir    = "testdata/cachedform"
	storedFile = formDir + "/stored.json"
	goldenFile = formDir + "/golden.json"
)

// storedValue is a value as objwatch stores it in etcd.
type storedValue struct {
	Key   string `json:"key"`
	Rev   int64  `json:"rev"`
	Value string `json:"value"`
}

// cachedObject is a watchcache.Object as the golden file holds it, with
// the resource (group/version/resource) it was decoded as.
type cachedObject struct {
	Resource  string            `json:"resource"`
	Key       string            `json:"key"`
	Namespace string            `json:"namespace"`
	Name      string            `json:"name"`
	Labels    map[string]string `json:"labels"`
	Fields    map[string]string `json:"fields"`
	Rev       int64             `json:"rev"`
	JSON      string            `json:"json"`
}

// golden is the cached form of the stored values, made by the decoding
// that Form and Modules name.
type golden struct {
	Form    int            `json:"form"`
	Modules string         `json:"modules"`
	Objects []cachedObject `json:"objects"`
}

// startFormServer starts a server with testdata/cachedform/crd.json's CRD
// served.
func startFormServer(t *testing.T, opts ...testenv.Option) (*testenv.Env, *servertest.API) {
	t.Helper()
	env := testenv.Start(t, opts...)
	a := servertest.NewAPI(t, env)
	t.Cleanup(a.C.CloseIdleConnections)
	crd, err := os.ReadFile(filepath.Join(formDir, "crd.json"))
	if err != nil {
		t.Fatal(err)
	}
	servertest.MustCode(t, "create CRD", a.JSON("POST", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions", string(crd)), http.StatusCreated)
	servertest.EventuallyWithin(t, 10*time.Second, func() bool {
		return a.JSON("GET", "/apis/form.objwatch.io/v2/widgets", "").Code == http.StatusOK
	})
	return env, a
}

// TestCachedFormGolden: the watch cache's decoding of a fixed set of
// stored values (testdata/cachedform/stored.json: built-in kinds, with
// field labels, defaults made at write, a kind served from another's
// storage and one served in two versions, a value not in objwatch's own
// key order, and a custom resource in its two versions, one of them
// stored before its schema's default) gives the objects of the golden
// file made for objects.CachedForm. A saved state is used by any binary
// with the same CachedForm and module versions, so a decoding that
// changes what it makes without CachedForm being bumped would have new
// binaries serve old forms: this test fails until it is bumped.
func TestCachedFormGolden(t *testing.T) {
	if *regenStored {
		writeStored(t)
	}
	b, err := os.ReadFile(storedFile)
	if err != nil {
		t.Fatal(err)
	}
	var stored []storedValue
	if err := json.Unmarshal(b, &stored); err != nil {
		t.Fatalf("%s: %v", storedFile, err)
	}
	// The server only serves the resources (its registry); its own caches
	// are off, so that what decodes the values is this test alone.
	env, _ := startFormServer(t, testenv.WithServerConfig(func(c *server.Config) { c.DisableWatchCache = true }))
	got := golden{Form: objects.CachedForm, Modules: moduleVersions(t)}
	for _, sv := range stored {
		kv := storage.KeyValue{Key: sv.Key, Value: []byte(sv.Value), CreateRevision: sv.Rev, ModRevision: sv.Rev}
		n := 0
		for _, res := range env.Server.Registry().Resources() {
			if res.Review || !strings.HasPrefix(sv.Key, res.StoragePrefix) {
				continue
			}
			o, err := objects.DecodeForCache(res, kv)
			if err != nil {
				t.Fatalf("decode %s as %s: %v", sv.Key, res.GVR(), err)
			}
			got.Objects = append(got.Objects, cachedObject{Resource: resourceName(res), Key: o.Key, Namespace: o.Namespace,
				Name: o.Name, Labels: o.Labels, Fields: o.Fields, Rev: o.Rev, JSON: string(o.JSON)})
			n++
		}
		if n == 0 {
			t.Fatalf("no served resource stores %s", sv.Key)
		}
	}
	slices.SortFunc(got.Objects, func(a, b cachedObject) int { return strings.Compare(a.Resource+" "+a.Key, b.Resource+" "+b.Key) })

	var want golden
	if b, err := os.ReadFile(goldenFile); err == nil {
		if err := json.Unmarshal(b, &want); err != nil {
			t.Fatalf("%s: %v", goldenFile, err)
		}
	} else if !*update {
		t.Fatalf("%v: make it with -update", err)
	}
	diff := objectsDiff(want.Objects, got.Objects)
	sameDecoding := want.Form == got.Form && want.Modules == got.Modules
	if *update {
		if sameDecoding && diff != "" {
			t.Fatalf("the cached form changed and objects.CachedForm (%d) did not: bump it, then regenerate with -update\n%s", got.Form, diff)
		}
		b, err := json.MarshalIndent(got, "", "  ")
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(goldenFile, append(b, '\n'), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	switch {
	case want.Form != got.Form:
		t.Fatalf("objects.CachedForm is %d, %s was made for form %d: regenerate it with -update", got.Form, goldenFile, want.Form)
	case diff != "" && want.Modules != got.Modules:
		t.Fatalf("the cached form changed with the modules of the decoding (%s was made with %s, this build has %s), which the saved states' fingerprint names: regenerate it with -update (no bump of objects.CachedForm needed)\n%s",
			goldenFile, want.Modules, got.Modules, diff)
	case diff != "":
		t.Fatalf("the cached form changed: bump objects.CachedForm (now %d) and regenerate %s with -update\n%s", got.Form, goldenFile, diff)
	}
	if len(got.Objects) < 15 {
		t.Fatalf("only %d objects decoded", len(got.Objects))
	}
}

// objectsDiff describes how got differs from want ("" when it does not).
func objectsDiff(want, got []cachedObject) string {
	key := func(o cachedObject) string { return o.Resource + " " + o.Key }
	wm := map[string]cachedObject{}
	for _, o := range want {
		wm[key(o)] = o
	}
	var b strings.Builder
	for _, g := range got {
		w, ok := wm[key(g)]
		delete(wm, key(g))
		switch {
		case !ok:
			fmt.Fprintf(&b, "%s: new\n", key(g))
		case w.JSON != g.JSON:
			fmt.Fprintf(&b, "%s: JSON\n  golden %s\n  now    %s\n", key(g), w.JSON, g.JSON)
		case !maps.Equal(w.Labels, g.Labels) || !maps.Equal(w.Fields, g.Fields):
			fmt.Fprintf(&b, "%s: labels %v fields %v, golden labels %v fields %v\n", key(g), g.Labels, g.Fields, w.Labels, w.Fields)
		case w.Namespace != g.Namespace || w.Name != g.Name || w.Rev != g.Rev:
			fmt.Fprintf(&b, "%s: %s/%s at %d, golden %s/%s at %d\n", key(g), g.Namespace, g.Name, g.Rev, w.Namespace, w.Name, w.Rev)
		}
	}
	for _, k := range slices.Sorted(maps.Keys(wm)) {
		fmt.Fprintf(&b, "%s: gone\n", k)
	}
	return b.String()
}

func resourceName(res *registry.Resource) string {
	g := res.Group
	if g == "" {
		g = "core"
	}
	return g + "/" + res.Version + "/" + res.Plural
}

// moduleVersions names the Go release and the versions of the modules
// whose versions the saved states' fingerprints hold, as this module
// requires them (a test binary's build information lists no modules).
func moduleVersions(t *testing.T) string {
	t.Helper()
	args := append([]string{"list", "-m", "-f", "{{.Path}}@{{.Version}}{{with .Replace}}=>{{.Path}}@{{.Version}}{{end}}"}, objects.CachedDecodeModules()...)
	out, err := exec.Command("go", args...).Output()
	if err != nil {
		t.Fatalf("go %s: %v", strings.Join(args, " "), err)
	}
	return version.Lang(runtime.Version()) + " " + strings.Join(strings.Fields(string(out)), " ")
}

// writeStored makes testdata/cachedform/stored.json: objects created
// through a test server's API, and two values stored behind it (a Widget
// stored before its schema's default, a ConfigMap in kube-apiserver's key
// order), read back from etcd.
func writeStored(t *testing.T) {
	env, a := startFormServer(t)
	for _, c := range []struct{ path, body string }{
		{"/api/v1/namespaces", `{"apiVersion":"v1","kind":"Namespace","metadata":{"name":"form-ns","labels":{"team":"a"}}}`},
		{"/api/v1/namespaces/default/configmaps", `{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"form-cm","labels":{"app":"x"},"annotations":{"note":"<&>"}},"data":{"k":"v\u2028","n":"1"}}`},
		{"/api/v1/namespaces/default/secrets", `{"apiVersion":"v1","kind":"Secret","metadata":{"name":"form-secret"},"stringData":{"password":"hunter2"}}`},
		{"/api/v1/namespaces/default/pods", `{"apiVersion":"v1","kind":"Pod","metadata":{"name":"form-pod","labels":{"app":"x"}},"spec":{"nodeName":"node-1","containers":[{"name":"c","image":"busybox","resources":{"requests":{"cpu":"100m","memory":"1Gi"}}}]}}`},
		{"/api/v1/namespaces/default/services", `{"apiVersion":"v1","kind":"Service","metadata":{"name":"form-svc"},"spec":{"type":"ClusterIP","clusterIP":"None","selector":{"app":"x"},"ports":[{"port":80}]}}`},
		{"/apis/apps/v1/namespaces/default/deployments", `{"apiVersion":"apps/v1","kind":"Deployment","metadata":{"name":"form-deploy"},"spec":{"selector":{"matchLabels":{"app":"x"}},"template":{"metadata":{"labels":{"app":"x"}},"spec":{"containers":[{"name":"c","image":"busybox"}]}}}}`},
		{"/api/v1/namespaces/default/events", `{"apiVersion":"v1","kind":"Event","metadata":{"name":"form-event"},"involvedObject":{"kind":"Pod","namespace":"default","name":"form-pod"},"reason":"Started","message":"started","type":"Normal","source":{"component":"kubelet"},"count":2,"firstTimestamp":"2026-01-02T03:04:05Z","lastTimestamp":"2026-01-02T03:04:06Z"}`},
		{"/apis/events.k8s.io/v1/namespaces/default/events", `{"apiVersion":"events.k8s.io/v1","kind":"Event","metadata":{"name":"form-event2"},"eventTime":"2026-01-02T03:04:05.123456Z","reportingController":"objwatch.io/test","reportingInstance":"i-1","action":"Bind","reason":"Scheduled","note":"scheduled","type":"Normal","regarding":{"kind":"Pod","namespace":"default","name":"form-pod"}}`},
		{"/apis/autoscaling/v2/namespaces/default/horizontalpodautoscalers", `{"apiVersion":"autoscaling/v2","kind":"HorizontalPodAutoscaler","metadata":{"name":"form-hpa"},"spec":{"scaleTargetRef":{"apiVersion":"apps/v1","kind":"Deployment","name":"form-deploy"},"minReplicas":1,"maxReplicas":4,"metrics":[{"type":"Resource","resource":{"name":"cpu","target":{"type":"Utilization","averageUtilization":70}}}]}}`},
		{"/apis/form.objwatch.io/v1/namespaces/default/widgets", `{"apiVersion":"form.objwatch.io/v1","kind":"Widget","metadata":{"name":"form-w1","labels":{"size":"big"}},"spec":{"color":"red","size":7}}`},
		{"/apis/form.objwatch.io/v2/namespaces/default/widgets", `{"apiVersion":"form.objwatch.io/v2","kind":"Widget","metadata":{"name":"form-w2"},"spec":{"color":"blue"}}`},
	} {
		servertest.MustCode(t, "create "+c.path, a.JSON("POST", c.path, c.body), http.StatusCreated)
	}
	st := servertest.RawStore(t, env)
	key := func(gvr schema.GroupVersionResource, name string) string {
		res, ok := env.Server.Registry().Get(gvr)
		if !ok {
			t.Fatalf("%s not served", gvr)
		}
		return res.Key("default", name)
	}
	for key, value := range map[string]string{
		key(schema.GroupVersionResource{Group: "form.objwatch.io", Version: "v1", Resource: "widgets"}, "form-w0"): `{"apiVersion":"form.objwatch.io/v1","kind":"Widget","metadata":{"creationTimestamp":"2026-01-02T03:04:05Z","generation":1,"name":"form-w0","namespace":"default","uid":"6f1c1f56-8d2a-4bb8-9d0e-0a3f1ad0c0de"},"spec":{"color":"green"}}`,
		key(schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}, "form-cm-raw"):                     `{"kind":"ConfigMap","apiVersion":"v1","metadata":{"name":"form-cm-raw","namespace":"default","uid":"0d6c8a37-3b0e-4c32-a2c1-5d1f0b7e9a11","creationTimestamp":"2026-01-02T03:04:05Z","labels":{"app":"y"}},"data":{"b":"2","a":"1.50"}}`,
	} {
		if _, err := st.Create(t.Context(), key, []byte(value)); err != nil {
			t.Fatalf("store %s: %v", key, err)
		}
	}
	lr, err := st.List(t.Context(), "/registry/", storage.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var out []storedValue
	for _, kv := range lr.KVs {
		if strings.HasPrefix(kv.Key[strings.LastIndexByte(kv.Key, '/')+1:], "form-") && !strings.Contains(kv.Key, "/customresourcedefinitions/") {
			out = append(out, storedValue{Key: kv.Key, Rev: kv.ModRevision, Value: string(kv.Value)})
		}
	}
	b, err := json.MarshalIndent(out, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(storedFile, append(b, '\n'), 0o644); err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(b, []byte("form-w0")) || len(out) != 13 {
		t.Fatalf("%d stored values written, want 13", len(out))
	}
}
