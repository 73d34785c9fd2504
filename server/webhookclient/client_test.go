package webhookclient_test

import (
	"context"
	"encoding/json"
	"encoding/pem"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/objwatch/objwatch/server/webhookclient"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

type review struct {
	Value string `json:"value"`
}

// server answers /ok with the request's value upper-cased, /garbage with
// non-JSON, /fail with 500 and /slow after 2 s.
func server(t *testing.T) (*httptest.Server, []byte) {
	t.Helper()
	s := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/ok":
			var in review
			if r.Header.Get("Content-Type") != "application/json" || json.NewDecoder(r.Body).Decode(&in) != nil {
				http.Error(w, "bad request", 400)
				return
			}
			json.NewEncoder(w).Encode(review{Value: strings.ToUpper(in.Value)})
		case "/garbage":
			w.Write([]byte("<html>"))
		case "/fail":
			http.Error(w, "boom", 500)
		case "/slow":
			select {
			case <-time.After(2 * time.Second):
			case <-r.Context().Done():
			}
		}
	}))
	t.Cleanup(s.Close)
	ca := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: s.Certificate().Raw})
	return s, ca
}

func TestPost(t *testing.T) {
	s, ca := server(t)
	host := strings.TrimPrefix(s.URL, "https://")
	resolved := 0
	c := webhookclient.New(func(_ context.Context, ns, name string, port int32) (string, error) {
		resolved++
		if ns != "hooks" || name != "svc" || port != 8443 {
			return "", errors.New("no such service")
		}
		return host, nil
	})
	defer c.Close()
	ctx := context.Background()

	var out review
	if err := c.Post(ctx, webhookclient.Endpoint{URL: s.URL + "/ok", CABundle: ca}, 0, review{"a"}, &out); err != nil || out.Value != "A" {
		t.Fatalf("url: %v %q", err, out.Value)
	}
	// httptest's certificate is for example.com and 127.0.0.1, not the
	// service name, so a service reference fails verification ...
	err := c.Post(ctx, webhookclient.Endpoint{Service: &webhookclient.ServiceRef{Namespace: "hooks", Name: "svc", Path: "/ok", Port: 8443}, CABundle: ca}, 0, review{"b"}, &out)
	if err == nil || !strings.Contains(err.Error(), "svc.hooks.svc") || resolved != 1 {
		t.Fatalf("service with a certificate for other names = %v (resolved %d), want a verification error naming svc.hooks.svc", err, resolved)
	}
	if err := c.Post(ctx, webhookclient.Endpoint{Service: &webhookclient.ServiceRef{Namespace: "hooks", Name: "other"}, CABundle: ca}, 0, review{}, &out); err == nil || !strings.Contains(err.Error(), "unable to resolve service hooks/other") {
		t.Fatalf("unknown service = %v", err)
	}

	for _, tc := range []struct {
		ep      webhookclient.Endpoint
		timeout time.Duration
		want    string
	}{
		{webhookclient.Endpoint{URL: s.URL + "/ok"}, 0, "certificate signed by unknown authority"},
		{webhookclient.Endpoint{URL: s.URL + "/garbage", CABundle: ca}, 0, "couldn't get version/kind; json parse error: "},
		{webhookclient.Endpoint{URL: s.URL + "/fail", CABundle: ca}, 0, "the server responded with status 500: boom"},
		{webhookclient.Endpoint{URL: s.URL + "/slow", CABundle: ca}, 100 * time.Millisecond, "net/http: request canceled (Client.Timeout exceeded while awaiting headers)"},
		{webhookclient.Endpoint{URL: "http://" + host + "/ok", CABundle: ca}, 0, "is not a valid https URL"},
		{webhookclient.Endpoint{URL: s.URL + "/ok", CABundle: []byte("junk")}, 0, "caBundle holds no PEM certificate"},
		{webhookclient.Endpoint{}, 0, "neither url nor service"},
	} {
		err := c.Post(ctx, tc.ep, tc.timeout, review{"x"}, &out)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Post(%+v) = %v, want %q", tc.ep, err, tc.want)
		}
	}
}
