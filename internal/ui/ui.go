// Package ui is `objwatch ui`: a local web page over any Kubernetes API
// server, on the user's own credentials (like kubectl proxy), showing
// live changes with their field-level diffs, an object's YAML with its
// blame and history, a namespace's timeline of changes, and audit
// records where they can be read.
//
// The server is read-only and guarded: Handler answers only GET and
// HEAD, only requests whose Host is the listen address, none that comes
// from another origin, and none without the random token (given once in
// the URL printed at start, then as an HttpOnly SameSite=Strict cookie).
// It never forwards a request path to the API server: each of its JSON
// endpoints builds its own read requests. The page is plain HTML, CSS
// and JavaScript embedded in the binary; nothing is loaded from the
// network, and credentials never reach it.
//
// It is a client of the API server only (objwatch's client library and
// internal/explain): it imports no server or storage package.
//
// Concurrency: a Server is safe for concurrent use. It owns the
// goroutines of its live streams' watches (one per resource, namespace
// and selector watched, shared by every page that shows them); Close
// stops them and waits for them.
package ui

import (
	"context"
	"crypto/rand"
	"crypto/subtle"
	"embed"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io/fs"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/objwatch/objwatch/client"
)

//go:embed assets
var assets embed.FS

// Config configures a Server.
type Config struct {
	// REST reaches the API server, with the user's credentials.
	REST *client.REST
	// Addr is the address the page is served at (host:port, as in the
	// URL): requests whose Host header is another are refused.
	Addr string
	// Token guards every request; NewToken makes one.
	Token string
	// Audit, when set, searches an audit log (objwatch serve
	// --audit-log-path); the page's audit search is then available.
	Audit AuditSearch
	// Idle is how long a live watch nobody streams is kept (for a page
	// that reconnects); 0 means a minute.
	Idle time.Duration
	// Ring is how many events each live watch keeps, at most (and at
	// least three quarters of it once full), for streams that resume;
	// 0 means 4096.
	Ring int
	// Now is the clock (tests); nil means time.Now.
	Now func() time.Time
}

// NewToken returns a random token of 128 bits, hex-encoded.
func NewToken() (string, error) {
	b := make([]byte, 16)
	if _, err := rand.Read(b); err != nil {
		return "", err
	}
	return hex.EncodeToString(b), nil
}

// Server serves the page and its JSON endpoints.
type Server struct {
	cfg    Config
	cookie string
	mux    *http.ServeMux

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu   sync.Mutex
	hubs map[hubKey]*hub
}

