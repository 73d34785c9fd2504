package cli

import (
	"strings"
	"testing"
	"time"

	"github.com/objwatch/objwatch/testenv"
)

// objwatch history, get --as-of and changes against a server with a
// history store, and what get and changes say to one without.
func TestPastCommands(t *testing.T) {
	env := testenv.Start(t, testenv.WithHistoryStore(), testenv.WithCompaction(100*time.Millisecond))
	e := &whyEnv{t: t, env: env, c: env.HTTPClient()}
	cms := "/api/v1/namespaces/default/configmaps"
	e.do("POST", cms, "application/json", `{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"app","labels":{"tier":"web"}},"data":{"mode":"slow"}}`)
	time.Sleep(20 * time.Millisecond)
	slow := time.Now()
	time.Sleep(20 * time.Millisecond)
	e.do("PATCH", cms+"/app", "application/merge-patch+json", `{"data":{"mode":"fast"}}`)
	e.do("DELETE", cms+"/app", "application/json", "")
	e.do("POST", cms, "application/json", `{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"app"},"data":{"mode":"new"}}`)
	kc := env.Kubeconfig

	out, err := runCommand(t, newHistoryCommand(), "configmaps", "app", "--kubeconfig", kc, "-n", "default")
	if err != nil {
		t.Fatalf("history: %v\n%s", err, out)
	}
	for _, want := range []string{"4 revisions", "admin create (", "admin patch (", "~ data.mode: slow → fast", "admin delete (", " deleted"} {
		if !strings.Contains(out, want) {
			t.Errorf("history lacks %q:\n%s", want, out)
		}
	}
	if n := strings.Count(out, "admin create ("); n != 2 {
		t.Errorf("history shows %d creations, want 2 (the name was used twice):\n%s", n, out)
	}
	if strings.Contains(out, "no history store") {
		t.Errorf("history says there is no history store:\n%s", out)
	}

	out, err = runCommand(t, newGetCommand(), "configmaps", "app", "--kubeconfig", kc, "-n", "default", "--as-of", slow.UTC().Format(time.RFC3339Nano))
	if err != nil || !strings.Contains(out, "mode: slow") {
		t.Errorf("get --as-of a moment after the create: %v\n%s", err, out)
	}
	out, err = runCommand(t, newGetCommand(), "configmaps", "--kubeconfig", kc, "-A", "--as-of", "0s", "-l", "tier=web")
	if err != nil || strings.Contains(out, "app") {
		t.Errorf("list -l tier=web as of now (the labelled app was deleted): %v\n%s", err, out)
	}
	if _, err = runCommand(t, newGetCommand(), "configmaps", "app", "--kubeconfig", kc, "--as-of", "soon"); err == nil || !strings.Contains(err.Error(), "RFC 3339") {
		t.Errorf("get --as-of soon: %v, want the accepted forms named", err)
	}

	out, err = runCommand(t, newChangesCommand(), "--kubeconfig", kc, "-n", "default", "--since", "1h")
	if err != nil {
		t.Fatalf("changes: %v\n%s", err, out)
	}
	for _, want := range []string{"ADDED configmaps/app  admin create", "MODIFIED configmaps/app  admin patch", `~ data.mode: "fast"`, "DELETED configmaps/app  admin delete"} {
		if !strings.Contains(out, want) {
			t.Errorf("changes lacks %q:\n%s", want, out)
		}
	}
	out, err = runCommand(t, newChangesCommand(), "configmaps", "--kubeconfig", kc, "-A", "--since", "1h", "-o", "json")
	if err != nil || !strings.Contains(out, `"kind":"ChangeList"`) {
		t.Errorf("changes -A -o json: %v\n%s", err, out)
	}

	// A server without a history store: said plainly.
	plain := testenv.Start(t)
	for _, c := range [][]string{
		{"get", "configmaps", "x", "--kubeconfig", plain.Kubeconfig, "--as-of", "1h"},
		{"changes", "--kubeconfig", plain.Kubeconfig, "--since", "1h"},
	} {
		cmd := newGetCommand()
		if c[0] == "changes" {
			cmd = newChangesCommand()
		}
		if _, err := runCommand(t, cmd, c[1:]...); err == nil || !strings.Contains(err.Error(), "keeps no history store") {
			t.Errorf("%s against a server without history: %v", c[0], err)
		}
	}
	out, err = runCommand(t, newHistoryCommand(), "configmaps", "kube-root-ca.crt", "--kubeconfig", plain.Kubeconfig, "-n", "default")
	if err == nil && !strings.Contains(out, "no history store") {
		t.Errorf("history from a server without a store does not say so:\n%s", out)
	}
}
