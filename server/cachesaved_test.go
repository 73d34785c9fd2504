package server_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/objwatch/objwatch/server"
	"github.com/objwatch/objwatch/server/servertest"
	"github.com/objwatch/objwatch/testenv"
)

const savedCRD = `{"apiVersion":"apiextensions.k8s.io/v1","kind":"CustomResourceDefinition",
 "metadata":{"name":"gadgets.saved.objwatch.io"},
 "spec":{"group":"saved.objwatch.io","scope":"Namespaced",
  "names":{"plural":"gadgets","singular":"gadget","kind":"Gadget","listKind":"GadgetList"},
  "versions":[{"name":"v1","served":true,"storage":true,
   "schema":{"openAPIV3Schema":{"type":"object","properties":{
    "spec":{"type":"object","properties":{"size":{"type":"integer"}}}}}}}]}}`

var gadgetsGVR = schema.GroupVersionResource{Group: "saved.objwatch.io", Version: "v1", Resource: "gadgets"}

const gadgets = "/apis/saved.objwatch.io/v1/namespaces/default/gadgets"

func gadget(name string, size int) string {
	return fmt.Sprintf(`{"apiVersion":"saved.objwatch.io/v1","kind":"Gadget","metadata":{"name":%q,"labels":{"size":"%d"}},"spec":{"size":%d}}`, name, size, size)
}

// savedSetup is a server on its own etcd keeping its watch caches'
// states in dir, a CRD and 20 of its objects, and a reference server on
// the same etcd without a cache (its answers are etcd's).
type savedSetup struct {
	ep, dir string
	env     *testenv.Env
	ref     *servertest.API
}

func (s *savedSetup) start(t *testing.T, more ...func(*server.Config)) *testenv.Env {
	t.Helper()
	s.env = testenv.Start(t, testenv.WithEtcd(s.ep), testenv.WithServerConfig(func(c *server.Config) {
		c.WatchCacheSnapshots = s.dir
		for _, f := range more {
			f(c)
		}
	}))
	return s.env
}

