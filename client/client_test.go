package client_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"

	"github.com/objwatch/objwatch/client"
	"github.com/objwatch/objwatch/testenv"
)

var configMaps = client.Resource{GVR: corev1.SchemeGroupVersion.WithResource("configmaps"), Namespaced: true, Kind: "ConfigMap"}

func start(t *testing.T, opts ...testenv.Option) (*testenv.Env, *client.REST) {
	t.Helper()
	env := testenv.Start(t, opts...)
	cfg, err := client.FromKubeconfig(env.Kubeconfig, "")
	if err != nil {
		t.Fatalf("FromKubeconfig: %v", err)
	}
	rc, err := client.New(cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(rc.CloseIdleConnections)
	return env, rc
}

func ctxFor(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func newCM(ns, name string, data map[string]string) *corev1.ConfigMap {
	return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Data: data}
}

func TestTypedClient(t *testing.T) {
	_, rc := start(t)
	ctx := ctxFor(t)
	cms := client.NewClient[*corev1.ConfigMap](rc, configMaps)

	created, err := cms.Create(ctx, newCM("default", "a", map[string]string{"k": "v"}), metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("Create: %v", err)
	}
	if created.UID == "" || created.ResourceVersion == "" || created.Kind != "ConfigMap" {
		t.Errorf("Create() = %+v, want uid, resourceVersion and kind set", created.ObjectMeta)
	}
	if _, err := cms.Create(ctx, newCM("default", "a", nil), metav1.CreateOptions{}); !errors.Is(err, client.ErrAlreadyExists) {
		t.Errorf("Create(existing) error = %v, want ErrAlreadyExists", err)
	}
	got, err := cms.Get(ctx, "default", "a", metav1.GetOptions{})
	if err != nil || got.Data["k"] != "v" {
		t.Fatalf("Get() = %v, %v; want data k=v", got, err)
	}
	if _, err := cms.Get(ctx, "default", "missing", metav1.GetOptions{}); !errors.Is(err, client.ErrNotFound) {
		t.Errorf("Get(missing) error = %v, want ErrNotFound", err)
	}
	var se *client.StatusError
	if _, err := cms.Get(ctx, "default", "missing", metav1.GetOptions{}); !errors.As(err, &se) || se.ErrStatus.Code != 404 || se.ErrStatus.Details.Name != "missing" {
		t.Errorf("Get(missing) error = %#v, want a StatusError with code 404 naming the object", err)
	}

	got.Data["k"] = "v2"
	updated, err := cms.Update(ctx, got, metav1.UpdateOptions{})
	if err != nil || updated.Data["k"] != "v2" || updated.ResourceVersion == got.ResourceVersion {
		t.Fatalf("Update() = %v, %v", updated, err)
	}
	got.Data["k"] = "stale"
	if _, err := cms.Update(ctx, got, metav1.UpdateOptions{}); !errors.Is(err, client.ErrConflict) {
		t.Errorf("Update(stale) error = %v, want ErrConflict", err)
	}

	patches := []struct {
		pt   types.PatchType
		body string
		want string
	}{
		{types.MergePatchType, `{"data":{"m":"merge"}}`, "merge"},
		{types.JSONPatchType, `[{"op":"replace","path":"/data/m","value":"json"}]`, "json"},
		{types.StrategicMergePatchType, `{"data":{"m":"strategic"}}`, "strategic"},
	}
	for _, p := range patches {
		out, err := cms.Patch(ctx, "default", "a", p.pt, []byte(p.body), metav1.PatchOptions{}, "")
		if err != nil || out.Data["m"] != p.want || out.Data["k"] != "v2" {
			t.Errorf("Patch(%s) = %v, %v; want m=%s", p.pt, out, err, p.want)
		}
	}
	if _, err := cms.Patch(ctx, "default", "a", types.JSONPatchType, []byte(`[{"op":"test","path":"/data/m","value":"x"}]`), metav1.PatchOptions{}, ""); err == nil {
		t.Errorf("Patch(failing test op) error = nil, want an error")
	}
	// Subresources are variadic, as in client-go: none patches the object
	// itself, "status" the status subresource (which ConfigMaps lack).
	if out, err := cms.Patch(ctx, "default", "a", types.MergePatchType, []byte(`{"data":{"m":"plain"}}`), metav1.PatchOptions{}); err != nil || out.Data["m"] != "plain" {
		t.Errorf("Patch(no subresource) = %v, %v; want m=plain", out, err)
	}
	if _, err := cms.Patch(ctx, "default", "a", types.MergePatchType, []byte(`{"data":{"m":"status"}}`), metav1.PatchOptions{}, "status"); !errors.Is(err, client.ErrNotFound) {
		t.Errorf("Patch(status of a ConfigMap) error = %v, want ErrNotFound", err)
	}
	if got, _ := cms.Get(ctx, "default", "a", metav1.GetOptions{}); got == nil || got.Data["m"] != "plain" {
		t.Errorf("after a refused status patch: %v, want m=plain", got)
	}

	if err := cms.Delete(ctx, "default", "a", metav1.DeleteOptions{}); err != nil {
		t.Fatalf("Delete: %v", err)
	}
	if err := cms.Delete(ctx, "default", "a", metav1.DeleteOptions{}); !errors.Is(err, client.ErrNotFound) {
		t.Errorf("Delete(deleted) error = %v, want ErrNotFound", err)
	}
}

func TestListPaginationAndSelectors(t *testing.T) {
	_, rc := start(t)
	ctx := ctxFor(t)
	cms := client.NewClient[*corev1.ConfigMap](rc, configMaps)
	for i := range 25 {
		cm := newCM("default", fmt.Sprintf("cm-%02d", i), nil)
		cm.Labels = map[string]string{"parity": strconv.Itoa(i % 2)}
		if _, err := cms.Create(ctx, cm, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	var names []string
	opts := metav1.ListOptions{Limit: 10}
	pages := 0
	for {
		l, err := cms.List(ctx, "default", opts)
		if err != nil {
			t.Fatalf("List page %d: %v", pages, err)
		}
		pages++
		for _, it := range l.Items {
			names = append(names, it.Name)
		}
		if l.Continue == "" {
			break
		}
		opts.Continue = l.Continue
	}
	if pages != 3 || len(names) != 25 || names[0] != "cm-00" || names[24] != "cm-24" {
		t.Errorf("paginated List: %d pages, names %v; want 3 pages of cm-00..cm-24", pages, names)
	}
	l, err := cms.List(ctx, "", metav1.ListOptions{LabelSelector: "parity=1"})
	if err != nil || len(l.Items) != 12 || l.ResourceVersion == "" {
		t.Errorf("List(parity=1) = %d items (rv %q), %v; want 12", len(l.Items), l.ResourceVersion, err)
	}
	if _, err := cms.List(ctx, "default", metav1.ListOptions{LabelSelector: "a in (("}); !errors.Is(err, client.ErrBadRequest) {
		t.Errorf("List(bad selector) error = %v, want ErrBadRequest", err)
	}
	if err := cms.DeleteCollection(ctx, "default", metav1.DeleteOptions{}, metav1.ListOptions{LabelSelector: "parity=0"}); err != nil {
		t.Fatalf("DeleteCollection: %v", err)
	}
	l, err = cms.List(ctx, "default", metav1.ListOptions{})
	if err != nil || len(l.Items) != 12 {
		t.Errorf("List after DeleteCollection = %d items, %v; want 12", len(l.Items), err)
	}
}

func TestWatch(t *testing.T) {
	_, rc := start(t)
	ctx := ctxFor(t)
	cms := client.NewClient[*corev1.ConfigMap](rc, configMaps)
	l, err := cms.List(ctx, "default", metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	w, err := cms.Watch(ctx, "default", metav1.ListOptions{ResourceVersion: l.ResourceVersion, AllowWatchBookmarks: true})
	if err != nil {
		t.Fatalf("Watch: %v", err)
	}
	defer w.Stop()
	cm, err := cms.Create(ctx, newCM("default", "w", map[string]string{"n": "1"}), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cm.Data["n"] = "2"
	cm2, err := cms.Update(ctx, cm, metav1.UpdateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := cms.Delete(ctx, "default", "w", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	want := []struct {
		typ client.EventType
		n   string
		rv  string
	}{{client.Added, "1", cm.ResourceVersion}, {client.Modified, "2", cm2.ResourceVersion}, {client.Deleted, "2", ""}}
	for _, wv := range want {
		ev, err := w.Next()
		if err != nil {
			t.Fatalf("Next: %v", err)
		}
		if ev.Type != wv.typ || ev.Object.Data["n"] != wv.n || (wv.rv != "" && ev.Object.ResourceVersion != wv.rv) {
			t.Errorf("Next() = %s n=%s rv=%s, want %s n=%s rv=%s", ev.Type, ev.Object.Data["n"], ev.Object.ResourceVersion, wv.typ, wv.n, wv.rv)
		}
	}

	// Stop unblocks a pending Next.
	errc := make(chan error, 1)
	go func() { _, err := w.Next(); errc <- err }()
	time.Sleep(50 * time.Millisecond)
	w.Stop()
	if err := <-errc; !errors.Is(err, client.ErrStopped) {
		t.Errorf("Next() after Stop error = %v, want ErrStopped", err)
	}

	// The server ends a watch at its timeout: io.EOF.
	one := int64(1)
	w2, err := cms.Watch(ctx, "default", metav1.ListOptions{TimeoutSeconds: &one})
	if err != nil {
		t.Fatal(err)
	}
	defer w2.Stop()
	for {
		_, err := w2.Next()
		if err != nil {
			if !errors.Is(err, io.EOF) {
				t.Errorf("Next() at timeout error = %v, want io.EOF", err)
			}
			break
		}
	}
}

func TestWatchGone(t *testing.T) {
	_, rc := start(t, testenv.WithHistory(100*time.Millisecond))
	ctx := ctxFor(t)
	cms := client.NewClient[*corev1.ConfigMap](rc, configMaps)
	first, err := cms.Create(ctx, newCM("default", "old", nil), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		if _, err := cms.Create(ctx, newCM("default", fmt.Sprintf("n%d", i), nil), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	deadline := time.Now().Add(20 * time.Second)
	one := int64(1)
	for {
		time.Sleep(200 * time.Millisecond) // let the compactor pass
		w, err := cms.Watch(ctx, "default", metav1.ListOptions{ResourceVersion: first.ResourceVersion, TimeoutSeconds: &one})
		if err != nil {
			if errors.Is(err, client.ErrGone) {
				return
			}
			t.Fatalf("Watch: %v", err)
		}
		var werr error
		for {
			if _, werr = w.Next(); werr != nil {
				break
			}
		}
		w.Stop()
		if errors.Is(werr, client.ErrGone) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("watch from a compacted resourceVersion: last error %v, want ErrGone", werr)
		}
	}
}

func TestAuthentication(t *testing.T) {
	env, _ := start(t)
	ctx := ctxFor(t)
	dir := t.TempDir()
	tokenFile := filepath.Join(dir, "token")
	if err := os.WriteFile(tokenFile, []byte(env.Config.BearerToken+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		cfg  client.Config
		want error
	}{
		{"certificate", client.Config{Host: env.Config.Host, CAData: env.Config.CAData, CertData: env.Config.CertData, KeyData: env.Config.KeyData}, nil},
		{"token", client.Config{Host: env.Config.Host, CAData: env.Config.CAData, BearerToken: env.Config.BearerToken}, nil},
		{"token file", client.Config{Host: env.Config.Host, CAData: env.Config.CAData, BearerTokenFile: tokenFile}, nil},
		{"insecure", client.Config{Host: env.Config.Host, Insecure: true, BearerToken: env.Config.BearerToken}, nil},
		{"bad token", client.Config{Host: env.Config.Host, CAData: env.Config.CAData, BearerToken: "wrong"}, client.ErrUnauthorized},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rc, err := client.New(&tt.cfg)
			if err != nil {
				t.Fatalf("New: %v", err)
			}
			defer rc.CloseIdleConnections()
			_, err = client.NewClient[*corev1.ConfigMap](rc, configMaps).List(ctx, "default", metav1.ListOptions{})
			if !errors.Is(err, tt.want) || (tt.want == nil && err != nil) {
				t.Errorf("List() error = %v, want %v", err, tt.want)
			}
		})
	}
	t.Run("unknown CA", func(t *testing.T) {
		rc, err := client.New(&client.Config{Host: env.Config.Host, BearerToken: env.Config.BearerToken})
		if err != nil {
			t.Fatal(err)
		}
		defer rc.CloseIdleConnections()
		if _, err := rc.Raw(ctx, "/version"); err == nil {
			t.Errorf("Raw(/version) without the CA succeeded, want a TLS error")
		}
	})
}

// Gizmo is a custom resource with a Go type of its own: no code generation.
type Gizmo struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Spec              GizmoSpec   `json:"spec"`
	Status            GizmoStatus `json:"status,omitempty"`
}

type GizmoSpec struct {
	Size string `json:"size"`
}

type GizmoStatus struct {
	Phase string `json:"phase,omitempty"`
}

const gizmoCRD = `{
  "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
  "metadata": {"name": "gizmos.test.objwatch.io"},
  "spec": {
    "group": "test.objwatch.io", "scope": "Namespaced",
    "names": {"plural": "gizmos", "singular": "gizmo", "kind": "Gizmo"},
    "versions": [{"name": "v1", "served": true, "storage": true,
      "subresources": {"status": {}},
      "schema": {"openAPIV3Schema": {"type": "object", "properties": {
        "spec": {"type": "object", "properties": {"size": {"type": "string"}}},
        "status": {"type": "object", "properties": {"phase": {"type": "string"}}}}}}}]
  }
}`

func TestCustomResourceAndDiscovery(t *testing.T) {
	_, rc := start(t)
	ctx := ctxFor(t)
	crds, err := rc.Resource(ctx, schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"})
	if err != nil {
		t.Fatalf("Resource(crds): %v", err)
	}
	if crds.Namespaced || crds.Kind != "CustomResourceDefinition" {
		t.Errorf("Resource(crds) = %+v, want cluster-scoped CustomResourceDefinition", crds)
	}
	crd := &unstructured.Unstructured{}
	if err := crd.UnmarshalJSON([]byte(gizmoCRD)); err != nil {
		t.Fatal(err)
	}
	if _, err := client.NewUnstructured(rc, crds).Create(ctx, crd, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create CRD: %v", err)
	}
	gvk := schema.GroupVersionKind{Group: "test.objwatch.io", Version: "v1", Kind: "Gizmo"}
	var res client.Resource
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if res, err = rc.ResourceFor(ctx, gvk); err == nil {
			break
		}
		if !errors.Is(err, client.ErrNotFound) || time.Now().After(deadline) {
			t.Fatalf("ResourceFor(%v): %v", gvk, err)
		}
	}
	if res.GVR.Resource != "gizmos" || !res.Namespaced {
		t.Errorf("ResourceFor(%v) = %+v, want namespaced gizmos", gvk, res)
	}

	gizmos := client.NewClient[*Gizmo](rc, res)
	g := &Gizmo{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "g"}, Spec: GizmoSpec{Size: "s"}}
	g.APIVersion, g.Kind = "test.objwatch.io/v1", "Gizmo"
	g, err = gizmos.Create(ctx, g, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("Create(gizmo): %v", err)
	}
	g.Status.Phase = "Ready"
	g.Spec.Size = "ignored"
	g, err = gizmos.UpdateStatus(ctx, g, metav1.UpdateOptions{})
	if err != nil || g.Status.Phase != "Ready" || g.Spec.Size != "s" {
		t.Errorf("UpdateStatus() = %+v, %v; want status Ready, spec unchanged", g, err)
	}
	u, err := client.NewUnstructured(rc, res).Get(ctx, "default", "g", metav1.GetOptions{})
	if err != nil {
		t.Fatalf("unstructured Get: %v", err)
	}
	if phase, _, _ := unstructured.NestedString(u.Object, "status", "phase"); phase != "Ready" {
		t.Errorf("unstructured Get status.phase = %q, want Ready", phase)
	}
	ul, err := client.NewUnstructured(rc, res).List(ctx, "", metav1.ListOptions{})
	if err != nil || len(ul.Items) != 1 || ul.Items[0].GetKind() != "Gizmo" {
		t.Errorf("unstructured List = %v, %v; want one Gizmo", ul, err)
	}
	err = client.RetryOnConflict(ctx, func() error {
		cur, err := gizmos.Get(ctx, "default", "g", metav1.GetOptions{})
		if err != nil {
			return err
		}
		// A concurrent writer gets in first the first time round.
		if cur.Spec.Size == "s" {
			other := *cur
			other.Spec.Size = "m"
			if _, err := gizmos.Update(ctx, &other, metav1.UpdateOptions{}); err != nil {
				return err
			}
		}
		cur.Spec.Size = "l"
		_, err = gizmos.Update(ctx, cur, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		t.Errorf("RetryOnConflict: %v", err)
	}
	if g, err := gizmos.Get(ctx, "default", "g", metav1.GetOptions{}); err != nil || g.Spec.Size != "l" {
		t.Errorf("after RetryOnConflict size = %v, %v; want l", g, err)
	}
}

// freezer is a TCP proxy that can stop forwarding without closing
// anything, like a peer that vanished from the network.
type freezer struct {
	ln     net.Listener
	target string
	mu     sync.Mutex
	frozen bool
	conns  []net.Conn
	wg     sync.WaitGroup
}

func newFreezer(t *testing.T, target string) *freezer {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	f := &freezer{ln: ln, target: target}
	f.wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			u, err := net.Dial("tcp", target)
			if err != nil {
				c.Close()
				continue
			}
			f.mu.Lock()
			f.conns = append(f.conns, c, u)
			f.mu.Unlock()
			f.wg.Go(func() { f.pipe(u, c) })
			f.wg.Go(func() { f.pipe(c, u) })
		}
	})
	t.Cleanup(func() {
		ln.Close()
		f.mu.Lock()
		for _, c := range f.conns {
			c.Close()
		}
		f.mu.Unlock()
		f.wg.Wait()
	})
	return f
}

func (f *freezer) pipe(dst, src net.Conn) {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if err != nil {
			return
		}
		f.mu.Lock()
		frozen := f.frozen
		f.mu.Unlock()
		if frozen {
			continue // swallow: nothing gets through, nothing is closed
		}
		if _, err := dst.Write(buf[:n]); err != nil {
			return
		}
	}
}

func (f *freezer) freeze() {
	f.mu.Lock()
	f.frozen = true
	f.mu.Unlock()
}

// TestDeadConnection: a watch whose connection silently dies fails within
// the HTTP/2 health-check bound instead of hanging.
func TestDeadConnection(t *testing.T) {
	defer client.SetPingTimeouts(300*time.Millisecond, 300*time.Millisecond)()
	env, _ := start(t)
	ctx := ctxFor(t)
	u, err := url.Parse(env.Config.Host)
	if err != nil {
		t.Fatal(err)
	}
	f := newFreezer(t, u.Host)
	rc, err := client.New(&client.Config{Host: "https://" + f.ln.Addr().String(), CAData: env.Config.CAData, BearerToken: env.Config.BearerToken})
	if err != nil {
		t.Fatal(err)
	}
	defer rc.CloseIdleConnections()
	cms := client.NewClient[*corev1.ConfigMap](rc, configMaps)
	w, err := cms.Watch(ctx, "default", metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	f.freeze()
	start := time.Now()
	errc := make(chan error, 1)
	go func() {
		_, err := w.Next()
		errc <- err
	}()
	select {
	case err := <-errc:
		if err == nil || errors.Is(err, io.EOF) {
			t.Errorf("Next() on a dead connection = %v, want a connection error", err)
		}
		t.Logf("dead connection detected after %v: %v", time.Since(start).Round(time.Millisecond), err)
	case <-time.After(10 * time.Second):
		t.Fatalf("watch on a dead connection still blocked after 10 s")
	}
}
