package objects_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/internalversion"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/objwatch/objwatch/server/auth"
	"github.com/objwatch/objwatch/server/objects"
	"github.com/objwatch/objwatch/server/registry"
	"github.com/objwatch/objwatch/storage/etcd/etcdtest"
)

// recorder records what the hooks see, in order.
type recorder struct {
	mu      sync.Mutex
	calls   []string // "authorize get", "admit create", "written update"
	writes  []objects.Write
	refuse  map[string]error // by verb: Authorize refuses
	deny    error            // Admit refuses every write
	undone  int
	lastReq *objects.Request
}

func (r *recorder) hooks() objects.Hooks {
	return objects.Hooks{
		Authorize: func(ctx context.Context, req *objects.Request) error {
			r.mu.Lock()
			defer r.mu.Unlock()
			r.calls = append(r.calls, "authorize "+req.Verb)
			r.lastReq = req
			return r.refuse[req.Verb]
		},
		Admit: []func(context.Context, *objects.Request, *unstructured.Unstructured, *unstructured.Unstructured) (func(), error){
			func(ctx context.Context, req *objects.Request, obj, old *unstructured.Unstructured) (func(), error) {
				r.mu.Lock()
				defer r.mu.Unlock()
				r.calls = append(r.calls, "admit "+req.Verb)
				if r.deny != nil {
					return nil, r.deny
				}
				return func() { r.mu.Lock(); r.undone++; r.mu.Unlock() }, nil
			},
		},
		Written: []func(context.Context, objects.Write){
			func(ctx context.Context, w objects.Write) {
				r.mu.Lock()
				defer r.mu.Unlock()
				r.calls = append(r.calls, "written "+w.Request.Verb)
				r.writes = append(r.writes, w)
			},
		},
	}
}

func (r *recorder) take() (calls []string, writes []objects.Write) {
	r.mu.Lock()
	defer r.mu.Unlock()
	calls, writes = r.calls, r.writes
	r.calls, r.writes = nil, nil
	return calls, writes
}

func newService(t *testing.T, h objects.Hooks) (*objects.Service, *registry.Resource) {
	t.Helper()
	reg := registry.New()
	s, err := objects.New(objects.Config{Storage: etcdtest.Start(t), Registry: reg, Hooks: h, Verify: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	res, ok := reg.Get(schema.GroupVersionResource{Version: "v1", Resource: "configmaps"})
	if !ok {
		t.Fatal("configmaps not served")
	}
	return s, res
}

func configMap(name string, data map[string]any) *unstructured.Unstructured {
	u := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "v1", "kind": "ConfigMap", "data": data}}
	u.SetNamespace("ns")
	u.SetName(name)
	return u
}

func setData(k, v string) objects.Mutation {
	return func(cur *unstructured.Unstructured) (*unstructured.Unstructured, error) {
		unstructured.SetNestedField(cur.Object, v, "data", k)
		cur.SetResourceVersion("")
		return cur, nil
	}
}

