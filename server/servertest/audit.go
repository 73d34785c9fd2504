package servertest

import (
	"bufio"
	"encoding/json"

	"os"
	"path/filepath"

	"testing"
	"time"

	auditv1 "k8s.io/apiserver/pkg/apis/audit/v1"

	"github.com/objwatch/objwatch/server"
	"github.com/objwatch/objwatch/server/audit"

	"github.com/objwatch/objwatch/testenv"
)

// StartAudited starts a server whose audit log is at the returned path.
func StartAudited(t *testing.T, policy string, opts ...testenv.Option) (*testenv.Env, string) {
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

func ReadEvents(t *testing.T, path string) []auditv1.Event {
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

// Completed returns the ResponseComplete records of verb on configmap name.
func Completed(evs []auditv1.Event, verb, name string) []auditv1.Event {
	var out []auditv1.Event
	for _, ev := range evs {
		if ev.Stage == auditv1.StageResponseComplete && ev.Verb == verb && ev.ObjectRef != nil &&
			ev.ObjectRef.Resource == "configmaps" && ev.ObjectRef.Name == name {
			out = append(out, ev)
		}
	}
	return out
}

const RoleEditor = `{"apiVersion":"rbac.authorization.k8s.io/v1","kind":"ClusterRole","metadata":{"name":"cm-editor"},
	"rules":[{"apiGroups":[""],"resources":["configmaps"],"verbs":["get","list","watch","create","update","patch","delete"]}]}`

func BindEditor(name string) string {
	return `{"apiVersion":"rbac.authorization.k8s.io/v1","kind":"ClusterRoleBinding","metadata":{"name":"` + name + `-edits"},
		"roleRef":{"apiGroup":"rbac.authorization.k8s.io","kind":"ClusterRole","name":"cm-editor"},
		"subjects":[{"kind":"User","name":"` + name + `"}]}`
}
