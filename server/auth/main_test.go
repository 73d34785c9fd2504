package auth_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"go.uber.org/goleak"

	"github.com/objwatch/objwatch/server/auth"
)

func TestMain(m *testing.M) {
	// klog, pulled in by client-go, starts its flush daemon in init.
	goleak.VerifyTestMain(m, goleak.IgnoreTopFunction("k8s.io/klog/v2.(*flushDaemon).run.func1"))
}

func newCredentials(t *testing.T, hosts ...string) *auth.Credentials {
	t.Helper()
	c, err := auth.EnsureCredentials(t.TempDir(), hosts)
	if err != nil {
		t.Fatalf("EnsureCredentials() error = %v", err)
	}
	return c
}

// newServer starts an HTTPS server with c.ServerTLSConfig that answers
// "name group,group" for authenticated requests and 401 otherwise.
func newServer(t *testing.T, c *auth.Credentials) *httptest.Server {
	t.Helper()
	a := auth.NewAuthenticator(c)
	var h http.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		u, ok := auth.UserFrom(r.Context())
		if !ok {
			t.Errorf("UserFrom() found no user in an authenticated request")
		}
		fmt.Fprintf(w, "%s %s", u.Name, strings.Join(u.Groups, ","))
	})
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		u, ok := a.Authenticate(r)
		if !ok {
			http.Error(w, "unauthorized", http.StatusUnauthorized)
			return
		}
		h.ServeHTTP(w, r.WithContext(auth.WithUser(r.Context(), u)))
	}))
	srv.TLS = c.ServerTLSConfig()
	srv.EnableHTTP2 = true
	srv.StartTLS()
	t.Cleanup(srv.Close)
	return srv
}
