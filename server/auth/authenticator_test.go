package auth_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync"
	"testing"

	"github.com/objwatch/objwatch/server/auth"
)

var adminUser = auth.User{Name: "admin", Groups: []string{"system:masters", "system:authenticated"}}

func TestAuthenticate(t *testing.T) {
	c := newCredentials(t)
	adminCert := parseCert(t, c.AdminCertPEM)
	foreignCert := parseCert(t, newCredentials(t).AdminCertPEM)
	a := auth.NewAuthenticator(c)
	a.AddToken("dev-token", auth.User{Name: "dev", Groups: []string{"devs"}})

	tests := []struct {
		name   string
		header string
		tls    *tls.ConnectionState
		want   auth.User
		wantOK bool
	}{
		{"verified cert", "", &tls.ConnectionState{VerifiedChains: [][]*x509.Certificate{{adminCert}}}, adminUser, true},
		{"cert wins over token", "Bearer dev-token", &tls.ConnectionState{VerifiedChains: [][]*x509.Certificate{{adminCert}}}, adminUser, true},
		{"cert verified here", "", &tls.ConnectionState{PeerCertificates: []*x509.Certificate{adminCert}}, adminUser, true},
		{"cert from another ca", "", &tls.ConnectionState{PeerCertificates: []*x509.Certificate{foreignCert}}, auth.User{}, false},
		{"foreign cert and a good token", "Bearer " + c.AdminToken, &tls.ConnectionState{PeerCertificates: []*x509.Certificate{foreignCert}}, auth.User{}, false},
		{"admin token", "Bearer " + c.AdminToken, nil, adminUser, true},
		{"lowercase scheme", "bearer " + c.AdminToken, nil, adminUser, true},
		{"added token", "Bearer dev-token", nil, auth.User{Name: "dev", Groups: []string{"devs", "system:authenticated"}}, true},
		{"wrong token", "Bearer " + c.AdminToken + "x", nil, auth.User{}, false},
		{"token prefix", "Bearer " + c.AdminToken[:10], nil, auth.User{}, false},
		{"empty token", "Bearer ", nil, auth.User{}, false},
		{"basic auth", "Basic YWRtaW46YWRtaW4=", nil, auth.User{}, false},
		{"bare token", c.AdminToken, nil, auth.User{}, false},
		{"bearer alone", "Bearer", nil, auth.User{}, false},
		{"two spaces", "Bearer  " + c.AdminToken, nil, auth.User{}, false},
		// kube-apiserver takes the word after the scheme and ignores a third.
		{"trailing word", "Bearer " + c.AdminToken + " extra", nil, adminUser, true},
		{"nothing", "", nil, auth.User{}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := httptest.NewRequest(http.MethodGet, "/", nil)
			r.TLS = tt.tls
			if tt.header != "" {
				r.Header.Set("Authorization", tt.header)
			}
			got, ok := a.Authenticate(r)
			if ok != tt.wantOK || got.Name != tt.want.Name || !slices.Equal(got.Groups, tt.want.Groups) {
				t.Errorf("Authenticate() = %v, %v, want %v, %v", got, ok, tt.want, tt.wantOK)
			}
		})
	}
}

func TestAuthenticateOverTLS(t *testing.T) {
	c := newCredentials(t)
	other := newCredentials(t)
	srv := newServer(t, c)

	clientCert := func(c *auth.Credentials) []tls.Certificate {
		cert, err := tls.X509KeyPair(c.AdminCertPEM, c.AdminKeyPEM)
		if err != nil {
			t.Fatal(err)
		}
		return []tls.Certificate{cert}
	}
	tests := []struct {
		name  string
		certs []tls.Certificate
		token string
		want  string // response body; "" means 401
	}{
		{name: "admin cert", certs: clientCert(c), want: "admin system:masters,system:authenticated"},
		{name: "admin token", token: c.AdminToken, want: "admin system:masters,system:authenticated"},
		// kube-apiserver asks for a certificate without requiring one from
		// its CA and answers a foreign one 401, not with a failed handshake.
		{name: "cert from another ca", certs: clientCert(other)},
		{name: "cert from another ca and a good token", certs: clientCert(other), token: c.AdminToken},
		{name: "token from another ca", token: other.AdminToken},
		{name: "no credentials"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tr := &http.Transport{
				TLSClientConfig:   &tls.Config{RootCAs: c.CAPool, Certificates: tt.certs},
				ForceAttemptHTTP2: true,
			}
			defer tr.CloseIdleConnections()
			req, err := http.NewRequest(http.MethodGet, srv.URL, nil)
			if err != nil {
				t.Fatal(err)
			}
			if tt.token != "" {
				req.Header.Set("Authorization", "Bearer "+tt.token)
			}
			resp, err := (&http.Client{Transport: tr}).Do(req)
			if err != nil {
				t.Fatalf("GET error = %v", err)
			}
			defer resp.Body.Close()
			body, err := io.ReadAll(resp.Body)
			if err != nil {
				t.Fatal(err)
			}
			if resp.ProtoMajor != 2 {
				t.Errorf("protocol = %s, want HTTP/2", resp.Proto)
			}
			if tt.want == "" {
				if resp.StatusCode != http.StatusUnauthorized {
					t.Errorf("status = %d, want 401", resp.StatusCode)
				}
				return
			}
			if resp.StatusCode != http.StatusOK || string(body) != tt.want {
				t.Errorf("GET = %d %q, want 200 %q", resp.StatusCode, body, tt.want)
			}
		})
	}
}

func TestAuthenticatorConcurrent(t *testing.T) {
	c := newCredentials(t)
	a := auth.NewAuthenticator(c)
	r := httptest.NewRequest(http.MethodGet, "/", nil)
	r.Header.Set("Authorization", "Bearer "+c.AdminToken)

	var wg sync.WaitGroup
	errs := make(chan string, 4) // one per goroutine, so none blocks
	for i := range 4 {
		wg.Go(func() {
			for j := range 100 {
				a.AddToken(fmt.Sprint(i, "-", j), auth.User{Name: "u"})
				if u, ok := a.Authenticate(r); !ok || u.Name != "admin" {
					errs <- "admin token stopped working"
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Error(e)
	}
}

func TestUserContext(t *testing.T) {
	if u, ok := auth.UserFrom(context.Background()); ok {
		t.Errorf("UserFrom(empty) = %v, true, want false", u)
	}
	ctx := auth.WithUser(context.Background(), adminUser)
	if u, ok := auth.UserFrom(ctx); !ok || u.Name != "admin" {
		t.Errorf("UserFrom(WithUser(admin)) = %v, %v, want admin, true", u, ok)
	}
}