// TestHooksSeeEveryWrite checks the named places: Authorize first in every
// method, Admit before every write (dry runs included), Written after every
// successful write only, with the stored old and new objects.
func TestHooksSeeEveryWrite(t *testing.T) {
	rec := &recorder{}
	s, res := newService(t, rec.hooks())
	ctx := context.Background()
	user := &auth.User{Name: "alice", Groups: []string{"dev"}}
	req := func(verb, name string) *objects.Request {
		return &objects.Request{User: user, Verb: verb, Resource: res, Namespace: "ns", Name: name}
	}

	created, err := s.Create(ctx, req("create", ""), configMap("a", map[string]any{"k": "1"}), objects.WriteOptions{})
	if err != nil {
		t.Fatal(err)
	}
	calls, writes := rec.take()
	if want := []string{"authorize create", "admit create", "written create"}; !slices.Equal(calls, want) {
		t.Fatalf("create: hooks %q, want %q", calls, want)
	}
	if w := writes[0]; w.Old != nil || w.New == nil || w.New.GetResourceVersion() != created.Object.GetResourceVersion() || w.Revision == 0 {
		t.Fatalf("create: Written(old %v, new rv %v, rev %d), want old nil and the stored object", w.Old, w.New.GetResourceVersion(), w.Revision)
	}
	if rec.lastReq.User != user {
		t.Fatalf("Authorize saw user %v, want %v", rec.lastReq.User, user)
	}

	// A dry run is admitted but never written.
	if _, err := s.Update(ctx, req("update", "a"), objects.WriteOptions{DryRun: true}, setData("k", "dry")); err != nil {
		t.Fatal(err)
	}
	if calls, _ := rec.take(); !slices.Equal(calls, []string{"authorize update", "admit update"}) {
		t.Fatalf("dry-run update: hooks %q", calls)
	}

	// An update that changes nothing writes nothing.
	if _, err := s.Update(ctx, req("update", "a"), objects.WriteOptions{}, setData("k", "1")); err != nil {
		t.Fatal(err)
	}
	if calls, _ := rec.take(); slices.Contains(calls, "written update") {
		t.Fatalf("no-op update reached Written: %q", calls)
	}

	updated, err := s.Update(ctx, req("patch", "a"), objects.WriteOptions{}, setData("k", "2"))
	if err != nil {
		t.Fatal(err)
	}
	_, writes = rec.take()
	if len(writes) != 1 {
		t.Fatalf("update: %d writes seen, want 1", len(writes))
	}
	if w := writes[0]; w.Old.GetResourceVersion() != created.Object.GetResourceVersion() || w.New.GetResourceVersion() != updated.Object.GetResourceVersion() ||
		w.Old.Object["data"].(map[string]any)["k"] != "1" || w.New.Object["data"].(map[string]any)["k"] != "2" {
		t.Fatalf("update: Written old %v new %v, want the stored states before and after", w.Old.Object, w.New.Object)
	}

	// A delete of an object with a finalizer marks it; removing the
	// finalizer completes the deletion (New nil).
	if _, err := s.Update(ctx, req("update", "a"), objects.WriteOptions{}, func(cur *unstructured.Unstructured) (*unstructured.Unstructured, error) {
		cur.SetFinalizers([]string{"example.com/hold"})
		cur.SetResourceVersion("")
		return cur, nil
	}); err != nil {
		t.Fatal(err)
	}
	rec.take()
	marked, err := s.Delete(ctx, req("delete", "a"), &metav1.DeleteOptions{})
	if err != nil || marked.Deleted {
		t.Fatalf("delete with a finalizer = deleted %v, %v; want marked", marked.Deleted, err)
	}
	_, writes = rec.take()
	if w := writes[0]; w.Old.GetDeletionTimestamp() != nil || w.New.GetDeletionTimestamp() == nil {
		t.Fatalf("delete mark: Written old deletionTimestamp %v, new %v", w.Old.GetDeletionTimestamp(), w.New.GetDeletionTimestamp())
	}
	if _, err := s.Update(ctx, req("update", "a"), objects.WriteOptions{}, func(cur *unstructured.Unstructured) (*unstructured.Unstructured, error) {
		cur.SetFinalizers(nil)
		cur.SetResourceVersion("")
		return cur, nil
	}); err != nil {
		t.Fatal(err)
	}
	_, writes = rec.take()
	if w := writes[0]; w.New != nil || w.Old == nil || w.Old.GetName() != "a" {
		t.Fatalf("finalizer removed: Written old %v new %v, want the deletion (new nil)", w.Old, w.New)
	}
	if _, err := s.Get(ctx, req("get", "a"), nil); !apierrors.IsNotFound(err) {
		t.Fatalf("Get after the last finalizer went = %v, want NotFound", err)
	}

	// A plain delete: New is nil.
	if _, err := s.Create(ctx, req("create", ""), configMap("b", nil), objects.WriteOptions{}); err != nil {
		t.Fatal(err)
	}
	rec.take()
	if out, err := s.Delete(ctx, req("delete", "b"), &metav1.DeleteOptions{}); err != nil || !out.Deleted {
		t.Fatalf("delete = %v, %v", out.Deleted, err)
	}
	if calls, writes := rec.take(); !slices.Equal(calls, []string{"authorize delete", "written delete"}) || writes[0].New != nil {
		t.Fatalf("delete: hooks %q", calls)
	}
}

