package e2e_test

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/objwatch/objwatch/testenv"
)

// kubectl delete --cascade=orphan|foreground|background against the
// server's garbage collector: kubectl waits for each deletion to finish
// (--wait, a watch of the object), so every command returns only once the
// collector has done its part.
func TestKubectlCascade(t *testing.T) {
	path, err := exec.LookPath("kubectl")
	if err != nil {
		t.Skip("kubectl not on PATH")
	}
	env := testenv.Start(t)
	k := kcNew(t, path, env.Kubeconfig)
	const ns = "cascade-e2e"
	k.ok("create", "namespace", ns)
	dir := t.TempDir()

	// family makes owner <p> and dependents <p>-1 (blocking) and <p>-2.
	family := func(p string) {
		t.Helper()
		k.ok("create", "configmap", p, "-n", ns)
		uid := k.ok("get", "configmap", p, "-n", ns, "-o", "jsonpath={.metadata.uid}")
		var docs []string
		for i, block := range []bool{true, false} {
			docs = append(docs, fmt.Sprintf(`apiVersion: v1
kind: ConfigMap
metadata:
  name: %s-%d
  namespace: %s
  ownerReferences:
  - apiVersion: v1
    kind: ConfigMap
    name: %s
    uid: %s
    blockOwnerDeletion: %v
data:
  k: v
`, p, i+1, ns, p, uid, block))
		}
		f := filepath.Join(dir, p+".yaml")
		if err := os.WriteFile(f, []byte(strings.Join(docs, "---\n")), 0o600); err != nil {
			t.Fatal(err)
		}
		k.ok("apply", "--validate=false", "-f", f)
	}

	family("orphan")
	k.ok("delete", "configmap", "orphan", "-n", ns, "--cascade=orphan", "--timeout=30s")
	for _, d := range []string{"orphan-1", "orphan-2"} {
		if refs := k.ok("get", "configmap", d, "-n", ns, "-o", "jsonpath={.metadata.ownerReferences}"); refs != "" {
			t.Errorf("%s after --cascade=orphan: ownerReferences %s, want none", d, refs)
		}
	}

	family("fg")
	k.ok("delete", "configmap", "fg", "-n", ns, "--cascade=foreground", "--timeout=30s")
	// kubectl returned: the owner is gone, so the blocking dependent went first.
	if _, _, err := k.run("get", "configmap", "fg-1", "-n", ns); err == nil {
		t.Error("fg-1 exists after its owner's foreground deletion finished")
	}
	kcEventually(t, 20*time.Second, func() error {
		if _, _, err := k.run("get", "configmap", "fg-2", "-n", ns); err == nil {
			return fmt.Errorf("fg-2 still exists")
		}
		return nil
	})

	family("bg")
	k.ok("delete", "configmap", "bg", "-n", ns, "--cascade=background", "--timeout=30s")
	kcEventually(t, 20*time.Second, func() error {
		out := k.ok("get", "configmaps", "-n", ns, "-o", "name")
		if strings.Contains(out, "configmap/bg-") {
			return fmt.Errorf("dependents left: %s", out)
		}
		return nil
	})
}
