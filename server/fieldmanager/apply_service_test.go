package fieldmanager_test

import (
	"net/http"
	"testing"

	"github.com/objwatch/objwatch/server/servertest"
	"github.com/objwatch/objwatch/testenv"
)

// TestServiceManagedFields: a Service's ports are a list map keyed by port
// and protocol (TCP when unset), so its managedFields are those
// kube-apiserver v1.37.2 records for the same create and apply.
func TestServiceManagedFields(t *testing.T) {
	env := testenv.Start(t)
	a := servertest.NewAPI(t, env)
	const svcs = "/api/v1/namespaces/default/services"
	r := a.JSON("POST", svcs+"?fieldManager=kubectl-create", `{"apiVersion":"v1","kind":"Service","metadata":{"name":"s2"},"spec":{"ports":[{"port":80}]}}`)
	servertest.MustCode(t, "create", r, http.StatusCreated)
	servertest.WantEntries(t, "create", r,
		`kubectl-create/Update v1 {"f:spec":{"f:internalTrafficPolicy":{},"f:ports":{".":{},"k:{\"port\":80,\"protocol\":\"TCP\"}":{".":{},"f:port":{},"f:protocol":{},"f:targetPort":{}}},"f:sessionAffinity":{},"f:type":{}}}`)

	r = a.Do("PATCH", svcs+"/s1?fieldManager=kubectl", servertest.ApplyType, []byte(`apiVersion: v1
kind: Service
metadata: {name: s1}
spec:
  ports:
  - port: 80
    name: web
    targetPort: 8080
  - port: 53
    protocol: UDP
    name: dns
`))
	servertest.MustCode(t, "apply", r, http.StatusCreated)
	servertest.WantEntries(t, "apply", r,
		`kubectl/Apply v1 {"f:spec":{"f:ports":{"k:{\"port\":53,\"protocol\":\"UDP\"}":{".":{},"f:name":{},"f:port":{},"f:protocol":{}},"k:{\"port\":80,\"protocol\":\"TCP\"}":{".":{},"f:name":{},"f:port":{},"f:targetPort":{}}}}}`)
	// The same port with another protocol is another item, another
	// manager's.
	r = a.Do("PATCH", svcs+"/s1?fieldManager=other", servertest.ApplyType, []byte("apiVersion: v1\nkind: Service\nmetadata: {name: s1}\nspec:\n  ports:\n  - {port: 53, protocol: TCP, name: dns-tcp}\n"))
	servertest.MustCode(t, "apply of the same port over TCP", r, http.StatusOK)
	if ports, _ := r.Object()["spec"].(map[string]any)["ports"].([]any); len(ports) != 3 {
		t.Errorf("ports after a second manager's apply: %v", ports)
	}
}

// TestSecretStringData: stringData is merged into data and never stored,
// and the applier owns what it sent, as kube-apiserver v1.37.2 records.
func TestSecretStringData(t *testing.T) {
	env := testenv.Start(t)
	a := servertest.NewAPI(t, env)
	const secrets = "/api/v1/namespaces/default/secrets"
	r := a.Do("PATCH", secrets+"/sec1?fieldManager=kubectl", servertest.ApplyType, []byte("apiVersion: v1\nkind: Secret\nmetadata: {name: sec1}\nstringData: {password: hello}\ndata: {user: YWRtaW4=}\n"))
	servertest.MustCode(t, "apply", r, http.StatusCreated)
	servertest.WantEntries(t, "apply", r, `kubectl/Apply v1 {"f:data":{"f:user":{}},"f:stringData":{"f:password":{}}}`)
	o := a.JSON("GET", secrets+"/sec1", "").Object()
	if d, _ := o["data"].(map[string]any); d["password"] != "aGVsbG8=" || d["user"] != "YWRtaW4=" || o["stringData"] != nil {
		t.Errorf("stored secret: data %v, stringData %v", o["data"], o["stringData"])
	}
	r = a.JSON("POST", secrets, `{"apiVersion":"v1","kind":"Secret","metadata":{"name":"sec2"},"stringData":{"k":"v"}}`)
	servertest.MustCode(t, "create", r, http.StatusCreated)
	if o := r.Object(); o["stringData"] != nil || o["data"].(map[string]any)["k"] != "dg==" {
		t.Errorf("created secret: %s", r.Body)
	}
}