// TestAuthorizeRefuses checks that a refusal stops every method before it
// reads or writes anything.
func TestAuthorizeRefuses(t *testing.T) {
	forbidden := apierrors.NewForbidden(schema.GroupResource{Resource: "configmaps"}, "", errors.New("no"))
	rec := &recorder{refuse: map[string]error{}}
	s, res := newService(t, rec.hooks())
	ctx := context.Background()
	req := func(verb, name string) *objects.Request {
		return &objects.Request{Verb: verb, Resource: res, Namespace: "ns", Name: name}
	}
	if _, err := s.Create(ctx, req("create", ""), configMap("a", nil), objects.WriteOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, verb := range []string{"create", "get", "list", "watch", "update", "delete", "deletecollection"} {
		rec.refuse[verb] = forbidden
	}
	rec.take()
	checks := map[string]error{}
	_, checks["create"] = s.Create(ctx, req("create", ""), configMap("b", nil), objects.WriteOptions{})
	_, checks["get"] = s.Get(ctx, req("get", "a"), nil)
	_, checks["list"] = s.List(ctx, req("list", ""), &internalversion.ListOptions{})
	_, checks["watch"] = s.Watch(ctx, req("watch", ""), objects.WatchOptions{List: &internalversion.ListOptions{}, Timeout: 1})
	_, checks["update"] = s.Update(ctx, req("update", "a"), objects.WriteOptions{}, setData("k", "x"))
	_, checks["delete"] = s.Delete(ctx, req("delete", "a"), &metav1.DeleteOptions{})
	checks["deletecollection"] = s.DeleteCollection(ctx, req("deletecollection", ""), &internalversion.ListOptions{}, &metav1.DeleteOptions{})
	for verb, err := range checks {
		if !apierrors.IsForbidden(err) {
			t.Errorf("%s = %v, want the Authorize refusal", verb, err)
		}
	}
	if calls, _ := rec.take(); slices.ContainsFunc(calls, func(c string) bool { return !strings.HasPrefix(c, "authorize ") }) {
		t.Errorf("hooks after refusals: %q, want only Authorize", calls)
	}
	clear(rec.refuse)
	obj, err := s.Get(ctx, req("get", "a"), nil)
	if err != nil || obj.Object["data"] != nil {
		t.Fatalf("after refused writes: %v, %v; want the object unchanged", obj, err)
	}
	if _, err := s.Get(ctx, req("get", "b"), nil); !apierrors.IsNotFound(err) {
		t.Fatalf("refused create stored b: %v", err)
	}
}

// TestAdmitRefusesAndUndoes checks that a refusal from Admit stores
// nothing, and that what Admit took is undone when the write then fails.
func TestAdmitRefusesAndUndoes(t *testing.T) {
	rec := &recorder{}
	s, res := newService(t, rec.hooks())
	ctx := context.Background()
	req := &objects.Request{Verb: "create", Resource: res, Namespace: "ns"}
	if _, err := s.Create(ctx, req, configMap("a", nil), objects.WriteOptions{}); err != nil {
		t.Fatal(err)
	}
	// The same name again: admitted, then refused by etcd; undo runs.
	if _, err := s.Create(ctx, req, configMap("a", nil), objects.WriteOptions{}); !apierrors.IsAlreadyExists(err) {
		t.Fatalf("second create = %v, want AlreadyExists", err)
	}
	if rec.undone != 1 {
		t.Fatalf("undo ran %d times after a failed write, want 1", rec.undone)
	}
	rec.deny = apierrors.NewForbidden(schema.GroupResource{Resource: "configmaps"}, "c", errors.New("denied"))
	if _, err := s.Create(ctx, req, configMap("c", nil), objects.WriteOptions{}); !apierrors.IsForbidden(err) {
		t.Fatalf("create refused by Admit = %v, want its error", err)
	}
	if _, err := s.Get(ctx, &objects.Request{Verb: "get", Resource: res, Namespace: "ns", Name: "c"}, nil); !apierrors.IsNotFound(err) {
		t.Fatalf("a create Admit refused was stored: %v", err)
	}
	if _, writes := rec.take(); len(writes) != 1 {
		t.Fatalf("Written saw %d writes, want only the first create", len(writes))
	}
}

// TestServicesShareNothing checks that two services in one process keep
// their own counters.
func TestServicesShareNothing(t *testing.T) {
	a, res := newService(t, objects.Hooks{})
	b, _ := newService(t, objects.Hooks{})
	ctx := context.Background()
	req := &objects.Request{Verb: "create", Resource: res, Namespace: "ns"}
	if _, err := a.Create(ctx, req, configMap("x", nil), objects.WriteOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := a.Caches().For(res).WaitFor(ctx, 0); err != nil {
		t.Fatal(err)
	}
	up := &objects.Request{Verb: "update", Resource: res, Namespace: "ns", Name: "x"}
	for i := range 3 {
		if _, err := a.Update(ctx, up, objects.WriteOptions{}, setData("n", string(rune('0'+i)))); err != nil {
			t.Fatal(err)
		}
	}
	if got := a.Counts().GuessesUsed; got == 0 {
		t.Fatalf("service a: %d update guesses, want some", got)
	}
	if got := b.Counts(); got != (objects.Counts{}) {
		t.Fatalf("service b counted %+v for a's updates", got)
	}
}
