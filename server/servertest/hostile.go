package servertest

import (
	"crypto/tls"
	"crypto/x509"

	"fmt"

	"net/http"

	"strings"
	"testing"

	"github.com/objwatch/objwatch/testenv"
)

// Writers lets the users named create ConfigMaps in default.
func Writers(t *testing.T, env *testenv.Env, admin *API, users ...string) []*API {
	t.Helper()
	admin.Must("POST", "/apis/rbac.authorization.k8s.io/v1/namespaces/default/roles",
		`{"apiVersion":"rbac.authorization.k8s.io/v1","kind":"Role","metadata":{"name":"cm-writer"},
		"rules":[{"apiGroups":[""],"resources":["configmaps"],"verbs":["get","list","create","update","patch","delete"]}]}`)
	var subjects []string
	for _, u := range users {
		subjects = append(subjects, fmt.Sprintf(`{"kind":"User","name":%q}`, u))
	}
	admin.Must("POST", "/apis/rbac.authorization.k8s.io/v1/namespaces/default/rolebindings",
		`{"apiVersion":"rbac.authorization.k8s.io/v1","kind":"RoleBinding","metadata":{"name":"cm-writers"},
		"roleRef":{"apiGroup":"rbac.authorization.k8s.io","kind":"Role","name":"cm-writer"},
		"subjects":[`+strings.Join(subjects, ",")+`]}`)
	var out []*API
	for _, u := range users {
		a := UserAPI(t, env, u)
		Eventually(t, u+"'s binding", func() bool { return a.JSON("GET", CMs, "").Code == http.StatusOK })
		out = append(out, a)
	}
	return out
}

// UserTLS is the HTTP/1.1 TLS client config of user name.
func UserTLS(t testing.TB, env *testenv.Env, name string) *tls.Config {
	t.Helper()
	c := env.User(t, name)
	pair, err := tls.X509KeyPair(c.CertData, c.KeyData)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(c.CAData)
	return &tls.Config{RootCAs: pool, Certificates: []tls.Certificate{pair}, NextProtos: []string{"http/1.1"}, ServerName: "127.0.0.1"}
}

// SlowCreate sends, as the user of cfg, the headers of a ConfigMap create
// and the first half of its body, and then nothing: a client whose body
// trickles in.
func SlowCreate(t *testing.T, env *testenv.Env, cfg *tls.Config, name string) *tls.Conn {
	t.Helper()
	conn, err := tls.Dial("tcp", strings.TrimPrefix(env.Config.Host, "https://"), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	body := CM(name, "")
	fmt.Fprintf(conn, "POST %s HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s",
		CMs, len(body), body[:len(body)/2])
	return conn
}
