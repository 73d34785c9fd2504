package informer_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/objwatch/objwatch/client"
	"github.com/objwatch/objwatch/client/informer"
)

var (
	namespacesRes = client.Resource{GVR: corev1.SchemeGroupVersion.WithResource("namespaces"), Kind: "Namespace"}
	rolesRes      = client.Resource{GVR: rbacv1.SchemeGroupVersion.WithResource("roles"), Namespaced: true, Kind: "Role"}
	bindingsRes   = client.Resource{GVR: rbacv1.SchemeGroupVersion.WithResource("rolebindings"), Namespaced: true, Kind: "RoleBinding"}
)

// tenancy is a server with namespaces and a user that admin grants
// access.
type tenancy struct {
	admin *client.REST
	user  string
}

func startTenancy(t *testing.T, admin *client.REST, user string, namespaces ...string) *tenancy {
	t.Helper()
	ctx := testContext(t, 30*time.Second)
	for _, ns := range namespaces {
		obj := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}
		if _, err := client.NewClient[*corev1.Namespace](admin, namespacesRes).Create(ctx, obj, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	return &tenancy{admin: admin, user: user}
}

// grant lets the user get, list and watch ConfigMaps in ns.
func (tn *tenancy) grant(t *testing.T, ns string) {
	t.Helper()
	ctx := testContext(t, 30*time.Second)
	role := &rbacv1.Role{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "cm-reader"},
		Rules:      []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"configmaps"}, Verbs: []string{"get", "list", "watch"}}},
	}
	if _, err := client.NewClient[*rbacv1.Role](tn.admin, rolesRes).Create(ctx, role, metav1.CreateOptions{}); err != nil && !errors.Is(err, client.ErrAlreadyExists) {
		t.Fatal(err)
	}
	binding := &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: tn.user + "-reads"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "cm-reader"},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: tn.user}},
	}
	if _, err := client.NewClient[*rbacv1.RoleBinding](tn.admin, bindingsRes).Create(ctx, binding, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// revoke deletes the user's binding in ns.
func (tn *tenancy) revoke(t *testing.T, ns string) {
	t.Helper()
	if err := client.NewClient[*rbacv1.RoleBinding](tn.admin, bindingsRes).Delete(testContext(t, 30*time.Second), ns, tn.user+"-reads", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
}

// userREST returns a REST authenticating to e as user, its transport
// wrapped.
func userREST(t *testing.T, e *env, user string, wrap func(http.RoundTripper) http.RoundTripper) *client.REST {
	t.Helper()
	c := e.User(t, user)
	rc, err := client.New(&client.Config{Host: c.Host, CAData: c.CAData, CertData: c.CertData, KeyData: c.KeyData, WrapTransport: wrap})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(rc.CloseIdleConnections)
	return rc
}

// waitAllowed waits until rc may list ConfigMaps in each namespace: a
// binding reaches the server's authorizer through a watch.
func waitAllowed(t *testing.T, rc *client.REST, namespaces ...string) {
	t.Helper()
	ctx := testContext(t, 30*time.Second)
	for _, ns := range namespaces {
		waitFor(t, "access to "+ns, func() bool {
			ok, _, err := rc.CanI(ctx, authorizationv1.ResourceAttributes{Verb: "list", Resource: "configmaps", Namespace: ns})
			return err == nil && ok
		})
	}
}

func createCM(t *testing.T, c *client.Client[CM], ns, name string) CM {
	t.Helper()
	cm, err := c.Create(testContext(t, 30*time.Second), &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return cm
}

func listerKeys(l informer.Lister[CM]) []string {
	var keys []string
	for _, cm := range l.List("", nil) {
		keys = append(keys, informer.KeyOf(cm).String())
	}
	slices.Sort(keys)
	return keys
}

// refusedGauge reads objwatch_informer_refused{namespace, verb}.
func refusedGauge(t *testing.T, g prometheus.Gatherer, ns, verb string) float64 {
	t.Helper()
	mfs, err := g.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "objwatch_informer_refused" {
			continue
		}
		for _, m := range mf.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			if labels["namespace"] == ns && labels["verb"] == verb {
				return value(m)
			}
		}
	}
	t.Fatalf("no objwatch_informer_refused{namespace=%q,verb=%q}", ns, verb)
	return 0
}

// byPath sends the requests for namespace ns through via, others straight on.
func byPath(ns string, via func(http.RoundTripper) http.RoundTripper) func(http.RoundTripper) http.RoundTripper {
	return func(rt http.RoundTripper) http.RoundTripper {
		cut := via(rt)
		return roundTrip(func(r *http.Request) (*http.Response, error) {
			if strings.Contains(r.URL.Path, "/namespaces/"+ns+"/") {
				return cut.RoundTrip(r)
			}
			return rt.RoundTrip(r)
		})
	}
}

type roundTrip func(*http.Request) (*http.Response, error)

func (f roundTrip) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// TestTenantNamespaces: a user who may read ConfigMaps in a and c, not b,
// runs one informer over a and c: it syncs, caches and reports both and
// nothing of b, and a relist of a (its watch held back past compaction)
// deletes only what went from a.
func TestTenantNamespaces(t *testing.T) {
	bothModes(t, testTenantNamespaces)
}

func testTenantNamespaces(t *testing.T, compact bool) {
	e := startEnv(t, compacting(100*time.Millisecond)...)
	tn := startTenancy(t, e.admin, "alice", "a", "b", "c")
	tn.grant(t, "a")
	tn.grant(t, "c")
	for _, ns := range []string{"a", "b", "c"} {
		createCM(t, e.writer, ns, "one")
	}
	alice := userREST(t, e, "alice", byPath("a", e.cut.Wrap))
	waitAllowed(t, alice, "a", "c")

	reg := prometheus.NewPedanticRegistry()
	inf, err := informer.New(client.NewClient[CM](alice, configMaps), informer.Options[CM]{
		Namespaces: []string{"c", "a", "c"}, Compact: compact, Metrics: reg,
		InitialBackoff: 20 * time.Millisecond, MaxBackoff: 200 * time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := inf.Name(), "configmaps/a,c"; got != want {
		t.Errorf("Name() = %q, want %q", got, want)
	}
	rec := newRecorder()
	var (
		mu   sync.Mutex
		seen = map[string]bool{} // namespaces of the objects handled
		gone []string            // keys deleted, with finalStateUnknown
	)
	note := func(cm CM) { mu.Lock(); seen[cm.Namespace] = true; mu.Unlock() }
	if _, err := inf.AddHandler(rec, informer.HandlerOptions{Name: "rec"}); err != nil {
		t.Fatal(err)
	}
	reg2, err := inf.AddHandler(informer.HandlerFuncs[CM]{
		Add:    func(cm CM, _ bool) { note(cm) },
		Update: func(_, cm CM) { note(cm) },
		Delete: func(cm CM, unknown bool) {
			note(cm)
			mu.Lock()
			gone = append(gone, fmt.Sprintf("%s/%s unknown=%v", cm.Namespace, cm.Name, unknown))
			mu.Unlock()
		},
	}, informer.HandlerOptions{Name: "ns"})
	if err != nil {
		t.Fatal(err)
	}
	run(t, inf)
	ctx := testContext(t, 30*time.Second)
	if err := inf.WaitForSyncOrRefusal(ctx); err != nil {
		t.Fatalf("WaitSynced() = %v", err)
	}
	if err := informer.WaitForSync(ctx, reg2.HasSynced); err != nil {
		t.Fatal(err)
	}
	if got, want := listerKeys(inf.Lister()), []string{"a/one", "c/one"}; !slices.Equal(got, want) {
		t.Fatalf("Lister after sync = %v, want %v", got, want)
	}

	// Churn in b, which alice's informer must never see.
	churnCtx, stopChurn := context.WithCancel(ctx)
	churnErr := make(chan error, 1)
	go func() {
		w := newWriter(e.writer, newHistory(), "b", 5, 1)
		for churnCtx.Err() == nil {
			if err := w.step(churnCtx); err != nil && churnCtx.Err() == nil {
				churnErr <- err
				return
			}
		}
		churnErr <- nil
	}()

	createCM(t, e.writer, "a", "two")
	c1, err := e.writer.Get(ctx, "c", "one", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	c1 = c1.DeepCopy()
	c1.Data = map[string]string{"k": "v"}
	if _, err := e.writer.Update(ctx, c1, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	createCM(t, e.writer, "c", "two")
	waitFor(t, "a/two, c/two and c/one's update", func() bool {
		c, ok := inf.Lister().Get("c", "one")
		return ok && c.Data["k"] == "v" && slices.Equal(listerKeys(inf.Lister()), []string{"a/one", "a/two", "c/one", "c/two"})
	})
	c1, _ = inf.Lister().Get("c", "one")

	// Hold a's watch back past compaction, and change a meanwhile: a
	// relists, and deletes a/one with an unknown final state. c's watch
	// goes on; none of c's objects goes.
	e.cut.Cut(1500 * time.Millisecond)
	if err := e.writer.Delete(ctx, "a", "one", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	createCM(t, e.writer, "a", "three")
	createCM(t, e.writer, "c", "three") // while a is held back
	waitFor(t, "a's relist", func() bool {
		return slices.Equal(listerKeys(inf.Lister()), []string{"a/three", "a/two", "c/one", "c/three", "c/two"})
	})
	stopChurn()
	if err := <-churnErr; err != nil {
		t.Errorf("churn in b: %v", err)
	}
	if n := counter(t, reg, "objwatch_informer_relists_total"); n != 1 {
		t.Errorf("relists = %v, want 1 (a's only)", n)
	}
	if n := counter(t, reg, "objwatch_informer_lists_total"); n != 3 {
		t.Errorf("lists = %v, want 3 (a, c, a's relist)", n)
	}
	if c, ok := inf.Lister().Get("c", "one"); !ok || c.ResourceVersion != c1.ResourceVersion {
		t.Errorf("c/one after a's relist = %v, %v; want it unchanged", c, ok)
	}
	waitFor(t, "handlers", func() bool { return reg2.Backlog() == 0 })
	mu.Lock()
	if want := []string{"a/one unknown=true"}; !slices.Equal(gone, want) {
		t.Errorf("deletions = %v, want %v", gone, want)
	}
	if want := map[string]bool{"a": true, "c": true}; !maps.Equal(seen, want) {
		t.Errorf("handler saw namespaces %v, want %v", seen, want)
	}
	mu.Unlock()
	rec.mu.Lock()
	for _, err := range rec.errs {
		t.Errorf("recorder: %s", err)
	}
	rec.mu.Unlock()
	for _, ns := range []string{"a", "c"} {
		for _, verb := range []string{"list", "watch"} {
			if v := refusedGauge(t, reg, ns, verb); v != 0 {
				t.Errorf("objwatch_informer_refused{namespace=%q,verb=%q} = %v, want 0", ns, verb, v)
			}
		}
	}
	if err := inf.LastError(); err != nil {
		t.Errorf("LastError() = %v, want nil", err)
	}
	if rv := inf.LastResourceVersion(); rv == "" {
		t.Errorf("LastResourceVersion() = %q, want the smaller of a's and c's", rv)
	}
}

// TestTenantRefused: an informer the server refuses says so at once, with
// the resource, namespace and verb, through WaitSynced, LastError and the
// objwatch_informer_refused gauge; it keeps trying, syncs on its own once
// access is granted, and reports a revocation the same way.
func TestTenantRefused(t *testing.T) {
	e := startEnv(t)
	tn := startTenancy(t, e.admin, "alice", "a", "b")
	tn.grant(t, "a")
	createCM(t, e.writer, "a", "one")
	createCM(t, e.writer, "b", "one")
	alice := userREST(t, e, "alice", nil)
	waitAllowed(t, alice, "a")

	reg := prometheus.NewPedanticRegistry()
	inf, err := informer.New(client.NewClient[CM](alice, configMaps), informer.Options[CM]{
		Namespaces: []string{"a", "b"}, Metrics: reg,
		InitialBackoff: 20 * time.Millisecond, MaxBackoff: 200 * time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	run(t, inf)
	start := time.Now()
	err = inf.WaitForSyncOrRefusal(testContext(t, 30*time.Second))
	var refused *informer.RefusedError
	if !errors.As(err, &refused) || !errors.Is(err, client.ErrForbidden) {
		t.Fatalf("WaitSynced() = %v, want a *RefusedError matching ErrForbidden", err)
	}
	if took := time.Since(start); took > 5*time.Second {
		t.Errorf("WaitSynced took %v to report the refusal", took)
	}
	want := informer.RefusedError{Informer: "configmaps/a,b", Resource: configMaps.GVR, Namespace: "b", Verb: "watch", Err: refused.Err}
	if *refused != want || refused.Err == nil {
		t.Errorf("refusal = %+v, want %+v", *refused, want)
	}
	t.Logf("refusal: %v", err)
	if !strings.Contains(err.Error(), `cannot watch resource "configmaps" in API group "" in the namespace "b"`) {
		t.Errorf("refusal %q does not carry the server's message", err)
	}
	if err := inf.LastError(); !errors.As(err, &refused) || refused.Namespace != "b" {
		t.Errorf("LastError() = %v, want b's refusal", err)
	}
	if inf.HasSynced() {
		t.Error("HasSynced() = true with b refused")
	}
	if v := refusedGauge(t, reg, "b", "watch"); v != 1 {
		t.Errorf(`objwatch_informer_refused{namespace="b",verb="watch"} = %v, want 1`, v)
	}
	if v := refusedGauge(t, reg, "a", "watch") + refusedGauge(t, reg, "b", "list"); v != 0 {
		t.Errorf("objwatch_informer_refused for a, or b's list = %v, want 0", v)
	}
	waitFor(t, "a/one while b is refused", func() bool { return slices.Equal(listerKeys(inf.Lister()), []string{"a/one"}) })

	tn.grant(t, "b")
	if err := inf.WaitForSync(testContext(t, 20*time.Second)); err != nil {
		t.Fatalf("no sync after access to b was granted: %v (last error %v)", err, inf.LastError())
	}
	if err := inf.WaitForSyncOrRefusal(testContext(t, time.Second)); err != nil {
		t.Errorf("WaitSynced() once granted = %v", err)
	}
	if err := inf.LastError(); err != nil {
		t.Errorf("LastError() once granted = %v", err)
	}
	if v := refusedGauge(t, reg, "b", "watch"); v != 0 {
		t.Errorf(`objwatch_informer_refused{namespace="b",verb="watch"} once granted = %v, want 0`, v)
	}
	if got := listerKeys(inf.Lister()); !slices.Equal(got, []string{"a/one", "b/one"}) {
		t.Errorf("Lister once granted = %v, want a/one and b/one", got)
	}

	// Revoked: the server ends b's watch with a 403.
	tn.revoke(t, "b")
	waitFor(t, "the revocation", func() bool { return errors.As(inf.LastError(), &refused) })
	if refused.Namespace != "b" || refused.Verb != "watch" {
		t.Errorf("refusal after revocation = %+v, want b's watch", refused)
	}
	if v := refusedGauge(t, reg, "b", "watch"); v != 1 {
		t.Errorf("objwatch_informer_refused after revocation = %v, want 1", v)
	}
}

// TestTenantClusterWide: a cluster-wide informer of a user without
// cluster-wide access is refused at the cluster scope, with the verb of
// the request refused: a streaming list is a watch.
func TestTenantClusterWide(t *testing.T) {
	e := startEnv(t)
	tn := startTenancy(t, e.admin, "alice", "a")
	tn.grant(t, "a")
	alice := userREST(t, e, "alice", nil)
	waitAllowed(t, alice, "a")
	for _, tc := range []struct {
		streaming bool
		verb      string
	}{{true, "watch"}, {false, "list"}} {
		t.Run(tc.verb, func(t *testing.T) {
			reg := prometheus.NewPedanticRegistry()
			f := informer.NewFactory(alice, informer.FactoryOptions{Metrics: reg, DisableStreamingList: !tc.streaming})
			inf := informer.Shared[CM](f, configMaps, informer.Selection{})
			run(t, f)
			err := f.WaitForSyncOrRefusal(testContext(t, 30*time.Second))
			var refused *informer.RefusedError
			if !errors.As(err, &refused) || refused.Namespace != "" || refused.Verb != tc.verb || refused.Informer != inf.Name() {
				t.Fatalf("WaitSynced() = %v, want %s refused at the cluster scope", err, tc.verb)
			}
			msg := fmt.Sprintf(`cannot %s resource "configmaps" in API group "" at the cluster scope`, tc.verb)
			if !strings.Contains(err.Error(), msg) || !strings.Contains(err.Error(), "informer configmaps: "+tc.verb+" configmaps at the cluster scope refused") {
				t.Errorf("refusal %q, want it to say %q", err, msg)
			}
			if v := refusedGauge(t, reg, "", tc.verb); v != 1 {
				t.Errorf("objwatch_informer_refused{namespace=\"\",verb=%q} = %v, want 1", tc.verb, v)
			}
		})
	}
}

// TestFactoryNamespaces: a factory scoped to namespaces makes informers
// over them for namespaced resources, and leaves explicit namespaces and
// cluster-scoped resources alone.
func TestFactoryNamespaces(t *testing.T) {
	e := startEnv(t)
	startTenancy(t, e.admin, "alice", "a", "b", "c")
	for _, ns := range []string{"a", "b", "c"} {
		createCM(t, e.writer, ns, "one")
	}
	f := informer.NewFactory(e.admin, informer.FactoryOptions{Namespaces: []string{"c", "a"}})
	scoped := informer.Shared[CM](f, configMaps, informer.Selection{})
	one := informer.Shared[CM](f, configMaps, informer.Selection{Namespace: "b"})
	nss := informer.Shared[*corev1.Namespace](f, namespacesRes, informer.Selection{})
	if informer.Shared[CM](f, configMaps, informer.Selection{}) != scoped {
		t.Error("For() made a second informer for the same selection")
	}
	run(t, f)
	if err := f.WaitForSyncOrRefusal(testContext(t, 30*time.Second)); err != nil {
		t.Fatal(err)
	}
	for _, tc := range [][2]string{{scoped.Name(), "configmaps/a,c"}, {one.Name(), "configmaps/b"}, {nss.Name(), "namespaces"}} {
		if tc[0] != tc[1] {
			t.Errorf("Name() = %q, want %q", tc[0], tc[1])
		}
	}
	if got := listerKeys(scoped.Lister()); !slices.Equal(got, []string{"a/one", "c/one"}) {
		t.Errorf("scoped informer has %v, want a/one and c/one", got)
	}
	if got := listerKeys(one.Lister()); !slices.Equal(got, []string{"b/one"}) {
		t.Errorf("informer of b has %v, want b/one", got)
	}
	if _, ok := nss.Lister().Get("", "b"); !ok {
		t.Error("the namespaces informer is not cluster-wide")
	}
}

// TestNamespacesOptions: Namespaces rejects what it cannot mean.
func TestNamespacesOptions(t *testing.T) {
	e := startEnv(t)
	for _, opts := range []informer.Options[CM]{
		{Namespace: "a", Namespaces: []string{"b"}},
		{Namespaces: []string{"a", ""}},
	} {
		if _, err := informer.New(e.writer, opts); err == nil {
			t.Errorf("New(%+v) = nil error", opts)
		}
	}
}