// New returns a Server; Close stops it.
func New(cfg Config) (*Server, error) {
	if cfg.REST == nil || cfg.Addr == "" || len(cfg.Token) < 16 {
		return nil, errors.New("ui: Config needs REST, Addr and a Token of at least 16 characters")
	}
	if cfg.Idle == 0 {
		cfg.Idle = time.Minute
	}
	if cfg.Ring == 0 {
		cfg.Ring = 4096
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	_, port, _ := net.SplitHostPort(cfg.Addr)
	s := &Server{cfg: cfg, cookie: "objwatch-ui-" + port, mux: http.NewServeMux(), hubs: map[hubKey]*hub{}}
	s.ctx, s.cancel = context.WithCancel(context.Background())
	static, _ := fs.Sub(assets, "assets")
	files := http.FileServerFS(static)
	s.mux.Handle("/assets/", http.StripPrefix("/assets/", files))
	s.mux.HandleFunc("/{$}", func(w http.ResponseWriter, r *http.Request) {
		r.URL.Path = "/"
		files.ServeHTTP(w, r)
	})
	s.mux.HandleFunc("/api/resources", s.serveResources)
	s.mux.HandleFunc("/api/live", s.serveLive)
	s.mux.HandleFunc("/api/object", s.serveObject)
	s.mux.HandleFunc("/api/diff", s.serveDiff)
	s.mux.HandleFunc("/api/dependents", s.serveDependents)
	s.mux.HandleFunc("/api/timeline", s.serveTimeline)
	s.mux.HandleFunc("/api/audit", s.serveAudit)
	return s, nil
}

// URL is the address to open: the page with the token.
func (s *Server) URL() string {
	return "http://" + s.cfg.Addr + "/?token=" + s.cfg.Token
}

// Close stops the live watches and waits for their goroutines. Streams
// still open end.
func (s *Server) Close() {
	s.cancel()
	s.wg.Wait()
}

// Handler is the guarded handler of every request.
func (s *Server) Handler() http.Handler {
	return http.HandlerFunc(s.guard)
}

// guard refuses what the page never sends: another method than GET or
// HEAD (405), another Host (403, against DNS rebinding), a request from
// another origin (403), one without the token (401). A request with the
// right token in its URL gets the cookie and is sent to the same URL
// without it.
func (s *Server) guard(w http.ResponseWriter, r *http.Request) {
	h := w.Header()
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("X-Frame-Options", "DENY")
	h.Set("Referrer-Policy", "no-referrer")
	h.Set("Cache-Control", "no-store")
	h.Set("Content-Security-Policy", "default-src 'self'; img-src 'self' data:; style-src 'self'; script-src 'self'; connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'none'")
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		h.Set("Allow", "GET, HEAD")
		httpError(w, http.StatusMethodNotAllowed, "the page is read-only: only GET and HEAD are served")
		return
	}
	if !s.sameHost(r.Host) {
		httpError(w, http.StatusForbidden, "Host "+r.Host+" is not the address this page is served at")
		return
	}
	if o := r.Header.Get("Origin"); o != "" && o != "http://"+r.Host {
		httpError(w, http.StatusForbidden, "cross-origin request refused")
		return
	}
	switch r.Header.Get("Sec-Fetch-Site") {
	case "", "same-origin", "none":
	default:
		httpError(w, http.StatusForbidden, "cross-site request refused")
		return
	}
	if t := r.URL.Query().Get("token"); t != "" {
		if !s.validToken(t) {
			httpError(w, http.StatusUnauthorized, "wrong token: use the URL objwatch ui printed")
			return
		}
		http.SetCookie(w, &http.Cookie{Name: s.cookie, Value: s.cfg.Token, Path: "/", HttpOnly: true, SameSite: http.SameSiteStrictMode})
		q := r.URL.Query()
		q.Del("token")
		u := url.URL{Path: r.URL.Path, RawQuery: q.Encode()}
		http.Redirect(w, r, u.String(), http.StatusSeeOther)
		return
	}
	c, err := r.Cookie(s.cookie)
	if err != nil || !s.validToken(c.Value) {
		httpError(w, http.StatusUnauthorized, "no token: open the URL objwatch ui printed")
		return
	}
	s.mux.ServeHTTP(w, r)
}

func (s *Server) validToken(t string) bool {
	return subtle.ConstantTimeCompare([]byte(t), []byte(s.cfg.Token)) == 1
}

// sameHost: host is the listen address, or localhost with its port when
// it listens on a loopback address.
func (s *Server) sameHost(host string) bool {
	if strings.EqualFold(host, s.cfg.Addr) {
		return true
	}
	lh, lp, err := net.SplitHostPort(s.cfg.Addr)
	if err != nil {
		return false
	}
	h, p, err := net.SplitHostPort(host)
	if err != nil || p != lp {
		return false
	}
	ip := net.ParseIP(lh)
	return strings.EqualFold(h, "localhost") && ip != nil && ip.IsLoopback()
}

// httpError answers a plain-text error.
func httpError(w http.ResponseWriter, code int, msg string) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.WriteHeader(code)
	w.Write([]byte(msg + "\n"))
}

// writeJSON answers v as JSON.
func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	enc := json.NewEncoder(w)
	enc.Encode(v)
}

// apiError answers a failed read of the API server: its status code
// where it has one (404, 403...), else 502, and the message as JSON.
func apiError(w http.ResponseWriter, code int, err error) {
	var se *client.StatusError
	if errors.As(err, &se) && se.ErrStatus.Code >= 400 {
		code = int(se.ErrStatus.Code)
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	json.NewEncoder(w).Encode(map[string]string{"error": err.Error()})
}
