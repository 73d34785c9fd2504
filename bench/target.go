// Package bench is the benchmark harness behind `objwatch bench`: it
// measures any Kubernetes-compatible API server through a kubeconfig (objwatch
// or Kubernetes' own), and raw etcd for the ceiling, with the same load
// generator and settings on every side, so results compare side by side.
//
// The load generator is light on purpose: watchers scan the event stream for
// resourceVersions without decoding objects, so the numbers measure the
// server, not the client.
package bench

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

// Target is one API server under test.
type Target struct {
	Name string
	Host string
	// Client multiplexes requests (HTTP/2 where offered); Watch opens a
	// connection per request, as separate watching processes would.
	Client *http.Client
	Watch  *http.Client
	// Kubeconfig is the file the target was loaded from, for scenarios
	// that run client libraries (Informer).
	Kubeconfig string
}

// LoadTarget reads a kubeconfig (its current context).
func LoadTarget(name, kubeconfig string) (*Target, error) {
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return nil, fmt.Errorf("target %s: %w", name, err)
	}
	cfg.QPS, cfg.Burst = -1, 0
	c, err := rest.HTTPClientFor(cfg)
	if err != nil {
		return nil, fmt.Errorf("target %s: %w", name, err)
	}
	tc, err := rest.TLSConfigFor(cfg)
	if err != nil {
		return nil, fmt.Errorf("target %s: %w", name, err)
	}
	if tc == nil {
		tc = &tls.Config{}
	}
	watchRT := &http.Transport{
		TLSClientConfig:     tc,
		TLSNextProto:        map[string]func(string, *tls.Conn) http.RoundTripper{}, // HTTP/1.1
		MaxIdleConnsPerHost: 64,
		DialContext:         spreadLoopback(loopbackSources),
	}
	auth, err := rest.HTTPWrappersForConfig(cfg, watchRT)
	if err != nil {
		return nil, fmt.Errorf("target %s: %w", name, err)
	}
	return &Target{Name: name, Host: strings.TrimSuffix(cfg.Host, "/"), Client: c, Watch: &http.Client{Transport: auth}, Kubeconfig: kubeconfig}, nil
}

// loopbackSources is how many loopback source addresses (127.0.0.1,
// 127.0.0.2, ...) the watch connections to a loopback server spread over:
// each source address has its own ~28,000 ephemeral ports
// (net.ipv4.ip_local_port_range), too few for 50,000 watches of one server.
const loopbackSources = 8

// spreadLoopback returns a dialer that binds connections to an IPv4
// loopback address to source addresses 127.0.0.1..127.0.0.n in turn; other
// destinations dial as usual. It is safe for concurrent use.
func spreadLoopback(n int) func(ctx context.Context, network, addr string) (net.Conn, error) {
	var next atomic.Uint32
	plain := &net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second}
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		host, _, err := net.SplitHostPort(addr)
		ip := net.ParseIP(host)
		if err != nil || ip == nil || ip.To4() == nil || !ip.IsLoopback() || n < 2 {
			return plain.DialContext(ctx, network, addr)
		}
		d := *plain
		d.LocalAddr = &net.TCPAddr{IP: sourceAddr(next.Add(1), n)}
		return d.DialContext(ctx, network, addr)
	}
}

// sourceAddr is the i'th of n loopback source addresses, 127.0.0.1 to
// 127.0.0.n.
func sourceAddr(i uint32, n int) net.IP {
	return net.IPv4(127, 0, 0, byte(1+int(i%uint32(n))))
}

// do sends a request and returns the body; non-2xx is an error.
func (t *Target) do(ctx context.Context, method, path, ctype string, body []byte) ([]byte, error) {
	return t.doAccept(ctx, method, path, ctype, "application/json", body)
}

// doAccept is do with the Accept header given.
func (t *Target) doAccept(ctx context.Context, method, path, ctype, accept string, body []byte) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, method, t.Host+path, bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	if ctype != "" {
		req.Header.Set("Content-Type", ctype)
	}
	req.Header.Set("Accept", accept)
	resp, err := t.Client.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode/100 != 2 {
		return b, &statusError{resp.StatusCode, fmt.Sprintf("%s %s: %d %s", method, path, resp.StatusCode, bytes.TrimSpace(b[:min(len(b), 300)]))}
	}
	return b, nil
}

// Metric reads one unlabelled sample from the target's /metrics.
func (t *Target) Metric(ctx context.Context, name string) (float64, error) {
	b, err := t.do(ctx, "GET", "/metrics", "", nil)
	if err != nil {
		return 0, err
	}
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, name+" ") {
			return strconv.ParseFloat(strings.TrimSpace(line[len(name)+1:]), 64)
		}
	}
	return 0, fmt.Errorf("metric %s not found", name)
}

// rvIn finds the first metadata.resourceVersion value in a JSON document
// without decoding it.
func rvIn(b []byte) int64 {
	const key = `"resourceVersion":"`
	i := bytes.Index(b, []byte(key))
	if i < 0 {
		return 0
	}
	b = b[i+len(key):]
	j := bytes.IndexByte(b, '"')
	if j < 0 {
		return 0
	}
	n, _ := strconv.ParseInt(string(b[:j]), 10, 64)
	return n
}
