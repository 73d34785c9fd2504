package audit_test

import (
	"encoding/json"
	"fmt"
	"net/http"

	"slices"
	"strings"
	"testing"
	"time"

	auditv1 "k8s.io/apiserver/pkg/apis/audit/v1"

	"github.com/objwatch/objwatch/server/audit"
	"github.com/objwatch/objwatch/server/servertest"
	"github.com/objwatch/objwatch/storage/etcd"
)

// TestAuditRecordsDiffs: every mutation's record carries the change from
// the stored old object to the new one, and is on disk when the response
// arrives (no waiting).
func TestAuditRecordsDiffs(t *testing.T) {
	env, path := servertest.StartAudited(t, "")
	a := servertest.NewAPI(t, env)
	servertest.MustCode(t, "create", a.JSON("POST", servertest.CMs, servertest.CM("a", "")), http.StatusCreated)
	get := a.JSON("GET", servertest.CMs+"/a", "")
	upd := get.Object()
	upd["data"] = map[string]any{"k": "v2"}
	b, _ := json.Marshal(upd)
	r := a.JSON("PUT", servertest.CMs+"/a", string(b))
	servertest.MustCode(t, "update", r, http.StatusOK)
	servertest.MustCode(t, "no-op update", a.JSON("PUT", servertest.CMs+"/a", string(r.Body)), http.StatusOK)
	servertest.MustCode(t, "merge patch", a.Do("PATCH", servertest.CMs+"/a", "application/merge-patch+json", []byte(`{"data":{"m":"1"}}`)), http.StatusOK)
	servertest.MustCode(t, "json patch", a.Do("PATCH", servertest.CMs+"/a", "application/json-patch+json", []byte(`[{"op":"remove","path":"/data/m"}]`)), http.StatusOK)
	servertest.MustCode(t, "strategic patch", a.Do("PATCH", servertest.CMs+"/a", "application/strategic-merge-patch+json", []byte(`{"metadata":{"labels":{"x":"y"}}}`)), http.StatusOK)
	servertest.MustCode(t, "delete", a.JSON("DELETE", servertest.CMs+"/a", ""), http.StatusOK)

	evs := servertest.ReadEvents(t, path)
	type want struct {
		verb  string
		n     int
		patch string
		paths string
	}
	check := func(ev auditv1.Event, patch, paths string) {
		t.Helper()
		if got := ev.Annotations[audit.PatchAnnotation]; patch != "" && got != patch {
			t.Errorf("%s patch = %s, want %s", ev.Verb, got, patch)
		}
		if got := ev.Annotations[audit.ChangedPathsAnnotation]; got != paths {
			t.Errorf("%s changed paths = %s, want %s", ev.Verb, got, paths)
		}
		if ev.User.Username != "admin" || ev.Level != auditv1.LevelMetadata || ev.ResponseStatus == nil {
			t.Errorf("%s record: user %q level %q status %v", ev.Verb, ev.User.Username, ev.Level, ev.ResponseStatus)
		}
		if ev.RequestObject != nil || ev.ResponseObject != nil {
			t.Errorf("%s record at Metadata level has bodies", ev.Verb)
		}
	}
	c := servertest.Completed(evs, "create", "a")
	if len(c) != 1 {
		t.Fatalf("%d create records, want 1", len(c))
	}
	var p []map[string]any
	json.Unmarshal([]byte(c[0].Annotations[audit.PatchAnnotation]), &p)
	if len(p) != 1 || p[0]["op"] != "add" || p[0]["path"] != "" || p[0]["value"].(map[string]any)["data"] == nil {
		t.Errorf("create patch = %s, want one add of the whole object", c[0].Annotations[audit.PatchAnnotation])
	}
	if md := p[0]["value"].(map[string]any)["metadata"].(map[string]any); md["resourceVersion"] != nil || md["managedFields"] != nil {
		t.Errorf("create patch has noise: %v", md)
	}
	check(c[0], "", `["apiVersion","data","kind","metadata"]`)
	u := servertest.Completed(evs, "update", "a")
	if len(u) != 2 {
		t.Fatalf("%d update records, want 2", len(u))
	}
	check(u[0], `[{"op":"replace","path":"/data/k","value":"v2"}]`, `["data.k"]`)
	check(u[1], `[]`, `[]`)
	if u[1].Annotations[audit.ResourceVersionAnnotation] != u[0].Annotations[audit.ResourceVersionAnnotation] {
		t.Errorf("no-op update's resourceVersion %s, want the update's %s", u[1].Annotations[audit.ResourceVersionAnnotation], u[0].Annotations[audit.ResourceVersionAnnotation])
	}
	ps := servertest.Completed(evs, "patch", "a")
	if len(ps) != 3 {
		t.Fatalf("%d patch records, want 3", len(ps))
	}
	check(ps[0], `[{"op":"add","path":"/data/m","value":"1"}]`, `["data.m"]`)
	check(ps[1], `[{"op":"remove","path":"/data/m"}]`, `["data.m"]`)
	check(ps[2], `[{"op":"add","path":"/metadata/labels","value":{"x":"y"}}]`, `["metadata.labels"]`)
	d := servertest.Completed(evs, "delete", "a")
	if len(d) != 1 {
		t.Fatalf("%d delete records, want 1", len(d))
	}
	check(d[0], `[{"op":"remove","path":""}]`, `["apiVersion","data","kind","metadata"]`)
	// Every request has its RequestReceived stage too.
	n := 0
	for _, ev := range evs {
		if ev.Stage == auditv1.StageRequestReceived {
			n++
		}
	}
	if n < 8 {
		t.Errorf("%d RequestReceived records, want at least 8", n)
	}
	if _, err := audit.Verify([]string{path}, nil); err != nil {
		t.Errorf("Verify = %v", err)
	}
}

