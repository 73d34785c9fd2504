package client

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"strings"
	"sync"
	"time"
)

// ExecConfig runs an exec credential plugin (kubeconfig users[].user.exec)
// to get a bearer token or client certificate, as kubectl and client-go do
// for EKS, GKE, AKS or OIDC logins.
//
// The plugin runs with the process environment plus Env, and with
// KUBERNETES_EXEC_INFO holding an ExecCredential request; it prints an
// ExecCredential with the credential. The plugin never gets a terminal:
// its stdin is empty and its stderr is captured for error messages.
//
// A REST caches the credential until its expirationTimestamp (without one,
// until the server answers 401) and runs the plugin again when it is
// needed. Its requests share one run: concurrent requests never start the
// plugin concurrently, they wait for the run in progress.
type ExecConfig struct {
	Command string // name looked up in PATH, or a path
	Args    []string
	Env     []ExecEnvVar // added to the process environment

	// APIVersion is the ExecCredential version the plugin speaks,
	// client.authentication.k8s.io/v1 or client.authentication.k8s.io/v1beta1.
	APIVersion string

	// InstallHint is shown when the command is not found.
	InstallHint string

	// ProvideClusterInfo sends the server, CA and TLS settings, and
	// ClusterConfig, in the request's spec.cluster.
	ProvideClusterInfo bool

	// InteractiveMode is "Never" or "IfAvailable" (both run the plugin
	// without a terminal; "" means Never) or "Always", which New refuses as
	// the client has no terminal to give.
	InteractiveMode string

	// ClusterConfig is the cluster's "client.authentication.k8s.io/exec"
	// extension, sent as spec.cluster.config (JSON).
	ClusterConfig json.RawMessage
}

// ExecEnvVar is one environment variable of an exec plugin.
type ExecEnvVar struct {
	Name  string
	Value string
}

const (
	execAPIv1            = "client.authentication.k8s.io/v1"
	execAPIv1beta1       = "client.authentication.k8s.io/v1beta1"
	execInfoEnv          = "KUBERNETES_EXEC_INFO"
	execClusterExtension = "client.authentication.k8s.io/exec"
	// execStderrTail is how much of a failed plugin's stderr an error
	// quotes: enough for its last few lines.
	execStderrTail = 1024
)

func (e *ExecConfig) validate() error {
	switch {
	case e.Command == "":
		return errors.New("exec: no command")
	case e.APIVersion != execAPIv1 && e.APIVersion != execAPIv1beta1:
		return fmt.Errorf("exec: apiVersion %q is not %s or %s", e.APIVersion, execAPIv1, execAPIv1beta1)
	case len(e.ClusterConfig) > 0 && !json.Valid(e.ClusterConfig):
		return errors.New("exec: cluster config is not JSON")
	}
	switch e.InteractiveMode {
	case "", "Never", "IfAvailable", "Always":
	default:
		return fmt.Errorf("exec: unknown interactiveMode %q", e.InteractiveMode)
	}
	for _, v := range e.Env {
		if v.Name == "" {
			return errors.New("exec: env variable without a name")
		}
	}
	return nil
}

// execCredential is the ExecCredential of both API versions: the request
// uses Spec, the plugin's answer Status.
type execCredential struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Spec       struct {
		Cluster     *execCluster `json:"cluster,omitempty"`
		Interactive bool         `json:"interactive"`
	} `json:"spec"`
	Status *struct {
		ExpirationTimestamp   *time.Time `json:"expirationTimestamp,omitempty"`
		Token                 string     `json:"token,omitempty"`
		ClientCertificateData string     `json:"clientCertificateData,omitempty"`
		ClientKeyData         string     `json:"clientKeyData,omitempty"`
	} `json:"status,omitempty"`
}

type execCluster struct {
	Server                   string          `json:"server"`
	TLSServerName            string          `json:"tls-server-name,omitempty"`
	InsecureSkipTLSVerify    bool            `json:"insecure-skip-tls-verify,omitempty"`
	CertificateAuthorityData []byte          `json:"certificate-authority-data,omitempty"`
	ProxyURL                 string          `json:"proxy-url,omitempty"`
	Config                   json.RawMessage `json:"config,omitempty"`
}

// execCred is a credential a plugin returned. It is never modified, so
// its pointer identifies one plugin run.
type execCred struct {
	token  string
	cert   *tls.Certificate // nil: none
	expiry time.Time        // zero: until a 401
}

