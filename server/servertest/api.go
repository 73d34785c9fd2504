package servertest

import (
	"encoding/json"
	"fmt"
	"net/http"

	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/objwatch/objwatch/testenv"
)

// API is a tiny raw HTTP client for asserting wire behaviour.
type API struct {
	T    *testing.T
	Host string
	C    *http.Client
}

func NewAPI(t *testing.T, env *testenv.Env) *API {
	return &API{T: t, Host: env.Config.Host, C: env.HTTPClient()}
}

type Response struct {
	Code   int
	Body   []byte
	Header http.Header
}

func (r Response) Status() metav1.Status {
	var s metav1.Status
	json.Unmarshal(r.Body, &s)
	return s
}

func (r Response) Object() map[string]any {
	var m map[string]any
	json.Unmarshal(r.Body, &m)
	return m
}

func (a *API) Do(method, path, contentType string, body []byte) Response {
	a.T.Helper()
	return a.Accept(method, path, "", contentType, body)
}

func (a *API) JSON(method, path string, body string) Response {
	a.T.Helper()
	return a.Do(method, path, "application/json", []byte(body))
}

func CM(name string, extra string) string {
	return fmt.Sprintf(`{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":%q%s},"data":{"k":"v"}}`, name, extra)
}

func RVOf(t *testing.T, r Response) string {
	t.Helper()
	md, _ := r.Object()["metadata"].(map[string]any)
	rv, _ := md["resourceVersion"].(string)
	if rv == "" {
		t.Fatalf("no resourceVersion in %s", r.Body)
	}
	return rv
}

const CMs = "/api/v1/namespaces/default/configmaps"

func Truncate(b []byte) string {
	if len(b) > 300 {
		return string(b[:300]) + "..."
	}
	return string(b)
}
