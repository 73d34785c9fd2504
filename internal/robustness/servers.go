package robustness

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/objwatch/objwatch/server/auth"
)

// apiServer is one `objwatch serve` process, reaching the etcd members
// through its own proxies (one per member slot). It keeps its port and
// data dir across restarts.
type apiServer struct {
	name    string
	url     string
	proxies []*proxy // every proxy to etcd: the main cluster's, then the override's
	// faulted are the proxies to the faulted cluster's members, in its
	// slot order (the override cluster with Config.Override, else the
	// main one): a replaced member's new address goes to its slot here.
	faulted []*proxy
	proc    *process
}

// sharedPKI creates, in dir, the credentials every server of the run
// uses: one CA, a serving certificate for 127.0.0.1, the admin client
// certificate and the service-account key, so that a client of one server
// is a client of all (as servers of one etcd must share them).
func sharedPKI(dir string) (*tls.Config, error) {
	c, err := auth.EnsureCredentials(dir, []string{"127.0.0.1"})
	if err != nil {
		return nil, err
	}
	if _, err := auth.EnsureServiceAccountKey(dir); err != nil {
		return nil, err
	}
	cert, err := tls.X509KeyPair(c.AdminCertPEM, c.AdminKeyPEM)
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(c.CACertPEM)
	return &tls.Config{RootCAs: pool, Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}, nil
}

// copyDir copies the regular files of src into dst.
func copyDir(dst, src string) error {
	if err := os.MkdirAll(dst, 0o700); err != nil {
		return err
	}
	ents, err := os.ReadDir(src)
	if err != nil {
		return err
	}
	for _, e := range ents {
		if !e.Type().IsRegular() {
			continue
		}
		b, err := os.ReadFile(filepath.Join(src, e.Name()))
		if err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(dst, e.Name()), b, 0o600); err != nil {
			return err
		}
	}
	return nil
}

// newAPIServer prepares (does not start) server name in dir with the
// shared pki and proxies to targets.
// newAPIServer prepares a server of the etcd cluster at targets, with the
// ConfigMaps on the cluster at overrides if any; the server reaches each
// member through a proxy of its own (the network faults').
func newAPIServer(bin, name, dir, pki, logDir string, targets, overrides, extra []string) (*apiServer, error) {
	data := filepath.Join(dir, name)
	if err := copyDir(filepath.Join(data, "pki"), pki); err != nil {
		return nil, err
	}
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	s := &apiServer{name: name, url: fmt.Sprintf("https://127.0.0.1:%d", port)}
	proxied := func(targets []string) ([]string, error) {
		var eps []string
		for _, t := range targets {
			p, err := newProxy(strings.TrimPrefix(t, "http://"))
			if err != nil {
				return nil, err
			}
			s.proxies = append(s.proxies, p)
			eps = append(eps, "http://"+p.addr())
		}
		return eps, nil
	}
	eps, err := proxied(targets)
	if err != nil {
		s.close()
		return nil, err
	}
	s.faulted = s.proxies
	args := []string{
		"serve", "--data-dir=" + data, fmt.Sprintf("--listen=127.0.0.1:%d", port),
		"--etcd-servers=" + strings.Join(eps, ","),
		// The harness compacts (never past what its history has read).
		"--compaction-interval=0",
	}
	if len(overrides) > 0 {
		n := len(s.proxies)
		oeps, err := proxied(overrides)
		if err != nil {
			s.close()
			return nil, err
		}
		s.faulted = s.proxies[n:]
		args = append(args, "--etcd-servers-overrides=/configmaps#"+strings.Join(oeps, ";"))
	}
	args = append(args, extra...)
	s.proc = &process{name: name, path: bin, args: args, logPath: filepath.Join(logDir, name+".log")}
	return s, nil
}

// waitReady waits until the server answers /readyz with 200.
func (s *apiServer) waitReady(ctx context.Context, hc *http.Client, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var last string
	for {
		rctx, rcancel := context.WithTimeout(ctx, time.Second)
		req, _ := http.NewRequestWithContext(rctx, http.MethodGet, s.url+"/readyz", nil)
		resp, err := hc.Do(req)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				rcancel()
				return nil
			}
			last = resp.Status
		} else {
			last = err.Error()
		}
		rcancel()
		if !s.proc.alive() {
			return fmt.Errorf("%s exited: %w; the end of its log:\n%s", s.name, errExited, logTail(s.proc.logPath, 2000))
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s not ready: %s", s.name, last)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// gcLeader asks the server's metrics whether it runs the garbage
// collector now.
func (s *apiServer) gcLeader(ctx context.Context, hc *http.Client) (bool, error) {
	m, err := s.metrics(ctx, hc, "objwatch_gc_leader")
	if err != nil {
		return false, err
	}
	v, ok := m["objwatch_gc_leader"]
	if !ok {
		return false, fmt.Errorf("metrics: no objwatch_gc_leader")
	}
	return v == 1, nil
}

// metrics reads the named unlabelled metrics from the server's /metrics;
// a name it does not find is absent from the map.
func (s *apiServer) metrics(ctx context.Context, hc *http.Client, names ...string) (map[string]float64, error) {
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, s.url+"/metrics", nil)
	resp, err := hc.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("metrics: %s", resp.Status)
	}
	out := map[string]float64{}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		name, v, ok := strings.Cut(sc.Text(), " ")
		if !ok || !slices.Contains(names, name) {
			continue
		}
		if f, err := strconv.ParseFloat(strings.TrimSpace(v), 64); err == nil {
			out[name] = f
		}
	}
	return out, sc.Err()
}

var errExited = errors.New("exited")

// logTail is the last n bytes of the log at path.
func logTail(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	return string(b[max(0, len(b)-n):])
}

// startReady starts the server and waits until it is ready; when its
// port was taken meanwhile (freePort's race), it moves to another.
func (s *apiServer) startReady(ctx context.Context, hc *http.Client) error {
	for range 3 {
		if err := s.proc.start(); err != nil {
			return err
		}
		err := s.waitReady(ctx, hc, 60*time.Second)
		if err == nil || !errors.Is(err, errExited) || !strings.Contains(err.Error(), "address already in use") {
			return err
		}
		s.proc.kill()
		port, perr := freePort()
		if perr != nil {
			return perr
		}
		s.url = fmt.Sprintf("https://127.0.0.1:%d", port)
		for i, a := range s.proc.args {
			if strings.HasPrefix(a, "--listen=") {
				s.proc.args[i] = fmt.Sprintf("--listen=127.0.0.1:%d", port)
			}
		}
	}
	return fmt.Errorf("%s: no free port", s.name)
}

func (s *apiServer) close() {
	if s.proc != nil {
		s.proc.kill()
	}
	for _, p := range s.proxies {
		p.close()
	}
}
