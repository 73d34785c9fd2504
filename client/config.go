package client

import (
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// Config is how to reach and authenticate to an API server, or to several
// servers of one cluster (see Hosts). The zero value is not usable: set
// Host at least, or build one with FromKubeconfig, InCluster or Default.
type Config struct {
	// Host is the server's base URL, https://host:port[/path]. A bare
	// host:port means https.
	Host string
	// Hosts are further servers of the same cluster (same etcd, same
	// credentials and CA), in the same form as Host, which is preferred
	// and comes first. With any, requests fail over between them, and
	// back to Host once it answers again (see the package doc, "Several
	// servers"). A load balancer's one URL in
	// Host needs none. From a kubeconfig: its cluster's objwatch.io/servers
	// extension.
	Hosts []string
	// StallTimeout ends a watch that asked for bookmarks
	// (allowWatchBookmarks) when no byte of it arrives for this long: its
	// Next returns an error wrapping ErrStalled, its server counts as
	// failed, and an informer resumes it, on another server if there is
	// one. Default 2 min, twice the bookmark interval of objwatch and
	// Kubernetes (1 min), so a healthy idle watch is never cut; negative:
	// never. Watches without bookmarks may be silent for any time and are
	// not checked.
	StallTimeout time.Duration
	// AttemptTimeout bounds how long one attempt of a request waits for
	// the response headers before it counts as its server's failure
	// (default 70 s, beyond the server's own 60 s request timeout, so a
	// slow but working server answers 504 first; negative: no bound). A
	// read (GET) that times out is retried on the next server; a write is
	// not, as it may have been processed. The body, a list's or a
	// watch's, is not bounded by it.
	AttemptTimeout time.Duration

	// TLS. Data fields take precedence over the matching file fields.
	// CertFile and KeyFile are re-read every minute, as cert-manager and
	// the kubelet rotate them in place: a new pair that parses is used for
	// new connections, and the connections made with the old one are
	// closed (running watches end with an error and are resumed by their
	// informers); a pair that does not parse, as in a rotation half
	// written, keeps the old one.
	CAData     []byte // PEM bundle the server's certificate must chain to
	CAFile     string
	CertData   []byte // client certificate, PEM
	CertFile   string
	KeyData    []byte // client key, PEM
	KeyFile    string
	ServerName string // overrides the name checked in the server certificate
	Insecure   bool   // skip server certificate verification (testing only)

	// Authentication. BearerTokenFile, if set, is re-read every minute (as
	// service-account tokens rotate) and wins over BearerToken.
	BearerToken     string
	BearerTokenFile string
	Username        string // basic authentication
	Password        string

	// Exec, if set, runs a credential plugin for a token or client
	// certificate. As in client-go it is used only when the config has no
	// other credentials: no BearerToken or BearerTokenFile, no Username,
	// and no client certificate and key. Its certificates need the
	// transport New builds; with Transport set only its tokens are used.
	Exec *ExecConfig

	// Namespace is the default namespace of the kubeconfig context or the
	// pod's namespace in-cluster; informational, the client never applies
	// it implicitly.
	Namespace string

	// ProxyURL, if set, sends requests through this proxy; otherwise the
	// HTTPS_PROXY/NO_PROXY environment is honoured.
	ProxyURL string

	// UserAgent is sent with each request (default "objwatch").
	UserAgent string

	// PreferCBOR makes typed clients ask for CBOR (KEP-4222's
	// application/cbor) in their reads: Get, List, ListRaw and Watch send
	// Accept: application/cbor, application/json;q=0.9, and decode each
	// answer by its Content-Type, so a server without CBOR (Kubernetes
	// before it serves CBOR, or one with the feature off) answers JSON and
	// still works. Off by default: see the package doc, "CBOR".
	PreferCBOR bool
	// PreferProtobuf makes typed clients of generated protobuf types (the
	// k8s.io/api types: ConfigMaps, Pods, Deployments, ...) ask for
	// Kubernetes' protobuf (application/vnd.kubernetes.protobuf) in their
	// reads, as kube-controller-manager and the kubelet do: Get, List,
	// ListRaw and Watch send Accept: application/vnd.kubernetes.protobuf,
	// application/json;q=0.9 and decode each answer by its Content-Type,
	// so a server that does not offer protobuf for a resource answers
	// JSON and still works. Clients of other types (custom-resource
	// structs, Unstructured) are not affected. Off by default: see the
	// package doc, "Protobuf".
	PreferProtobuf bool

	// Timeout bounds each request except watches (0: none).
	Timeout time.Duration

	// QPS and Burst limit the requests of a REST, as client-go's do: a
	// token bucket refilled with QPS tokens a second that holds at most
	// Burst (0: max(1, int(QPS))). Every request sent takes a token: gets,
	// lists, writes, the start of a watch (its events do not), and each
	// retry after a 429, 503 or 401. A request waits for its token until
	// its context ends; it then fails with the context's error wrapped
	// (context.DeadlineExceeded at once if the token would come after the
	// deadline).
	//
	// QPS 0 (the default) or negative means no limit. Unlike client-go
	// (5 QPS, burst 10) there is none by default: the server protects
	// itself with priority and fairness, and requests it refuses with 429
	// or 503 and a Retry-After are retried after the delay it asks for, so
	// a client-side limit would only slow down relists and bursts the
	// server can take. Set one to be a polite client of a server without
	// such protection.
	QPS   float32
	Burst int

	// Transport, if set, replaces the transport New builds (the TLS fields
	// above are then ignored).
	Transport http.RoundTripper
	// WrapTransport, if set, wraps the transport (for tracing, or tests
	// that cut connections).
	WrapTransport func(http.RoundTripper) http.RoundTripper
}

// In-cluster service-account paths, variables so tests can move them.
var (
	serviceAccountDir = "/var/run/secrets/kubernetes.io/serviceaccount"
)

// ErrNotInCluster is returned by InCluster outside a Kubernetes pod.
var ErrNotInCluster = errors.New("not running in a cluster: KUBERNETES_SERVICE_HOST and KUBERNETES_SERVICE_PORT must be set")

// InCluster returns the config of a pod's service account: the API server
// from KUBERNETES_SERVICE_HOST/PORT, the mounted CA, token (re-read as it
// rotates) and namespace.
func InCluster() (*Config, error) {
	host, port := os.Getenv("KUBERNETES_SERVICE_HOST"), os.Getenv("KUBERNETES_SERVICE_PORT")
	if host == "" || port == "" {
		return nil, ErrNotInCluster
	}
	tokenFile := filepath.Join(serviceAccountDir, "token")
	if _, err := os.Stat(tokenFile); err != nil {
		return nil, fmt.Errorf("in-cluster config: %w", err)
	}
	cfg := &Config{
		Host:            "https://" + joinHostPort(host, port),
		CAFile:          filepath.Join(serviceAccountDir, "ca.crt"),
		BearerTokenFile: tokenFile,
	}
	if ns, err := os.ReadFile(filepath.Join(serviceAccountDir, "namespace")); err == nil {
		cfg.Namespace = strings.TrimSpace(string(ns))
	}
	return cfg, nil
}

func joinHostPort(host, port string) string {
	if strings.Contains(host, ":") && !strings.HasPrefix(host, "[") {
		return "[" + host + "]:" + port
	}
	return host + ":" + port
}

// Default returns the config most programs want, the way kubectl finds it:
// the kubeconfig files named by KUBECONFIG, else ~/.kube/config, with their
// current context; if there are none, the in-cluster config.
func Default() (*Config, error) {
	if len(kubeconfigPaths()) == 0 {
		if cfg, err := InCluster(); err == nil {
			return cfg, nil
		}
		return nil, errors.New("no configuration: KUBECONFIG and ~/.kube/config do not exist and not running in a cluster")
	}
	return FromKubeconfig("", "")
}

// kubeconfigPaths lists the kubeconfig files that exist: those in
// KUBECONFIG, else ~/.kube/config.
func kubeconfigPaths() []string {
	var out []string
	if env := os.Getenv("KUBECONFIG"); env != "" {
		for _, p := range filepath.SplitList(env) {
			if p == "" {
				continue
			}
			if _, err := os.Stat(p); err == nil {
				out = append(out, p)
			}
		}
		return out
	}
	if home, err := os.UserHomeDir(); err == nil {
		p := filepath.Join(home, ".kube", "config")
		if _, err := os.Stat(p); err == nil {
			out = append(out, p)
		}
	}
	return out
}

// hasStaticAuth reports whether c has credentials that make Exec unused,
// by client-go's rules.
func (c *Config) hasStaticAuth() bool {
	cert := len(c.CertData) > 0 || c.CertFile != ""
	key := len(c.KeyData) > 0 || c.KeyFile != ""
	return c.BearerToken != "" || c.BearerTokenFile != "" || c.Username != "" || cert && key
}

// baseURLs parses Host and Hosts, dropping repeated URLs.
func (c *Config) baseURLs() ([]*url.URL, error) {
	if c.Host == "" {
		return nil, errors.New("config: no host")
	}
	var out []*url.URL
	seen := map[string]bool{}
	for _, h := range append([]string{c.Host}, c.Hosts...) {
		u, err := parseHost(h)
		if err != nil {
			return nil, err
		}
		if !seen[u.String()] {
			seen[u.String()] = true
			out = append(out, u)
		}
	}
	return out, nil
}

// parseHost parses one server URL.
func parseHost(h string) (*url.URL, error) {
	if h == "" {
		return nil, errors.New("config: empty host")
	}
	if !strings.Contains(h, "://") {
		h = "https://" + h
	}
	u, err := url.Parse(h)
	if err != nil {
		return nil, fmt.Errorf("config: host: %w", err)
	}
	if u.Scheme != "https" && u.Scheme != "http" {
		return nil, fmt.Errorf("config: host %s: unsupported scheme %q", h, u.Scheme)
	}
	if u.Host == "" {
		return nil, fmt.Errorf("config: host %s: no host name", h)
	}
	u.Path = strings.TrimSuffix(u.Path, "/")
	u.RawQuery, u.Fragment = "", ""
	return u, nil
}