func newSavedSetup(t *testing.T) *savedSetup {
	s := &savedSetup{ep: testenv.StartEtcd(t), dir: filepath.Join(t.TempDir(), "watchcache")}
	ref := testenv.Start(t, testenv.WithEtcd(s.ep), testenv.WithServerConfig(func(c *server.Config) { c.DisableWatchCache = true }))
	s.ref = servertest.NewAPI(t, ref)
	t.Cleanup(s.ref.C.CloseIdleConnections)
	servertest.MustCode(t, "create CRD", s.ref.JSON("POST", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions", savedCRD), http.StatusCreated)
	servertest.EventuallyWithin(t, 10*time.Second, func() bool { return s.ref.JSON("GET", gadgets, "").Code == http.StatusOK })
	for i := range 20 {
		servertest.MustCode(t, "create", s.ref.JSON("POST", gadgets, gadget(fmt.Sprintf("g-%02d", i), i)), http.StatusCreated)
	}
	env := s.start(t)
	if c := server.WatchCache(env.Server, gadgetsGVR); c == nil || !c.Ready() {
		t.Fatal("the gadgets' cache is not ready after the server started")
	}
	return s
}

// stop stops the server, which saves its caches, and returns the path
// of the gadgets' file.
func (s *savedSetup) stop(t *testing.T) string {
	t.Helper()
	s.env.Stop()
	path := filepath.Join(s.dir, "gadgets.v1.saved.objwatch.io.cache")
	if _, err := os.Stat(path); err != nil {
		t.Fatalf("no saved state after the server stopped: %v", err)
	}
	return path
}

// sameAsEtcd fails unless a's list of gadgets (from its cache) holds
// what etcd holds, object for object.
func (s *savedSetup) sameAsEtcd(t *testing.T, a *servertest.API, path string) {
	t.Helper()
	items := func(a *servertest.API) (map[string]string, string) {
		r := a.JSON("GET", path, "")
		servertest.MustCode(t, "list", r, http.StatusOK)
		var l struct {
			Metadata struct {
				ResourceVersion string `json:"resourceVersion"`
			} `json:"metadata"`
			Items []json.RawMessage `json:"items"`
		}
		if err := json.Unmarshal(r.Body, &l); err != nil {
			t.Fatal(err)
		}
		out := map[string]string{}
		for _, it := range l.Items {
			var o struct {
				Metadata struct{ Name string } `json:"metadata"`
			}
			json.Unmarshal(it, &o)
			out[o.Metadata.Name] = string(it)
		}
		return out, l.Metadata.ResourceVersion
	}
	got, _ := items(a)
	want, _ := items(s.ref)
	if len(got) != len(want) {
		t.Fatalf("%s: %d objects, etcd holds %d", path, len(got), len(want))
	}
	for name, w := range want {
		if got[name] != w {
			t.Fatalf("%s: object %s = %s\netcd holds %s", path, name, got[name], w)
		}
	}
}

// TestWatchCacheStartsFromSavedState: a server stopped and started again
// loads its caches' saved states and catches up with what was written
// meanwhile (through another server): its lists are etcd's, a write after
// the start is served, and a watch from the saved revision gets exactly
// the events after it.
func TestWatchCacheStartsFromSavedState(t *testing.T) {
	s := newSavedSetup(t)
	s.stop(t)
	upd := s.ref.Do("PATCH", gadgets+"/g-00", "application/merge-patch+json", []byte(`{"spec":{"size":100}}`))
	servertest.MustCode(t, "patch", upd, http.StatusOK)
	servertest.MustCode(t, "create", s.ref.JSON("POST", gadgets, gadget("g-new", 1)), http.StatusCreated)
	servertest.MustCode(t, "delete", s.ref.JSON("DELETE", gadgets+"/g-02", ""), http.StatusOK)

	env := s.start(t)
	c := server.WatchCache(env.Server, gadgetsGVR)
	from, events, ok := c.Resumed()
	if !ok || events != 3 {
		t.Fatalf("gadgets' cache Resumed = %d, %d events, %v; want started from its saved state with the 3 events written while stopped", from, events, ok)
	}
	a := servertest.NewAPI(t, env)
	t.Cleanup(a.C.CloseIdleConnections)
	s.sameAsEtcd(t, a, gadgets)
	s.sameAsEtcd(t, a, gadgets+"?labelSelector=size%3D5")
	later := a.JSON("POST", gadgets, gadget("g-later", 2))
	servertest.MustCode(t, "create after the start", later, http.StatusCreated)
	s.sameAsEtcd(t, a, gadgets)

	lines := servertest.WatchLines(t, a, fmt.Sprintf("%s?watch=1&resourceVersion=%d", gadgets, from), 4)
	for i, want := range []string{`"type":"MODIFIED"`, `"type":"ADDED"`, `"type":"DELETED"`, `"type":"ADDED"`} {
		if !strings.Contains(lines[i], want) {
			t.Errorf("watch from the saved revision %d: event %d = %s, want %s", from, i, servertest.Truncate([]byte(lines[i])), want)
		}
	}
	for i, name := range []string{"g-00", "g-new", "g-02", "g-later"} {
		if !strings.Contains(lines[i], `"name":"`+name+`"`) {
			t.Errorf("watch event %d = %s, want %s", i, servertest.Truncate([]byte(lines[i])), name)
		}
	}
}

// TestWatchCacheSavedStateNotUsable: a saved state whose revision etcd
// compacted while the server was down, or a damaged one, is not used:
// the cache lists etcd, and answers as etcd does.
func TestWatchCacheSavedStateNotUsable(t *testing.T) {
	for _, tc := range []struct {
		name  string
		spoil func(t *testing.T, s *savedSetup, path string)
	}{
		{"compacted", func(t *testing.T, s *savedSetup, _ string) {
			for size := range 2 { // etcd keeps the revision it compacted at: compact past the first after the saved one
				servertest.MustCode(t, "patch", s.ref.Do("PATCH", gadgets+"/g-01", "application/merge-patch+json", fmt.Appendf(nil, `{"spec":{"size":%d}}`, 50+size)), http.StatusOK)
			}
			st := servertest.RawStore(t, s.env)
			rev, err := st.Revision(t.Context())
			if err != nil {
				t.Fatal(err)
			}
			if err := st.Compact(t.Context(), rev); err != nil {
				t.Fatal(err)
			}
		}},
		{"damaged", func(t *testing.T, s *savedSetup, path string) {
			b, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			b[len(b)-len(b)/3] ^= 0x20
			if err := os.WriteFile(path, b, 0o600); err != nil {
				t.Fatal(err)
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newSavedSetup(t)
			path := s.stop(t)
			tc.spoil(t, s, path)
			env := s.start(t)
			if from, _, ok := server.WatchCache(env.Server, gadgetsGVR).Resumed(); ok {
				t.Fatalf("started from a saved state at %d", from)
			}
			if _, err := os.Stat(path); tc.name == "compacted" && !errors.Is(err, os.ErrNotExist) {
				t.Errorf("compacted saved state still there: %v", err)
			}
			a := servertest.NewAPI(t, env)
			t.Cleanup(a.C.CloseIdleConnections)
			s.sameAsEtcd(t, a, gadgets)
		})
	}
}

// TestReadinessCountsCRDCaches: after a restart, the server is not ready
// (its Start, as /readyz, waits) until the caches of the CRDs established
// at start have loaded, not only the built-in ones.
func TestReadinessCountsCRDCaches(t *testing.T) {
	const delay = 3 * time.Second
	s := newSavedSetup(t)
	s.env.Stop()
	began := time.Now()
	env := testenv.Start(t, testenv.WithEtcd(s.ep), testenv.WithServerConfig(func(c *server.Config) { c.WatchCacheStartDelayCustom = delay }))
	if c := server.WatchCache(env.Server, gadgetsGVR); !c.Ready() {
		t.Fatalf("server ready %v after start while the gadgets' cache is loading", time.Since(began))
	}
	if took := time.Since(began); took < delay {
		t.Fatalf("server ready after %v, before the gadgets' cache could load (%v)", took, delay)
	}
	a := servertest.NewAPI(t, env)
	t.Cleanup(a.C.CloseIdleConnections)
	servertest.MustCode(t, "readyz", a.JSON("GET", "/readyz", ""), http.StatusOK)
}

// TestNoSavedStatesWithEncryption: with encryption at rest no watch cache
// writes its objects to disk (they would be plaintext), and the states a
// start without it saved are removed.
func TestNoSavedStatesWithEncryption(t *testing.T) {
	s := newSavedSetup(t)
	s.stop(t)
	cfg := filepath.Join(t.TempDir(), "encryption.yaml")
	const config = "apiVersion: apiserver.config.k8s.io/v1\nkind: EncryptionConfiguration\nresources:\n- resources: [secrets]\n  providers:\n  - aesgcm: {keys: [{name: k1, secret: c2VjcmV0IGlzIHNlY3VyZSwgaXMgaXQgbm90Pz8/Pz8=}]}\n  - identity: {}\n"
	if err := os.WriteFile(cfg, []byte(config), 0o600); err != nil {
		t.Fatal(err)
	}
	env := testenv.Start(t, testenv.WithEtcd(s.ep), testenv.WithEncryptionProviderConfig(cfg),
		testenv.WithServerConfig(func(c *server.Config) { c.WatchCacheSnapshots = s.dir }))
	if _, err := os.Stat(s.dir); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("saved states left with encryption at rest: %v", err)
	}
	a := servertest.NewAPI(t, env)
	t.Cleanup(a.C.CloseIdleConnections)
	servertest.MustCode(t, "create", a.JSON("POST", "/api/v1/namespaces/default/secrets", `{"apiVersion":"v1","kind":"Secret","metadata":{"name":"s"},"stringData":{"k":"top secret"}}`), http.StatusCreated)
	env.Stop()
	if _, err := os.Stat(s.dir); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("saved states written with encryption at rest: %v", err)
	}
}
