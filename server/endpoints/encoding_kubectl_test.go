package endpoints_test

import (
	"net/http"
	"regexp"
	"strings"
	"testing"

	"github.com/objwatch/objwatch/server/servertest"
	"github.com/objwatch/objwatch/testenv"
)

// TestEncodingKubectl: kubectl describe reads a pod in protobuf (kubectl's
// typed client asks for it first; -v=8 logs the headers), get -o yaml and
// get --raw in the JSON they ask for, and delete works.
func TestEncodingKubectl(t *testing.T) {
	env := testenv.Start(t)
	k := servertest.NewOAKubectl(t, env)
	a := servertest.NewAPI(t, env)
	servertest.MustCode(t, "create pod", a.JSON("POST", "/api/v1/namespaces/default/pods",
		`{"apiVersion":"v1","kind":"Pod","metadata":{"name":"kp","labels":{"a":"b"}},"spec":{"containers":[{"name":"c","image":"busybox"}]}}`), http.StatusCreated)

	// describe reads through kubectl's typed client, protobuf first.
	out, stderr, err := k.Run("describe", "pod", "kp", "-n", "default", "-v=8")
	if err != nil || !strings.Contains(out, "busybox") || !regexp.MustCompile(`(?m)^Labels:\s+a=b$`).MatchString(out) {
		t.Errorf("kubectl describe pod: %v\n%s\n%s", err, out, stderr)
	}
	if !strings.Contains(stderr, "Accept: application/vnd.kubernetes.protobuf") || !strings.Contains(stderr, "Content-Type: application/vnd.kubernetes.protobuf") {
		t.Errorf("kubectl describe pod got no protobuf answer; its log:\n%s", stderr)
	}
	out = k.Ok("get", "pods", "-n", "default", "-o", "yaml")
	if !strings.Contains(out, "name: kp") || !strings.Contains(out, "image: busybox") || !strings.Contains(out, "kind: List") {
		t.Errorf("kubectl get pods -o yaml:\n%s", out)
	}
	raw := k.Ok("get", "--raw", "/api/v1/namespaces/default/pods/kp")
	if !strings.HasPrefix(raw, "{") || !strings.Contains(raw, `"name":"kp"`) {
		t.Errorf("kubectl get --raw: %s", raw)
	}
	if out := k.Ok("delete", "pod", "kp", "-n", "default", "--wait=false"); !strings.Contains(out, `pod "kp" deleted`) {
		t.Errorf("kubectl delete pod: %q", out)
	}
}
