package fieldmanager_test

import (
	"net/http"
	"testing"

	"github.com/objwatch/objwatch/server/servertest"
	"github.com/objwatch/objwatch/testenv"
)

// TestDeploymentApplyListMaps: a pod template's containers are a list map
// keyed by name and a container's ports one keyed by containerPort and
// protocol (TCP when unset), and a Deployment's selector is atomic, so
// three managers applying different containers and ports end with all of
// them and the managedFields kube-apiserver v1.37.2 records for the same
// applies.
func TestDeploymentApplyListMaps(t *testing.T) {
	env := testenv.Start(t)
	a := servertest.NewAPI(t, env)
	const web = "/apis/apps/v1/namespaces/default/deployments/web"
	const head = "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: web}\nspec:\n  selector: {matchLabels: {app: web}}\n  template:\n    metadata: {labels: {app: web}}\n    spec:\n      containers:\n"
	const (
		entryA = `a/Apply apps/v1 {"f:spec":{"f:selector":{},"f:template":{"f:metadata":{"f:labels":{"f:app":{}}},"f:spec":{"f:containers":{"k:{\"name\":\"a\"}":{".":{},"f:image":{},"f:name":{},"f:ports":{"k:{\"containerPort\":80,\"protocol\":\"TCP\"}":{".":{},"f:containerPort":{}}}}}}}}}`
		entryB = `b/Apply apps/v1 {"f:spec":{"f:selector":{},"f:template":{"f:metadata":{"f:labels":{"f:app":{}}},"f:spec":{"f:containers":{"k:{\"name\":\"b\"}":{".":{},"f:image":{},"f:name":{}}}}}}}`
		entryC = `c/Apply apps/v1 {"f:spec":{"f:selector":{},"f:template":{"f:metadata":{"f:labels":{"f:app":{}}},"f:spec":{"f:containers":{"k:{\"name\":\"a\"}":{".":{},"f:name":{},"f:ports":{"k:{\"containerPort\":53,\"protocol\":\"UDP\"}":{".":{},"f:containerPort":{},"f:protocol":{}}}}}}}}}`
	)
	r := a.Do("PATCH", web+"?fieldManager=a", servertest.ApplyType, []byte(head+"      - {name: a, image: nginx, ports: [{containerPort: 80}]}\n"))
	servertest.MustCode(t, "apply a", r, http.StatusCreated)
	servertest.WantEntries(t, "apply a", r, entryA)

	r = a.Do("PATCH", web+"?fieldManager=b", servertest.ApplyType, []byte(head+"      - {name: b, image: busybox}\n"))
	servertest.MustCode(t, "apply b", r, http.StatusOK)
	servertest.WantEntries(t, "apply b", r, entryA, entryB)

	r = a.Do("PATCH", web+"?fieldManager=c", servertest.ApplyType, []byte(head+"      - {name: a, ports: [{containerPort: 53, protocol: UDP}]}\n"))
	servertest.MustCode(t, "apply c", r, http.StatusOK)
	servertest.WantEntries(t, "apply c", r, entryA, entryB, entryC)

	spec := r.Object()["spec"].(map[string]any)["template"].(map[string]any)["spec"].(map[string]any)
	var got []string
	for _, c := range spec["containers"].([]any) {
		c := c.(map[string]any)
		got = append(got, c["name"].(string))
		if c["name"] == "a" {
			if ports, _ := c["ports"].([]any); len(ports) != 2 {
				t.Errorf("container a's ports after two managers' applies: %v, want 80/TCP and 53/UDP", ports)
			}
		}
	}
	if len(got) != 2 || got[0] != "a" || got[1] != "b" {
		t.Errorf("containers after two managers' applies: %v, want [a b]", got)
	}

	// The selector is atomic: a manager applying another one conflicts
	// with both owners instead of merging its labels in.
	r = a.Do("PATCH", web+"?fieldManager=d", servertest.ApplyType, []byte("apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: web}\nspec:\n  selector: {matchLabels: {app: web, tier: x}}\n"))
	servertest.MustCode(t, "apply of another selector", r, http.StatusConflict)
}

// TestDeploymentApplyScale: server-side apply through a Deployment's
// /scale changes its replicas and records the manager on the Deployment
// with subresource scale, as kube-apiserver does for built-in kinds (whose
// Scale converts with the scheme; custom resources' applies that change
// replicas fail there, see ApplyScale).
func TestDeploymentApplyScale(t *testing.T) {
	env := testenv.Start(t)
	a := servertest.NewAPI(t, env)
	const web = "/apis/apps/v1/namespaces/default/deployments/web"
	r := a.Do("PATCH", web+"?fieldManager=a", servertest.ApplyType, []byte("apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: web}\nspec:\n  replicas: 1\n  selector: {matchLabels: {app: web}}\n  template:\n    metadata: {labels: {app: web}}\n    spec:\n      containers: [{name: a, image: nginx}]\n"))
	servertest.MustCode(t, "apply", r, http.StatusCreated)

	r = a.Do("PATCH", web+"/scale?fieldManager=s&force=true", servertest.ApplyType, []byte(`{"apiVersion":"autoscaling/v1","kind":"Scale","metadata":{"name":"web","namespace":"default"},"spec":{"replicas":4}}`))
	servertest.MustCode(t, "apply to /scale", r, http.StatusOK)
	if got := r.Object()["spec"].(map[string]any)["replicas"]; got != float64(4) && got != int64(4) {
		t.Errorf("Scale after apply: spec.replicas %v, want 4", got)
	}
	r = a.JSON("GET", web, "")
	servertest.MustCode(t, "get", r, http.StatusOK)
	if got := r.Object()["spec"].(map[string]any)["replicas"]; got != float64(4) && got != int64(4) {
		t.Errorf("Deployment after apply to /scale: spec.replicas %v, want 4", got)
	}
	found := false
	for _, e := range servertest.ManagedEntries(t, r) {
		if e.Manager == "s" {
			found = true
			if e.Subresource != "scale" || e.Operation != "Apply" || string(e.FieldsV1.Raw) != `{"f:spec":{"f:replicas":{}}}` {
				t.Errorf("manager s's entry: %s subresource %q, want Apply of spec.replicas through scale", servertest.Entry(e), e.Subresource)
			}
		}
	}
	if !found {
		t.Errorf("no managedFields entry of manager s after its apply to /scale")
	}
}