// execRun is a plugin run in progress; done is closed when cred and err
// are set.
type execRun struct {
	done chan struct{}
	cred *execCred
	err  error
}

// execAuth runs cfg.Exec's plugin and caches its credential. It is safe
// for concurrent use and runs the plugin in the caller's goroutine, once at
// a time. Its certs give handshakes the plugin's client certificate and
// close the connections made with an older one.
type execAuth struct {
	cfg ExecConfig
	env []string // added to os.Environ(), with KUBERNETES_EXEC_INFO
	now func() time.Time

	mu       sync.Mutex
	cred     *execCred // nil: none yet, or refused with a 401
	run      *execRun  // nil: no run in progress
	lastCert []byte    // DER of the last client certificate, to see it change

	certs *certSource
}

func newExecAuth(cfg *Config) (*execAuth, error) {
	e := cfg.Exec
	if err := e.validate(); err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	if e.InteractiveMode == "Always" {
		return nil, errors.New("config: exec: interactiveMode Always is not supported: the plugin never gets a terminal (use IfAvailable or Never)")
	}
	req := execCredential{APIVersion: e.APIVersion, Kind: "ExecCredential"}
	if e.ProvideClusterInfo {
		ca := cfg.CAData
		if len(ca) == 0 && cfg.CAFile != "" {
			b, err := os.ReadFile(cfg.CAFile)
			if err != nil {
				return nil, fmt.Errorf("config: exec: CA: %w", err)
			}
			ca = b
		}
		req.Spec.Cluster = &execCluster{
			Server:                   cfg.Host,
			TLSServerName:            cfg.ServerName,
			InsecureSkipTLSVerify:    cfg.Insecure,
			CertificateAuthorityData: ca,
			ProxyURL:                 cfg.ProxyURL,
			Config:                   e.ClusterConfig,
		}
	}
	info, err := json.Marshal(req)
	if err != nil {
		return nil, fmt.Errorf("config: exec: %w", err)
	}
	a := &execAuth{cfg: *e, now: time.Now}
	a.certs = newCertSource(a.clientCertificate)
	for _, v := range e.Env {
		a.env = append(a.env, v.Name+"="+v.Value)
	}
	a.env = append(a.env, execInfoEnv+"="+string(info))
	return a, nil
}

// get returns the cached credential, or runs the plugin for a new one. If
// a run is in progress it waits for that run instead.
func (a *execAuth) get(ctx context.Context) (*execCred, error) {
	for {
		a.mu.Lock()
		if c := a.cred; c != nil && (c.expiry.IsZero() || !a.now().After(c.expiry)) {
			a.mu.Unlock()
			return c, nil
		}
		run := a.run
		if run == nil {
			run = &execRun{done: make(chan struct{})}
			a.run = run
			a.mu.Unlock()
			return a.runPlugin(ctx, run)
		}
		a.mu.Unlock()
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-run.done:
		}
		// The running caller's context ended, not ours: run it ourselves.
		if run.err != nil && ctx.Err() == nil && (errors.Is(run.err, context.Canceled) || errors.Is(run.err, context.DeadlineExceeded)) {
			continue
		}
		return run.cred, run.err
	}
}

// runPlugin runs the plugin for run, which the caller registered in a.run.
func (a *execAuth) runPlugin(ctx context.Context, run *execRun) (*execCred, error) {
	cred, err := a.exec(ctx)
	var certChanged bool
	a.mu.Lock()
	a.run = nil
	if err == nil {
		a.cred = cred
		if cred.cert != nil {
			der := cred.cert.Certificate[0]
			certChanged = a.lastCert != nil && !bytes.Equal(a.lastCert, der)
			a.lastCert = der
		}
	}
	a.mu.Unlock()
	run.cred, run.err = cred, err
	close(run.done)
	if certChanged {
		// Connections keep the certificate of their handshake; close them
		// so that requests reconnect with the new one (as client-go does).
		a.certs.closeConns()
	}
	return cred, err
}

// refused forgets cred after the server answered 401 to it, unless another
// request already replaced it.
func (a *execAuth) refused(cred *execCred) {
	a.mu.Lock()
	if a.cred == cred {
		a.cred = nil
	}
	a.mu.Unlock()
}

