package endpoints_test

import (
	"strings"
	"testing"
	"time"

	"github.com/objwatch/objwatch/server/servertest"
	"github.com/objwatch/objwatch/testenv"
)

// TestScaleKubectl checks that kubectl scale finds a custom resource's
// scale subresource through discovery and changes its spec replicas, with
// a merge patch (plain) and with a read and PUT of the Scale
// (--current-replicas).
func TestScaleKubectl(t *testing.T) {
	env := testenv.Start(t)
	k := servertest.NewOAKubectl(t, env)
	k.Ok("apply", "-f", k.File("crd.json", servertest.ScaleCRD))
	k.Ok("wait", "--for", "condition=established", "--timeout", "30s", "crd/widgets.scale.objwatch.io")

	w1 := k.File("w1.yaml", `apiVersion: scale.objwatch.io/v1
kind: Widget
metadata:
  name: w1
  namespace: default
spec:
  replicas: 1
`)
	// Established means served; kubectl's cached discovery may lag.
	deadline := time.Now().Add(15 * time.Second)
	for {
		out, stderr, err := k.Run("apply", "-f", w1)
		if err == nil && stderr == "" && strings.Contains(out, "widget.scale.objwatch.io/w1 created") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("kubectl apply of a widget: %v\nstdout: %s\nstderr: %s", err, out, stderr)
		}
		time.Sleep(200 * time.Millisecond)
	}

	if out := k.Ok("scale", "--replicas=3", "widget/w1", "-n", "default"); !strings.Contains(out, "widget.scale.objwatch.io/w1 scaled") {
		t.Errorf("kubectl scale = %q, want widget.scale.objwatch.io/w1 scaled", out)
	}
	if got := k.Ok("get", "widget", "w1", "-n", "default", "-o", "jsonpath={.spec.replicas}"); got != "3" {
		t.Errorf("spec.replicas after kubectl scale --replicas=3 = %q, want 3", got)
	}

	k.Ok("scale", "--current-replicas=3", "--replicas=4", "widget/w1", "-n", "default")
	if got := k.Ok("get", "widget", "w1", "-n", "default", "-o", "jsonpath={.spec.replicas}"); got != "4" {
		t.Errorf("spec.replicas after kubectl scale --current-replicas=3 --replicas=4 = %q, want 4", got)
	}
	if _, stderr, err := k.Run("scale", "--current-replicas=1", "--replicas=5", "widget/w1", "-n", "default"); err == nil || !strings.Contains(stderr, "Expected replicas to be 1, was 4") {
		t.Errorf("kubectl scale with a wrong --current-replicas: err %v, stderr %q, want a precondition failure", err, stderr)
	}

	out := k.Ok("get", "widget", "w1", "-n", "default", "--subresource=scale")
	if f := strings.Fields(out); len(f) < 7 || strings.Join(f[:3], " ") != "NAME DESIRED AVAILABLE" || f[4] != "w1" || f[5] != "4" || f[6] != "0" {
		t.Errorf("kubectl get --subresource=scale = %q, want NAME DESIRED AVAILABLE AGE / w1 4 0 ...", out)
	}
}
