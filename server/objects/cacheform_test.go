package objects_test

import (
	"bytes"
	"crypto/sha256"
	"encoding/json"
	"flag"
	"fmt"
	"go/version"
	"io"
	"log/slog"
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
// that Form and Modules name from the inputs (crd.json and stored.json)
// whose SHA-256 is Inputs.
type golden struct {
	Form    int            `json:"form"`
	Modules string         `json:"modules"`
	Inputs  string         `json:"inputs"`
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
	crd, err := os.ReadFile(filepath.Join(formDir, "crd.json"))
	if err != nil {
		t.Fatal(err)
	}
	got := golden{Form: objects.CachedForm, Modules: moduleVersions(t), Inputs: fmt.Sprintf("%x", sha256.Sum256(append(crd, b...)))}
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
	sameDecoding := want.Form == got.Form && want.Modules == got.Modules && want.Inputs == got.Inputs
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
	case want.Inputs != got.Inputs:
		t.Fatalf("%s was made from other inputs (%s and crd.json changed): regenerate it with -update", goldenFile, storedFile)
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

const widgets = "/apis/form.objwatch.io/v1/namespaces/default/widgets"

// logFile is a server's log, one text line a record, in a file (each
// record is one write, and writes to a file are safe for concurrent use).
type logFile struct{ *os.File }

func newLogFile(t *testing.T) logFile {
	f, err := os.Create(filepath.Join(t.TempDir(), "server.log"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return logFile{f}
}

// with returns the lines holding every one of parts.
func (l logFile) with(t *testing.T, parts ...string) []string {
	b, err := os.ReadFile(l.Name())
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for line := range strings.Lines(string(b)) {
		match := true
		for _, p := range parts {
			match = match && strings.Contains(line, p)
		}
		if match {
			out = append(out, line)
		}
	}
	return out
}

// widgetsPrefix is where the widgets are stored, as the caches' log
// lines name it.
func widgetsPrefix(t *testing.T, env *testenv.Env) string {
	res, ok := env.Server.Registry().Get(schema.GroupVersionResource{Group: "form.objwatch.io", Version: "v1", Resource: "widgets"})
	if !ok {
		t.Fatal("widgets not served")
	}
	return res.StoragePrefix
}

// savedForm is an etcd with testdata/cachedform/crd.json's CRD and 20
// of its objects, a directory for saved states, and a server on that
// etcd without a watch cache, whose answers are etcd's.
type savedForm struct {
	ep, dir string
	ref     *servertest.API
}

func newSavedForm(t *testing.T) *savedForm {
	s := &savedForm{ep: testenv.StartEtcd(t), dir: filepath.Join(t.TempDir(), "watchcache")}
	_, s.ref = startFormServer(t, testenv.WithEtcd(s.ep), testenv.WithServerConfig(func(c *server.Config) { c.DisableWatchCache = true }))
	for i := range 20 {
		body := fmt.Sprintf(`{"apiVersion":"form.objwatch.io/v1","kind":"Widget","metadata":{"name":"w-%02d","labels":{"i":"%d"}},"spec":{"color":"c%d"}}`, i, i, i%3)
		servertest.MustCode(t, "create", s.ref.JSON("POST", widgets, body), http.StatusCreated)
	}
	return s
}

// start starts a server keeping its saved states in s.dir, its log in
// log (if not nil).
func (s *savedForm) start(t *testing.T, log io.Writer) *testenv.Env {
	t.Helper()
	opts := []testenv.Option{testenv.WithEtcd(s.ep), testenv.WithServerConfig(func(c *server.Config) { c.WatchCacheSnapshots = s.dir })}
	if log != nil {
		opts = append(opts, testenv.WithLogger(slog.New(slog.NewTextHandler(log, nil))))
	}
	return testenv.Start(t, opts...)
}

// sameAsEtcd fails unless env's list of widgets is etcd's.
func (s *savedForm) sameAsEtcd(t *testing.T, env *testenv.Env) {
	t.Helper()
	a := servertest.NewAPI(t, env)
	defer a.C.CloseIdleConnections()
	items := func(a *servertest.API) []json.RawMessage {
		r := a.JSON("GET", widgets, "")
		servertest.MustCode(t, "list", r, http.StatusOK)
		var l struct{ Items []json.RawMessage }
		if err := json.Unmarshal(r.Body, &l); err != nil {
			t.Fatal(err)
		}
		return l.Items
	}
	got, want := items(a), items(s.ref)
	if len(got) != 20 || len(got) != len(want) {
		t.Fatalf("%d widgets listed, etcd holds %d (want 20)", len(got), len(want))
	}
	for i := range want {
		if !bytes.Equal(got[i], want[i]) {
			t.Fatalf("widget %d = %s\netcd holds %s", i, got[i], want[i])
		}
	}
}

// TestSavedStateOfAnotherBinaryUsed: a state saved by another binary
// built from the same code — here a copy of this test binary, with bytes
// added (another size) and an older modification time — is loaded by a
// server of this one, which catches up from it instead of listing etcd.
func TestSavedStateOfAnotherBinaryUsed(t *testing.T) {
	s := newSavedForm(t)
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(exe)
	if err != nil {
		t.Fatal(err)
	}
	other := filepath.Join(t.TempDir(), "other-objects.test")
	if err := os.WriteFile(other, append(b, make([]byte, 4096)...), 0o755); err != nil {
		t.Fatal(err)
	}
	old := time.Now().Add(-30 * 24 * time.Hour)
	if err := os.Chtimes(other, old, old); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(other, "-test.run=^TestSavedStateHelperProcess$", "-test.v")
	cmd.Env = append(os.Environ(), "OBJWATCH_SAVED_FORM_HELPER="+s.ep+"|"+s.dir)
	out, err := cmd.CombinedOutput()
	if err != nil || !bytes.Contains(out, []byte("--- PASS: TestSavedStateHelperProcess")) {
		t.Fatalf("the other binary: %v\n%s", err, out)
	}

	log := newLogFile(t)
	env := s.start(t, log)
	prefix := "prefix=" + widgetsPrefix(t, env)
	if loaded := log.with(t, "loaded saved state", prefix+" "); len(loaded) != 2 { // the caches of v1 and v2
		t.Fatalf("the widgets' caches did not start from the other binary's saved state; its log:\n%s", strings.Join(log.with(t, prefix+" "), ""))
	}
	s.sameAsEtcd(t, env)
}

// TestSavedStateHelperProcess is the other binary of
// TestSavedStateOfAnotherBinaryUsed: a server that starts on its etcd,
// loads the widgets and saves its caches' states when it stops.
func TestSavedStateHelperProcess(t *testing.T) {
	arg := os.Getenv("OBJWATCH_SAVED_FORM_HELPER")
	if arg == "" {
		t.Skip("run by TestSavedStateOfAnotherBinaryUsed")
	}
	ep, dir, _ := strings.Cut(arg, "|")
	s := &savedForm{ep: ep, dir: dir}
	env := s.start(t, nil)
	if c := servertest.NewAPI(t, env).JSON("GET", widgets, ""); c.Code != http.StatusOK {
		t.Fatalf("list widgets = %d %s", c.Code, c.Body)
	}
	env.Stop()
	if _, err := os.Stat(filepath.Join(dir, "widgets.v1.form.objwatch.io.cache")); err != nil {
		t.Fatalf("no saved state: %v", err)
	}
}

// TestSavedStateOfAnotherDecodingNotUsed: a state saved by a binary whose
// decoding differs (another objects.CachedForm) is not used: the cache
// lists etcd, saying why, and answers as etcd does.
func TestSavedStateOfAnotherDecodingNotUsed(t *testing.T) {
	s := newSavedForm(t)
	restore := objects.SetCachedForm(objects.CachedForm + 1)
	s.start(t, nil).Stop()
	restore()
	if _, err := os.Stat(filepath.Join(s.dir, "widgets.v1.form.objwatch.io.cache")); err != nil {
		t.Fatalf("no saved state: %v", err)
	}

	log := newLogFile(t)
	env := s.start(t, log)
	prefix := "prefix=" + widgetsPrefix(t, env)
	if loaded := log.with(t, "loaded saved state", prefix+" "); len(loaded) != 0 {
		t.Fatalf("the widgets' caches started from a state saved with another decoding: %s", loaded)
	}
	want := fmt.Sprintf("fingerprint \\\"form %d ", objects.CachedForm+1)
	if listed := log.with(t, "saved state not used; listing", prefix+" ", want); len(listed) != 2 { // the caches of v1 and v2
		t.Fatalf("the widgets' caches did not say it listed etcd because of the form (%s); its log:\n%s", want, strings.Join(log.with(t, prefix+" "), ""))
	}
	s.sameAsEtcd(t, env)
}
