// Package webhookclient calls the HTTPS webhooks the server's configuration
// objects name: admission webhooks (admissionregistration.k8s.io/v1
// WebhookClientConfig) and custom resource conversion webhooks
// (apiextensions.k8s.io/v1 WebhookClientConfig). Both send one JSON
// review object and read one back.
//
// A webhook is reached at clientConfig.url, or through clientConfig.service.
// objwatch runs no pods and no cluster network, so a Service reference is
// resolved by a Resolver the server supplies: objwatch's resolves a Service
// of type ExternalName to its spec.externalName (a host name or address the
// server can reach) at the requested port (default 443). The TLS server name
// is then NAME.NAMESPACE.svc, as kube-apiserver verifies it, so a
// certificate issued for the in-cluster name works unchanged.
//
// The server is verified against clientConfig.caBundle, or the system's
// roots when it is empty; clients are cached per CA bundle and server name.
//
// # Concurrency
//
// A Client is safe for concurrent use.
package webhookclient

import (
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"sync"
	"time"

	kjson "k8s.io/apimachinery/pkg/runtime/serializer/json"
	"sigs.k8s.io/yaml"
)

// Endpoint is where a webhook is: the fields both WebhookClientConfig
// types share.
type Endpoint struct {
	// URL, if set, is the webhook's https URL.
	URL string
	// Service, if set instead, is the Service in front of the webhook.
	Service *ServiceRef
	// CABundle are the PEM certificates that verify the webhook's
	// serving certificate; empty: the system's roots.
	CABundle []byte
}

// ServiceRef is a WebhookClientConfig's service reference.
type ServiceRef struct {
	Namespace, Name string
	Path            string
	Port            int32 // 0: 443
}

// Resolver returns the host[:port] to dial for a Service's port.
type Resolver func(ctx context.Context, namespace, name string, port int32) (hostport string, err error)

// Client posts review objects to webhooks.
type Client struct {
	resolve Resolver

	mu      sync.Mutex
	clients map[clientKey]*http.Client
}

type clientKey struct {
	ca         [sha256.Size]byte
	serverName string
}

// New returns a Client that resolves Service references with resolve (nil:
// a Service reference is an error).
func New(resolve Resolver) *Client {
	return &Client{resolve: resolve, clients: map[clientKey]*http.Client{}}
}

// CallError is a failed call: the webhook could not be reached, did not
// answer in time, answered with a status other than 200, or with a body
// that is not the expected JSON. Kubernetes' admission failure policy
// treats all of these alike.
type CallError struct {
	URL string
	Err error
	// Status is the HTTP status of a non-200 answer, else 0.
	Status int
}

func (e *CallError) Error() string { return fmt.Sprintf("Post %q: %v", e.URL, e.Err) }

func (e *CallError) Unwrap() error { return e.Err }

// Post sends in as JSON to ep and decodes the answer into out, within
// timeout (0: 10 s, kube-apiserver's default for webhooks). As Send (and
// kube-apiserver's conversion webhook client), it tells the webhook the
// time left in a timeout query parameter, which errors name with the URL.
func (c *Client) Post(ctx context.Context, ep Endpoint, timeout time.Duration, in, out any) error {
	body, err := json.Marshal(in)
	if err != nil {
		return fmt.Errorf("encoding the review: %w", err)
	}
	resp, err := c.send(ctx, ep, timeout, body, true)
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK {
		return &CallError{URL: resp.URL, Status: resp.StatusCode, Err: fmt.Errorf("the server responded with status %d: %s", resp.StatusCode, truncate(resp.Body, 200))}
	}
	return decode(resp.Body, out)
}

// decode reads a webhook's answer into out as client-go's rest client
// does for kube-apiserver's webhooks (their serializer reads YAML too), so
// that a bad answer fails with kube-apiserver's message: a body that is
// not JSON is taken for YAML and converted, and one whose apiVersion and
// kind cannot be read "couldn't get version/kind; json parse error: ...".
func decode(body []byte, out any) error {
	if !json.Valid(body) {
		var err error
		if body, err = yaml.YAMLToJSON(body); err != nil {
			return err
		}
	}
	if _, err := kjson.DefaultMetaFactory.Interpret(body); err != nil {
		return err
	}
	return json.Unmarshal(body, out)
}

// Response is a webhook's answer as received.
type Response struct {
	// URL is where the request went (with its timeout parameter).
	URL         string
	StatusCode  int
	ContentType string
	Body        []byte
}

// Send posts body, a JSON review, to ep within timeout (0: 10 s) and
// returns the answer whatever its status, for callers that interpret
// statuses and bodies as client-go's rest client does (admission
// webhooks). Like that client, it tells the webhook the time left in a
// timeout=<seconds>s query parameter. The error is a *CallError when no
// answer came: the connection, TLS, the deadline, an answer over 3 MiB;
// or a plain error when ep names no reachable target.
func (c *Client) Send(ctx context.Context, ep Endpoint, timeout time.Duration, body []byte) (*Response, error) {
	return c.send(ctx, ep, timeout, body, false)
}

