package fieldmanager_test

import (
	"context"
	"strings"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/objwatch/objwatch/server/servertest"
	"github.com/objwatch/objwatch/testenv"
)

// TestApplyKubectl: kubectl apply --server-side creates, changes,
// conflicts with another manager and takes the field with
// --force-conflicts; an object last written by client-side kubectl apply
// is taken over by kubectl apply --server-side (the last-applied
// annotation's fields pass to the new manager); kubectl diff
// --server-side shows a pending change.
func TestApplyKubectl(t *testing.T) {
	env := testenv.Start(t)
	k := servertest.NewOAKubectl(t, env)
	manifest := func(v string) string {
		return k.File("cm-"+v+".yaml", "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: kssa\n  namespace: default\ndata:\n  key: "+v+"\n")
	}
	if out := k.Ok("apply", "--server-side", "-f", manifest("one")); !strings.Contains(out, "configmap/kssa serverside-applied") {
		t.Errorf("create: %q", out)
	}
	k.Ok("apply", "--server-side", "-f", manifest("two"))
	k.Ok("patch", "configmap", "kssa", "--type", "merge", "-p", `{"data":{"key":"other"}}`, "--field-manager", "other")
	out, stderr, err := k.Run("apply", "--server-side", "-f", manifest("three"))
	if err == nil || !strings.Contains(stderr, `Apply failed with 1 conflict: conflict with "other" using v1: .data.key`) {
		t.Errorf("conflicting apply: err %v, stdout %q, stderr %q", err, out, stderr)
	}
	k.Ok("apply", "--server-side", "--force-conflicts", "-f", manifest("three"))
	if got := k.Ok("get", "configmap", "kssa", "-o", "jsonpath={.data.key} {.metadata.managedFields[*].manager}"); got != "three kubectl" {
		t.Errorf("after --force-conflicts: %q, want data.key three, managers kubectl", got)
	}

	// kubectl diff --server-side: exit status 1 and the change.
	out, _, err = k.Run("diff", "--server-side", "-f", manifest("four"))
	if err == nil || !strings.Contains(out, "+  key: four") || !strings.Contains(out, "-  key: three") {
		t.Errorf("diff --server-side: err %v, out %q", err, out)
	}

	// Migration from client-side apply.
	csa := func(data string) string {
		return k.File("csa.yaml", "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: csa\n  namespace: default\ndata:\n"+data)
	}
	k.Ok("apply", "-f", csa("  a: \"1\"\n  b: \"2\"\n"))
	k.Ok("apply", "--server-side", "-f", csa("  a: \"1\"\n"))
	got := k.Ok("get", "configmap", "csa", "-o", "jsonpath={.data} {.metadata.managedFields[*].manager}")
	if !strings.HasPrefix(got, `{"a":"1"}`) || strings.Contains(got, "kubectl-client-side-apply") {
		t.Errorf("after taking over a client-side applied object: %q, want only a, and no client-side manager left", got)
	}
}

// TestApplyClientGo: client-go's typed apply configurations.
func TestApplyClientGo(t *testing.T) {
	env := testenv.Start(t)
	cfg, err := clientcmd.BuildConfigFromFlags("", env.Kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	cms := cs.CoreV1().ConfigMaps("default")
	cm, err := cms.Apply(ctx, corev1ac.ConfigMap("typed", "default").WithData(map[string]string{"a": "1"}), metav1.ApplyOptions{FieldManager: "typed-a"})
	if err != nil || cm.Data["a"] != "1" {
		t.Fatalf("apply = %v, %v", cm, err)
	}
	if _, err := cms.Apply(ctx, corev1ac.ConfigMap("typed", "default").WithData(map[string]string{"a": "2"}), metav1.ApplyOptions{FieldManager: "typed-b"}); !apierrors.IsConflict(err) {
		t.Fatalf("conflicting apply: %v, want a conflict", err)
	}
	cm, err = cms.Apply(ctx, corev1ac.ConfigMap("typed", "default").WithData(map[string]string{"a": "2"}), metav1.ApplyOptions{FieldManager: "typed-b", Force: true})
	if err != nil || cm.Data["a"] != "2" {
		t.Fatalf("forced apply = %v, %v", cm, err)
	}
	ac, err := corev1ac.ExtractConfigMap(cm, "typed-b")
	if err != nil || ac.Data["a"] != "2" {
		t.Errorf("ExtractConfigMap(typed-b) = %v, %v", ac, err)
	}
}