// TestHistoryNamesAuthors: the history subresource lists a ConfigMap's
// revisions oldest first with diffs and, from the audit log, who made each.
func TestHistoryNamesAuthors(t *testing.T) {
	env, path := servertest.StartAudited(t, "")
	admin := servertest.NewAPI(t, env)
	admin.Must("POST", "/apis/rbac.authorization.k8s.io/v1/clusterroles", servertest.RoleEditor)
	admin.Must("POST", "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings", servertest.BindEditor("alice"))
	admin.Must("POST", "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings", servertest.BindEditor("bob"))
	alice, bob, eve := servertest.UserAPI(t, env, "alice"), servertest.UserAPI(t, env, "bob"), servertest.UserAPI(t, env, "eve")
	servertest.Eventually(t, "bindings", func() bool {
		return alice.JSON("GET", servertest.CMs, "").Code == 200 && bob.JSON("GET", servertest.CMs, "").Code == 200
	})
	servertest.MustCode(t, "alice creates", alice.JSON("POST", servertest.CMs, servertest.CM("h", "")), http.StatusCreated)
	// Every record keeps RBAC's reason, as kube-apiserver's do; none for
	// system:masters.
	for _, ev := range servertest.ReadEvents(t, path) {
		if ev.Stage != auditv1.StageResponseComplete || ev.Verb != "create" || (ev.User.Username != "alice" && ev.User.Username != "admin") {
			continue
		}
		want := ""
		if ev.User.Username == "alice" {
			want = `RBAC: allowed by ClusterRoleBinding "alice-edits" of ClusterRole "cm-editor" to User "alice"`
		}
		if got, ok := ev.Annotations["authorization.k8s.io/reason"]; !ok || got != want || ev.Annotations["authorization.k8s.io/decision"] != "allow" {
			t.Errorf("%s's create record: authorization annotations %q, want allow with reason %q", ev.User.Username, ev.Annotations, want)
		}
	}
	servertest.MustCode(t, "bob patches", bob.Do("PATCH", servertest.CMs+"/h", "application/merge-patch+json", []byte(`{"data":{"k":"bob"}}`)), http.StatusOK)
	servertest.MustCode(t, "alice patches", alice.Do("PATCH", servertest.CMs+"/h", "application/merge-patch+json", []byte(`{"data":{"n":"1"}}`)), http.StatusOK)

	if r := eve.JSON("GET", servertest.CMs+"/h/history", ""); r.Code != http.StatusForbidden {
		t.Errorf("eve's history = %d %s, want 403", r.Code, servertest.Truncate(r.Body))
	}
	r := alice.JSON("GET", servertest.CMs+"/h/history", "")
	servertest.MustCode(t, "history", r, http.StatusOK)
	var h struct {
		Complete bool
		Items    []struct {
			ResourceVersion string
			Patch           json.RawMessage
			ChangedPaths    []string
			Author          *audit.Author
		}
	}
	if err := json.Unmarshal(r.Body, &h); err != nil {
		t.Fatal(err)
	}
	if !h.Complete || len(h.Items) != 3 {
		t.Fatalf("history = %s, want 3 revisions from the creation", r.Body)
	}
	want := []struct{ user, verb, paths string }{{"alice", "create", ""}, {"bob", "patch", "data.k"}, {"alice", "patch", "data.n"}}
	for i, w := range want {
		it := h.Items[i]
		if it.Author == nil || it.Author.User != w.user || it.Author.Verb != w.verb {
			t.Errorf("revision %d author = %+v, want %s %s", i, it.Author, w.user, w.verb)
		}
		if w.paths != "" && (len(it.ChangedPaths) != 1 || it.ChangedPaths[0] != w.paths) {
			t.Errorf("revision %d changed paths = %v, want [%s]", i, it.ChangedPaths, w.paths)
		}
	}
}