// send posts body to ep within timeout: as the deadline of ctx, or with
// clientTimeout as the timeout of the HTTP client (kube-apiserver's
// conversion webhook client, whose timeout then fails a call with
// net/http's "request canceled (Client.Timeout exceeded ...)").
func (c *Client) send(ctx context.Context, ep Endpoint, timeout time.Duration, body []byte, clientTimeout bool) (*Response, error) {
	u, serverName, err := c.target(ctx, ep)
	if err != nil {
		return nil, err
	}
	if timeout <= 0 {
		timeout = 10 * time.Second
	}
	deadline := time.Now().Add(timeout)
	if !clientTimeout {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, timeout)
		defer cancel()
	}
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		deadline = d
	}
	if left := time.Until(deadline); left > 0 {
		// Whole seconds, rounded up, as client-go's Request.Timeout.
		if t := left.Truncate(time.Second); t != left {
			left = t + time.Second
		}
		pu, err := url.Parse(u)
		if err == nil {
			q := pu.Query()
			q.Set("timeout", left.String())
			pu.RawQuery = q.Encode()
			u = pu.String()
		}
	}
	hc, err := c.client(ep.CABundle, serverName)
	if err != nil {
		return nil, &CallError{URL: u, Err: err}
	}
	if clientTimeout {
		// The timeout cancels through the client's timer (wrapped), as
		// in kube-apiserver's conversion calls.
		timed := *hc
		timed.Timeout = timeout
		timed.Transport = wrapped{hc.Transport, ctx}
		hc = &timed
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, u, bytes.NewReader(body))
	if err != nil {
		return nil, &CallError{URL: u, Err: err}
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json")
	resp, err := hc.Do(req)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err // CallError names the URL already
		}
		return nil, &CallError{URL: u, Err: err}
	}
	defer resp.Body.Close()
	// A review answer is small; 3 MiB is kube-apiserver's request limit.
	b, err := io.ReadAll(io.LimitReader(resp.Body, 3<<20+1))
	if err != nil {
		return nil, &CallError{URL: u, Err: err}
	}
	if len(b) > 3<<20 {
		return nil, &CallError{URL: u, Err: errors.New("the response is larger than 3 MiB")}
	}
	return &Response{URL: u, StatusCode: resp.StatusCode, ContentType: resp.Header.Get("Content-Type"), Body: b}, nil
}

// wrapped is a RoundTripper net/http does not know, so that an
// http.Client's Timeout cancels its calls through Request.Cancel ("net/http:
// request canceled (Client.Timeout exceeded ...)"): it sends each request
// with the caller's context, not the one the client derives with the
// timeout's deadline, which would race the timer with "context deadline
// exceeded".
type wrapped struct {
	rt  http.RoundTripper
	ctx context.Context
}

func (w wrapped) RoundTrip(req *http.Request) (*http.Response, error) {
	return w.rt.RoundTrip(req.WithContext(w.ctx))
}

func truncate(b []byte, n int) string {
	if len(b) > n {
		return string(b[:n]) + "…"
	}
	return string(b)
}

// target returns the URL to post to and the TLS server name to verify
// ("" : the URL's host).
func (c *Client) target(ctx context.Context, ep Endpoint) (string, string, error) {
	switch {
	case ep.URL != "":
		u, err := url.Parse(ep.URL)
		if err != nil || u.Scheme != "https" || u.Host == "" {
			return "", "", fmt.Errorf("webhook URL %q is not a valid https URL", ep.URL)
		}
		return ep.URL, "", nil
	case ep.Service != nil:
		s := ep.Service
		if c.resolve == nil {
			return "", "", fmt.Errorf("service %s/%s: no resolver for webhook services", s.Namespace, s.Name)
		}
		port := s.Port
		if port == 0 {
			port = 443
		}
		hostport, err := c.resolve(ctx, s.Namespace, s.Name, port)
		if err != nil {
			return "", "", fmt.Errorf("unable to resolve service %s/%s: %w", s.Namespace, s.Name, err)
		}
		if _, _, err := net.SplitHostPort(hostport); err != nil {
			hostport = net.JoinHostPort(hostport, strconv.Itoa(int(port)))
		}
		u := url.URL{Scheme: "https", Host: hostport, Path: s.Path}
		return u.String(), s.Name + "." + s.Namespace + ".svc", nil
	}
	return "", "", errors.New("webhook clientConfig has neither url nor service")
}

// client returns the cached HTTP client for a CA bundle and server name.
func (c *Client) client(caBundle []byte, serverName string) (*http.Client, error) {
	key := clientKey{ca: sha256.Sum256(caBundle), serverName: serverName}
	c.mu.Lock()
	defer c.mu.Unlock()
	if hc, ok := c.clients[key]; ok {
		return hc, nil
	}
	cfg := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: serverName}
	if len(caBundle) > 0 {
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(caBundle) {
			return nil, errors.New("caBundle holds no PEM certificate")
		}
		cfg.RootCAs = pool
	}
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.TLSClientConfig = cfg
	t.MaxIdleConnsPerHost = 64
	hc := &http.Client{Transport: t}
	c.clients[key] = hc
	return hc, nil
}

// Close closes the idle connections of every cached client.
func (c *Client) Close() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, hc := range c.clients {
		hc.CloseIdleConnections()
	}
}
