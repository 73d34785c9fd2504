package cli

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/spf13/cobra"

	"github.com/objwatch/objwatch/server"
	"github.com/objwatch/objwatch/server/audit"
	"github.com/objwatch/objwatch/testenv"
)

func runCommand(t *testing.T, cmd *cobra.Command, args ...string) (string, error) {
	t.Helper()
	var out bytes.Buffer
	cmd.SetOut(&out)
	cmd.SetErr(&out)
	cmd.SetArgs(args)
	err := cmd.ExecuteContext(context.Background())
	return out.String(), err
}

// TestHistoryAndAuditCommands: objwatch history shows a ConfigMap's edits
// with their authors; audit query prints them with their patches; audit
// verify passes on the log, with the checkpoint, and fails on an edit.
func TestHistoryAndAuditCommands(t *testing.T) {
	path := filepath.Join(t.TempDir(), "audit.log")
	etcdURL := testenv.StartEtcd(t) // outlives the server, for its last checkpoint
	env := testenv.Start(t, testenv.WithEtcd(etcdURL), testenv.WithServerConfig(func(c *server.Config) {
		c.Audit = audit.Config{Path: path}
	}))
	e := &whyEnv{t: t, env: env, c: env.HTTPClient()}
	cms := "/api/v1/namespaces/default/configmaps"
	e.do("POST", cms, "application/json", `{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"app"},"data":{"mode":"slow"}}`)
	e.do("PATCH", cms+"/app", "application/merge-patch+json", `{"data":{"mode":"fast"}}`)
	e.do("PATCH", cms+"/app", "application/json-patch+json", `[{"op":"add","path":"/data/extra","value":"1"}]`)

	out, err := runCommand(t, newHistoryCommand(), "configmaps", "app", "--kubeconfig", env.Kubeconfig, "-n", "default")
	if err != nil {
		t.Fatalf("history: %v\n%s", err, out)
	}
	for _, want := range []string{"# configmaps default/app: 3 revisions", " admin create", " admin patch", "~ data.mode: slow → fast", "+ data.extra: 1"} {
		if !strings.Contains(out, want) {
			t.Errorf("history output lacks %q:\n%s", want, out)
		}
	}
	out, err = runCommand(t, newAuditCommand(), "query", path, "--name", "app", "--verb", "patch")
	if err != nil {
		t.Fatalf("audit query: %v", err)
	}
	if !strings.Contains(out, "admin patch configmaps default/app rv=") || !strings.Contains(out, `~ /data/mode: fast`) || !strings.Contains(out, `+ /data/extra: 1`) || strings.Contains(out, " create ") {
		t.Errorf("audit query output:\n%s", out)
	}
	env.Stop() // the last checkpoint
	out, err = runCommand(t, newAuditCommand(), "verify", path, "--etcd-servers", etcdURL)
	if err != nil || !strings.Contains(out, "ok: ") || !strings.Contains(out, "checkpoint: seq") {
		t.Fatalf("audit verify = %v\n%s", err, out)
	}
	b, _ := os.ReadFile(path)
	cut := bytes.LastIndexByte(b[:len(b)-1], '\n') + 1
	os.WriteFile(path, b[:cut], 0o600)
	if out, err = runCommand(t, newAuditCommand(), "verify", path, "--etcd-servers", etcdURL); err == nil || !strings.Contains(err.Error(), "truncated") {
		t.Errorf("audit verify of a log without its last record = %v\n%s", err, out)
	}
	i := bytes.Index(b, []byte(`"verb":"patch"`))
	os.WriteFile(path, append(append(b[:i:i], `"verb":"update"`...), b[i+len(`"verb":"patch"`):]...), 0o600)
	if out, err = runCommand(t, newAuditCommand(), "verify", path); err == nil || !strings.Contains(err.Error(), "edited") {
		t.Errorf("audit verify of an edited log = %v\n%s", err, out)
	}
}
