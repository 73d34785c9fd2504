package e2e_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/objwatch/objwatch/testenv"
)

const kcList = `apiVersion: v1
kind: List
items:
- apiVersion: v1
  kind: ConfigMap
  metadata:
    name: listed
    namespace: default
  data:
    a: "1"
- apiVersion: v1
  kind: Service
  metadata:
    name: listed
    namespace: default
  spec:
    selector:
      app: listed
    ports:
    - port: 8080
- apiVersion: events.k8s.io/v1
  kind: Event
  metadata:
    name: listed
    namespace: default
  eventTime: "2026-01-02T03:04:05.000000Z"
  reportingController: example.com/e2e
  reportingInstance: e2e-1
  action: Create
  reason: Listed
  note: created from a List
  type: Normal
  regarding:
    apiVersion: v1
    kind: ConfigMap
    namespace: default
    name: listed
`

// TestKubectlCompat drives what kubectl needs beyond plain resources:
// client-side validation of a List against /openapi/v2, cluster-info (the
// services of kube-system), events.k8s.io and services in tables, and
// impersonation refused.
func TestKubectlCompat(t *testing.T) {
	path, err := exec.LookPath("kubectl")
	if err != nil {
		t.Skip("kubectl not on PATH")
	}
	env := testenv.Start(t)
	k := kcNew(t, path, env.Kubeconfig)

	// A List is validated client-side (--validate defaults to strict).
	list := filepath.Join(t.TempDir(), "list.yaml")
	if err := os.WriteFile(list, []byte(kcList), 0o600); err != nil {
		t.Fatal(err)
	}
	out := k.ok("create", "-f", list)
	for _, want := range []string{"configmap/listed created", "service/listed created", "event.events.k8s.io/listed created"} {
		if !strings.Contains(out, want) {
			t.Errorf("kubectl create -f List = %q, want %q", out, want)
		}
	}
	// An unknown field in a List item is caught by that validation.
	bad := filepath.Join(t.TempDir(), "bad.yaml")
	os.WriteFile(bad, []byte(strings.Replace(strings.Replace(kcList, "name: listed\n    namespace: default\n  data:", "name: other\n    namespace: default\n  bogus: 1\n  data:", 1), "kind: Service", "kind: Service\n  bogus: 2", 1)), 0o600)
	if _, stderr, err := k.run("create", "-f", bad); err == nil || !strings.Contains(stderr, "bogus") {
		t.Errorf("kubectl create -f List with an unknown field: err %v, stderr %q, want a validation error naming it", err, stderr)
	}

	if out := k.ok("cluster-info"); !strings.Contains(out, "Kubernetes control plane") || !strings.Contains(out, "is running at") || !strings.Contains(out, env.Config.Host) {
		t.Errorf("kubectl cluster-info = %q, want the control plane at %s", out, env.Config.Host)
	}

	header, row := kcTable(t, k.ok("get", "services", "-n", "default"), "kubernetes")
	if strings.Join(header, " ") != "NAME TYPE CLUSTER-IP EXTERNAL-IP PORT(S) AGE" || len(row) != 6 || row[1] != "ClusterIP" || row[2] != "10.0.0.1" || row[3] != "<none>" || row[4] != "443/TCP" {
		t.Errorf("kubectl get services = %v %v, want kubernetes ClusterIP 10.0.0.1 <none> 443/TCP", header, row)
	}
	// Events print as Kubernetes prints them, through either API.
	for _, resource := range []string{"events", "events.events.k8s.io"} {
		out := strings.Join(strings.Fields(k.ok("get", resource, "-n", "default")), " ")
		if !strings.HasPrefix(out, "LAST SEEN TYPE REASON OBJECT MESSAGE ") || !strings.Contains(out, " Normal Listed configmap/listed created from a List") {
			t.Errorf("kubectl get %s = %q, want LAST SEEN TYPE REASON OBJECT MESSAGE and the listed event", resource, out)
		}
	}
	if note := k.ok("get", "events.events.k8s.io", "listed", "-n", "default", "-o", "jsonpath={.note}"); note != "created from a List" {
		t.Errorf("kubectl get events.events.k8s.io listed note = %q", note)
	}
	if msg := k.ok("get", "events", "listed", "-n", "default", "-o", "jsonpath={.message}"); msg != "created from a List" {
		t.Errorf("kubectl get events listed message = %q (core/v1)", msg)
	}

	// admin (system:masters) may impersonate; the request then runs as
	// alice, whom RBAC allows nothing here: kube-apiserver v1.37.2's
	// answer.
	_, stderr, err := k.run("--as", "alice", "get", "configmaps", "-n", "default")
	const want = `Error from server (Forbidden): configmaps is forbidden: User "alice" cannot list resource "configmaps" in API group "" in the namespace "default"`
	if err == nil || !strings.Contains(stderr, want) {
		t.Errorf("kubectl --as alice get configmaps: err %v, stderr %q, want %q", err, stderr, want)
	}
}
