package e2e_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/objwatch/objwatch/testenv"
)

// helmPath finds the helm binary: on PATH or in $(go env GOPATH)/bin.
func helmPath(t *testing.T) string {
	if p, err := exec.LookPath("helm"); err == nil {
		return p
	}
	gopath := os.Getenv("GOPATH")
	if gopath == "" {
		if out, err := exec.Command("go", "env", "GOPATH").Output(); err == nil {
			gopath = strings.TrimSpace(string(out))
		}
	}
	if gopath != "" {
		p := filepath.Join(gopath, "bin", "helm")
		if _, err := os.Stat(p); err == nil {
			return p
		}
	}
	t.Skip("helm not found on PATH or in $(go env GOPATH)/bin; install Helm 4 with: go install helm.sh/helm/v4/cmd/helm@v4.3.1")
	return ""
}

var gadgetGVR = schema.GroupVersionResource{Group: "helm.objwatch.io", Version: "v1", Resource: "gadgets"}

// TestHelm: Helm 4 (server-side apply by default) installs, upgrades,
// rolls back and uninstalls a chart of ConfigMaps, a Secret, a CRD and
// one of its objects.
func TestHelm(t *testing.T) {
	helm := helmPath(t)
	env := testenv.Start(t)
	ctx := t.Context()
	cs := typedClient(t, env)
	dc := dynamicClient(t, env)
	home := t.TempDir()
	run := func(args ...string) string {
		t.Helper()
		cctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(cctx, helm, append(args, "--kubeconfig", env.Kubeconfig, "--namespace", "default")...)
		cmd.Env = append(os.Environ(), "HELM_CACHE_HOME="+filepath.Join(home, "cache"), "HELM_CONFIG_HOME="+filepath.Join(home, "config"), "HELM_DATA_HOME="+filepath.Join(home, "data"))
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("helm %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return string(out)
	}
	chart := filepath.Join("testdata", "helmchart")
	cm := func(name string) map[string]string {
		t.Helper()
		c, err := cs.CoreV1().ConfigMaps("default").Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatalf("get %s: %v", name, err)
		}
		return c.Data
	}
	gadgetReplicas := func() int64 {
		t.Helper()
		g, err := dc.Resource(gadgetGVR).Namespace("default").Get(ctx, "r1-gadget", metav1.GetOptions{})
		if err != nil {
			t.Fatalf("get gadget: %v", err)
		}
		n, _, _ := unstructuredInt(g.Object, "spec", "replicas")
		return n
	}

	run("install", "r1", chart, "--wait", "--timeout", "60s")
	if d := cm("r1-config"); d["greeting"] != "hello" {
		t.Errorf("after install: %v", d)
	}
	if s, err := cs.CoreV1().Secrets("default").Get(ctx, "r1-secret", metav1.GetOptions{}); err != nil || string(s.Data["password"]) != "hello" {
		t.Errorf("secret after install: %v %v", s, err)
	}
	if n := gadgetReplicas(); n != 1 {
		t.Errorf("gadget replicas %d after install", n)
	}

	run("upgrade", "r1", chart, "--set", "greeting=bonjour,replicas=3,extra=true", "--wait", "--timeout", "60s")
	if d := cm("r1-config"); d["greeting"] != "bonjour" {
		t.Errorf("after upgrade: %v", d)
	}
	if d := cm("r1-second"); d["revision"] != "2" {
		t.Errorf("revision after upgrade: %v", d)
	}
	cm("r1-extra")
	if n := gadgetReplicas(); n != 3 {
		t.Errorf("gadget replicas %d after upgrade", n)
	}

	run("rollback", "r1", "1", "--wait", "--timeout", "60s")
	if d := cm("r1-config"); d["greeting"] != "hello" {
		t.Errorf("after rollback: %v", d)
	}
	if _, err := cs.CoreV1().ConfigMaps("default").Get(ctx, "r1-extra", metav1.GetOptions{}); err == nil {
		t.Errorf("r1-extra kept after the rollback")
	}
	if n := gadgetReplicas(); n != 1 {
		t.Errorf("gadget replicas %d after rollback", n)
	}
	if out := run("history", "r1"); !strings.Contains(out, "Rollback to 1") {
		t.Errorf("history:\n%s", out)
	}

	run("uninstall", "r1", "--wait", "--timeout", "60s")
	for _, name := range []string{"r1-config", "r1-second"} {
		if _, err := cs.CoreV1().ConfigMaps("default").Get(ctx, name, metav1.GetOptions{}); err == nil {
			t.Errorf("%s kept after uninstall", name)
		}
	}
	if _, err := dc.Resource(gadgetGVR).Namespace("default").Get(ctx, "r1-gadget", metav1.GetOptions{}); err == nil {
		t.Errorf("gadget kept after uninstall")
	}
}

func unstructuredInt(obj map[string]any, path ...string) (int64, bool, error) {
	var cur any = obj
	for _, p := range path {
		m, ok := cur.(map[string]any)
		if !ok {
			return 0, false, nil
		}
		cur = m[p]
	}
	switch v := cur.(type) {
	case int64:
		return v, true, nil
	case float64:
		return int64(v), true, nil
	}
	return 0, false, nil
}

// TestDynamicApply: client-go's dynamic client Apply and ApplyStatus
// create and change a custom resource, each manager owning what it
// applied, and a conflicting apply is a 409 until forced.
func TestDynamicApply(t *testing.T) {
	env := testenv.Start(t)
	ctx := t.Context()
	createWidgetCRD(ctx, t, env)
	wc := dynamicClient(t, env).Resource(widgetGVR).Namespace("default")
	w := widget("applied", map[string]any{"size": int64(1)})
	out, err := wc.Apply(ctx, "applied", w, metav1.ApplyOptions{FieldManager: "dyn"})
	if err != nil {
		t.Fatalf("Apply create: %v", err)
	}
	if n, _, _ := unstructuredInt(out.Object, "spec", "size"); n != 1 || len(out.GetManagedFields()) != 1 || out.GetManagedFields()[0].Manager != "dyn" {
		t.Errorf("Apply create: %v", out.Object)
	}
	st := widget("applied", nil)
	delete(st.Object, "spec")
	st.Object["status"] = map[string]any{"phase": "Ready"}
	out, err = wc.ApplyStatus(ctx, "applied", st, metav1.ApplyOptions{FieldManager: "ctrl"})
	if err != nil {
		t.Fatalf("ApplyStatus: %v", err)
	}
	var statusEntry bool
	for _, e := range out.GetManagedFields() {
		statusEntry = statusEntry || (e.Manager == "ctrl" && e.Subresource == "status")
	}
	if !statusEntry || out.Object["status"] == nil {
		t.Errorf("ApplyStatus: %v", out.Object)
	}
	other := widget("applied", map[string]any{"size": int64(2)})
	if _, err := wc.Apply(ctx, "applied", other, metav1.ApplyOptions{FieldManager: "other"}); err == nil || !strings.Contains(err.Error(), `conflict with "dyn"`) {
		t.Fatalf("conflicting Apply = %v, want a conflict with dyn", err)
	}
	out, err = wc.Apply(ctx, "applied", other, metav1.ApplyOptions{FieldManager: "other", Force: true})
	if err != nil {
		t.Fatalf("forced Apply: %v", err)
	}
	if n, _, _ := unstructuredInt(out.Object, "spec", "size"); n != 2 {
		t.Errorf("forced Apply: %v", out.Object)
	}
}
