package servertest

import (
	"crypto/tls"
	"crypto/x509"

	"net/http"

	"testing"
	"time"

	"github.com/objwatch/objwatch/testenv"
)

// UserAPI is the raw client of a user other than admin (see testenv.User).
func UserAPI(t *testing.T, env *testenv.Env, name string, groups ...string) *API {
	t.Helper()
	c := env.User(t, name, groups...)
	pair, err := tls.X509KeyPair(c.CertData, c.KeyData)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(c.CAData)
	tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, Certificates: []tls.Certificate{pair}}, ForceAttemptHTTP2: true}
	t.Cleanup(tr.CloseIdleConnections)
	return &API{T: t, Host: c.Host, C: &http.Client{Transport: tr}}
}

// must sends a request as admin and fails the test unless it succeeds.
func (a *API) Must(method, path, body string) Response {
	a.T.Helper()
	r := a.JSON(method, path, body)
	if r.Code >= 300 {
		a.T.Fatalf("%s %s = %d %s", method, path, r.Code, r.Body)
	}
	return r
}

const (
	RoleReader = `{"apiVersion":"rbac.authorization.k8s.io/v1","kind":"Role","metadata":{"name":"cm-reader"},
		"rules":[{"apiGroups":[""],"resources":["configmaps"],"verbs":["get","list","watch"]}]}`
	BindAlice = `{"apiVersion":"rbac.authorization.k8s.io/v1","kind":"RoleBinding","metadata":{"name":"alice-reads"},
		"roleRef":{"apiGroup":"rbac.authorization.k8s.io","kind":"Role","name":"cm-reader"},
		"subjects":[{"kind":"User","name":"alice"}]}`
)

func Namespace(name string) string {
	return `{"apiVersion":"v1","kind":"Namespace","metadata":{"name":"` + name + `"}}`
}

// Eventually retries f until it returns true or a second passes: RBAC
// changes reach the index through a watch.
func Eventually(t *testing.T, what string, f func() bool) {
	t.Helper()
	deadline := time.Now().Add(time.Second)
	for !f() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within 1 s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TokenAPI is a raw client that authenticates with a bearer token only.
func TokenAPI(t *testing.T, env *testenv.Env, token string) *API {
	t.Helper()
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(env.Config.CAData)
	tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}
	t.Cleanup(tr.CloseIdleConnections)
	return &API{T: t, Host: env.Config.Host, C: &http.Client{Transport: Bearer{token, tr}}}
}

type Bearer struct {
	Token string
	Next  http.RoundTripper
}

func (b Bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.Token)
	return b.Next.RoundTrip(r)
}