// TestAuditServerWrites: the garbage collector's deletions are recorded
// as its service account's, with the removal as the diff.
func TestAuditServerWrites(t *testing.T) {
	env, path := servertest.StartAudited(t, "")
	a := servertest.NewAPI(t, env)
	owner := a.JSON("POST", servertest.CMs, servertest.CM("owner", ""))
	servertest.MustCode(t, "owner", owner, http.StatusCreated)
	servertest.MustCode(t, "dependent", a.JSON("POST", servertest.CMs, servertest.CM("dep", `,"ownerReferences":[`+servertest.OwnerRef(t, owner, false)+`]`)), http.StatusCreated)
	servertest.MustCode(t, "delete owner", a.JSON("DELETE", servertest.CMs+"/owner", ""), http.StatusOK)
	eventually5 := func(what string, f func() bool) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for !f() {
			if time.Now().After(deadline) {
				t.Fatalf("%s: not within 10 s", what)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	eventually5("the collector's record", func() bool { return len(servertest.Completed(servertest.ReadEvents(t, path), "delete", "dep")) > 0 })
	ev := servertest.Completed(servertest.ReadEvents(t, path), "delete", "dep")[0]
	if ev.User.Username != "system:serviceaccount:kube-system:generic-garbage-collector" {
		t.Errorf("collector's delete recorded as %q", ev.User.Username)
	}
	if got := ev.Annotations[audit.PatchAnnotation]; got != `[{"op":"remove","path":""}]` {
		t.Errorf("collector's delete patch = %s", got)
	}
}

// TestAuditPolicy: levels per rule and omitStages as Kubernetes evaluates
// them.
func TestAuditPolicy(t *testing.T) {
	policy := `apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: ["RequestReceived"]
rules:
- level: None
  resources: [{group: "", resources: ["configmaps"], resourceNames: ["quiet"]}]
- level: RequestResponse
  resources: [{group: "", resources: ["configmaps"]}]
  omitManagedFields: true
- level: Metadata
`
	env, path := servertest.StartAudited(t, policy)
	a := servertest.NewAPI(t, env)
	servertest.MustCode(t, "create loud", a.JSON("POST", servertest.CMs, servertest.CM("loud", "")), http.StatusCreated)
	servertest.MustCode(t, "get loud", a.JSON("GET", servertest.CMs+"/loud", ""), http.StatusOK)
	servertest.MustCode(t, "create quiet", a.JSON("POST", servertest.CMs, servertest.CM("quiet", "")), http.StatusCreated)
	servertest.MustCode(t, "patch quiet", a.Do("PATCH", servertest.CMs+"/quiet", "application/merge-patch+json", []byte(`{"data":{"a":"b"}}`)), http.StatusOK)
	servertest.MustCode(t, "get ns", a.JSON("GET", "/api/v1/namespaces/default", ""), http.StatusOK)
	// Reads' records go with the next write's fsync.
	servertest.MustCode(t, "create flush", a.JSON("POST", servertest.CMs, servertest.CM("flush", "")), http.StatusCreated)
	evs := servertest.ReadEvents(t, path)
	for _, ev := range evs {
		if ev.Stage == auditv1.StageRequestReceived {
			t.Errorf("a RequestReceived record despite omitStages: %s", ev.RequestURI)
		}
		if ev.ObjectRef != nil && ev.ObjectRef.Name == "quiet" && ev.Verb == "patch" {
			t.Errorf("a record of the None-level patch: %+v", ev)
		}
	}
	c := servertest.Completed(evs, "create", "loud")
	if len(c) != 1 || c[0].Level != auditv1.LevelRequestResponse || c[0].RequestObject == nil || c[0].ResponseObject == nil {
		t.Fatalf("loud create records = %+v, want one at RequestResponse with bodies", c)
	}
	if g := servertest.Completed(evs, "get", "loud"); len(g) != 1 || g[0].ResponseObject == nil || g[0].RequestObject != nil {
		t.Errorf("loud get records = %+v, want one with the response only", g)
	}
	if strings.Contains(string(c[0].ResponseObject.Raw), "managedFields") {
		t.Errorf("response recorded with managedFields despite omitManagedFields")
	}
	found := false
	for _, ev := range evs {
		if ev.ObjectRef != nil && ev.ObjectRef.Resource == "namespaces" && ev.Verb == "get" {
			found = true
			if ev.Level != auditv1.LevelMetadata || ev.ResponseObject != nil {
				t.Errorf("namespace get at %s with response %v, want Metadata", ev.Level, ev.ResponseObject != nil)
			}
		}
	}
	if !found {
		t.Errorf("no record of the namespace get")
	}
}

// TestAuditCheckpoint: the head of the chain reaches etcd, and a log
// rewritten from an earlier record on fails verification against it.
func TestAuditCheckpoint(t *testing.T) {
	env, path := servertest.StartAudited(t, "")
	a := servertest.NewAPI(t, env)
	for i := range 5 {
		servertest.MustCode(t, "create", a.JSON("POST", servertest.CMs, servertest.CM(fmt.Sprintf("c%d", i), "")), http.StatusCreated)
	}
	key := audit.CheckpointKey(path)
	cli, err := etcd.NewClient(etcd.ClientConfig{Endpoints: []string{env.EtcdEndpoint}})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	store, err := etcd.New(cli, nil)
	if err != nil {
		t.Fatal(err)
	}
	var cp audit.Checkpoint
	deadline := time.Now().Add(5 * time.Second)
	for {
		c, err := audit.ReadCheckpoint(t.Context(), store, key)
		if err == nil && c.Seq >= 10 {
			cp = c
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no checkpoint of 10 records within 5 s: %+v %v", c, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if _, err := audit.Verify([]string{path}, &cp); err != nil {
		t.Fatalf("Verify = %v", err)
	}
}

// TestAuditStagesAndImpersonation: a watch records ResponseStarted
// before ResponseComplete; an impersonated request records the sender as
// user and the impersonated user beside it.
func TestAuditStagesAndImpersonation(t *testing.T) {
	env, path := servertest.StartAudited(t, "")
	a := servertest.NewAPI(t, env)
	servertest.MustCode(t, "watch", a.JSON("GET", servertest.CMs+"?watch=1&timeoutSeconds=1", ""), http.StatusOK)
	req, _ := http.NewRequest("POST", env.Config.Host+servertest.CMs, strings.NewReader(servertest.CM("as-alice", "")))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Impersonate-User", "alice")
	resp, err := a.C.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusForbidden || resp.Header.Get("Audit-ID") == "" {
		t.Errorf("create as alice = %d (Audit-ID %q), want 403 with an Audit-ID", resp.StatusCode, resp.Header.Get("Audit-ID"))
	}
	var stages []auditv1.Stage
	var imp *auditv1.Event
	for _, ev := range servertest.ReadEvents(t, path) {
		if ev.Verb == "watch" {
			stages = append(stages, ev.Stage)
		}
		if ev.Verb == "create" && ev.Stage == auditv1.StageResponseComplete {
			imp = &ev
		}
	}
	if want := []auditv1.Stage{auditv1.StageRequestReceived, auditv1.StageResponseStarted, auditv1.StageResponseComplete}; !slices.Equal(stages, want) {
		t.Errorf("watch stages = %v, want %v", stages, want)
	}
	if imp == nil || imp.User.Username != "admin" || imp.ImpersonatedUser == nil || imp.ImpersonatedUser.Username != "alice" ||
		imp.ResponseStatus.Code != 403 || imp.Annotations["authorization.k8s.io/decision"] != "forbid" {
		t.Errorf("impersonated create's record = %+v", imp)
	}
}

// TestAuditUnauthenticated: a request no authenticator recognises is
// recorded as kube-apiserver records it: once, at ResponseStarted, with
// no user and a 401 naming the credentials tried.
func TestAuditUnauthenticated(t *testing.T) {
	env, path := servertest.StartAudited(t, "")
	if r := servertest.TokenAPI(t, env, "not-a-token").JSON("GET", servertest.CMs, ""); r.Code != http.StatusUnauthorized {
		t.Fatalf("bad token = %d, want 401", r.Code)
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		var got []auditv1.Event
		for _, ev := range servertest.ReadEvents(t, path) {
			if ev.ResponseStatus != nil && ev.ResponseStatus.Code == http.StatusUnauthorized {
				got = append(got, ev)
			}
		}
		if len(got) == 1 {
			ev := got[0]
			if ev.Stage != auditv1.StageResponseStarted || ev.User.Username != "" || ev.Verb != "list" ||
				ev.ResponseStatus.Message != "Authentication failed, attempted: bearer" || ev.ObjectRef == nil || ev.ObjectRef.Resource != "configmaps" {
				t.Fatalf("401 record = %+v, want stage ResponseStarted, no user, list configmaps, kube-apiserver's message", ev)
			}
			return
		}
		if len(got) > 1 || time.Now().After(deadline) {
			t.Fatalf("%d records of the 401, want 1", len(got))
		}
		time.Sleep(50 * time.Millisecond)
	}
}