// exec runs the plugin once and parses its answer.
func (a *execAuth) exec(ctx context.Context) (*execCred, error) {
	name := a.cfg.Command
	cmd := exec.CommandContext(ctx, name, a.cfg.Args...)
	cmd.Env = append(os.Environ(), a.env...)
	var stdout bytes.Buffer
	var stderr tailWriter
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	// A plugin may leave children holding its output open; do not wait
	// for them long once it has exited.
	cmd.WaitDelay = time.Second
	err := cmd.Run()
	if ctx.Err() != nil {
		return nil, fmt.Errorf("exec plugin %s: %w", name, ctx.Err())
	}
	var exitErr *exec.ExitError
	switch {
	case err == nil:
	case errors.Is(err, exec.ErrNotFound) || errors.Is(err, fs.ErrNotExist):
		if a.cfg.InstallHint != "" {
			return nil, fmt.Errorf("exec plugin %s: %w\n%s", name, err, a.cfg.InstallHint)
		}
		return nil, fmt.Errorf("exec plugin %s: %w", name, err)
	case errors.As(err, &exitErr):
		if msg := stderr.String(); msg != "" {
			return nil, fmt.Errorf("exec plugin %s: %w: %s", name, err, msg)
		}
		return nil, fmt.Errorf("exec plugin %s: %w", name, err)
	default:
		return nil, fmt.Errorf("exec plugin %s: %w", name, err)
	}
	cred, err := a.parse(stdout.Bytes())
	if err != nil {
		return nil, fmt.Errorf("exec plugin %s: %w", name, err)
	}
	return cred, nil
}

func (a *execAuth) parse(out []byte) (*execCred, error) {
	var ec execCredential
	if err := json.Unmarshal(out, &ec); err != nil {
		return nil, fmt.Errorf("decode ExecCredential: %w", err)
	}
	if ec.APIVersion != a.cfg.APIVersion || ec.Kind != "ExecCredential" {
		return nil, fmt.Errorf("returned apiVersion %q kind %q, want %s ExecCredential", ec.APIVersion, ec.Kind, a.cfg.APIVersion)
	}
	st := ec.Status
	switch {
	case st == nil:
		return nil, errors.New("no status in ExecCredential")
	case st.Token == "" && st.ClientCertificateData == "" && st.ClientKeyData == "":
		return nil, errors.New("no token or client certificate in ExecCredential")
	case (st.ClientCertificateData == "") != (st.ClientKeyData == ""):
		return nil, errors.New("client certificate and key must be returned together")
	}
	cred := &execCred{token: st.Token}
	if st.ExpirationTimestamp != nil {
		cred.expiry = *st.ExpirationTimestamp
	}
	if st.ClientCertificateData != "" {
		pair, err := tls.X509KeyPair([]byte(st.ClientCertificateData), []byte(st.ClientKeyData))
		if err != nil {
			return nil, fmt.Errorf("client certificate: %w", err)
		}
		if pair.Leaf == nil {
			if pair.Leaf, err = x509.ParseCertificate(pair.Certificate[0]); err != nil {
				return nil, fmt.Errorf("client certificate: %w", err)
			}
		}
		cred.cert = &pair
	}
	return cred, nil
}

// clientCertificate is tls.Config.GetClientCertificate: the plugin's
// current certificate, or none if it returns a token. It uses the cached
// credential even if it just expired: requests refresh it before they
// dial (credentials.apply), and a refresh inside a handshake would close
// the very connection being made when the certificate changes. Only a
// handshake before any credential runs the plugin.
func (a *execAuth) clientCertificate(cri *tls.CertificateRequestInfo) (*tls.Certificate, error) {
	a.mu.Lock()
	cred := a.cred
	a.mu.Unlock()
	if cred == nil {
		var err error
		if cred, err = a.get(cri.Context()); err != nil {
			return nil, err
		}
	}
	if cred.cert == nil {
		return &tls.Certificate{}, nil
	}
	return cred.cert, nil
}

// tailWriter keeps the last execStderrTail bytes written to it.
type tailWriter struct {
	b   []byte
	cut bool // b lost its beginning
}

func (w *tailWriter) Write(p []byte) (int, error) {
	w.b = append(w.b, p...)
	if over := len(w.b) - execStderrTail; over > 0 {
		w.b = append(w.b[:0], w.b[over:]...)
		w.cut = true
	}
	return len(p), nil
}

// String returns the kept output, from its first whole line.
func (w *tailWriter) String() string {
	s := string(w.b)
	if w.cut {
		if i := strings.IndexByte(s, '\n'); i >= 0 {
			s = s[i+1:]
		}
	}
	return strings.TrimSpace(s)
}
