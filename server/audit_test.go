package server_test

import (
	"bufio"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	auditv1 "k8s.io/apiserver/pkg/apis/audit/v1"

	"github.com/objwatch/objwatch/server"
	"github.com/objwatch/objwatch/server/audit"
	"github.com/objwatch/objwatch/testenv"
)

// startAudited starts a server whose audit log is at the returned path.
func startAudited(t *testing.T, policy string, opts ...testenv.Option) (*testenv.Env, string) {
	t.Helper()
	dir := t.TempDir()
	path := filepath.Join(dir, "audit.log")
	pf := ""
	if policy != "" {
		pf = filepath.Join(dir, "policy.yaml")
		if err := os.WriteFile(pf, []byte(policy), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	opts = append(opts, testenv.WithServerConfig(func(c *server.Config) {
		c.Audit = audit.Config{Path: path, PolicyFile: pf, CheckpointInterval: 50 * time.Millisecond}
	}))
	return testenv.Start(t, opts...), path
}

func readEvents(t *testing.T, path string) []auditv1.Event {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var evs []auditv1.Event
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 16<<20)
	for sc.Scan() {
		var ev auditv1.Event
		if err := json.Unmarshal(sc.Bytes(), &ev); err != nil {
			t.Fatalf("record %d: %v", len(evs)+1, err)
		}
		evs = append(evs, ev)
	}
	return evs
}

// completed returns the ResponseComplete records of verb on configmap name.
func completed(evs []auditv1.Event, verb, name string) []auditv1.Event {
	var out []auditv1.Event
	for _, ev := range evs {
		if ev.Stage == auditv1.StageResponseComplete && ev.Verb == verb && ev.ObjectRef != nil &&
			ev.ObjectRef.Resource == "configmaps" && ev.ObjectRef.Name == name {
			out = append(out, ev)
		}
	}
	return out
}

// TestAuditRecordsDiffs: every mutation's record carries the change from
// the stored old object to the new one, and is on disk when the response
// arrives (no waiting).
func TestAuditRecordsDiffs(t *testing.T) {
	env, path := startAudited(t, "")
	a := newAPI(t, env)
	mustCode(t, "create", a.json("POST", cms, cm("a", "")), http.StatusCreated)
	get := a.json("GET", cms+"/a", "")
	upd := get.object()
	upd["data"] = map[string]any{"k": "v2"}
	b, _ := json.Marshal(upd)
	r := a.json("PUT", cms+"/a", string(b))
	mustCode(t, "update", r, http.StatusOK)
	mustCode(t, "no-op update", a.json("PUT", cms+"/a", string(r.body)), http.StatusOK)
	mustCode(t, "merge patch", a.do("PATCH", cms+"/a", "application/merge-patch+json", []byte(`{"data":{"m":"1"}}`)), http.StatusOK)
	mustCode(t, "json patch", a.do("PATCH", cms+"/a", "application/json-patch+json", []byte(`[{"op":"remove","path":"/data/m"}]`)), http.StatusOK)
	mustCode(t, "strategic patch", a.do("PATCH", cms+"/a", "application/strategic-merge-patch+json", []byte(`{"metadata":{"labels":{"x":"y"}}}`)), http.StatusOK)
	mustCode(t, "delete", a.json("DELETE", cms+"/a", ""), http.StatusOK)

	evs := readEvents(t, path)
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
	c := completed(evs, "create", "a")
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
	u := completed(evs, "update", "a")
	if len(u) != 2 {
		t.Fatalf("%d update records, want 2", len(u))
	}
	check(u[0], `[{"op":"replace","path":"/data/k","value":"v2"}]`, `["data.k"]`)
	check(u[1], `[]`, `[]`)
	if u[1].Annotations[audit.ResourceVersionAnnotation] != u[0].Annotations[audit.ResourceVersionAnnotation] {
		t.Errorf("no-op update's resourceVersion %s, want the update's %s", u[1].Annotations[audit.ResourceVersionAnnotation], u[0].Annotations[audit.ResourceVersionAnnotation])
	}
	ps := completed(evs, "patch", "a")
	if len(ps) != 3 {
		t.Fatalf("%d patch records, want 3", len(ps))
	}
	check(ps[0], `[{"op":"add","path":"/data/m","value":"1"}]`, `["data.m"]`)
	check(ps[1], `[{"op":"remove","path":"/data/m"}]`, `["data.m"]`)
	check(ps[2], `[{"op":"add","path":"/metadata/labels","value":{"x":"y"}}]`, `["metadata.labels"]`)
	d := completed(evs, "delete", "a")
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
