package ui_test

import (
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
	"testing"

	"github.com/objwatch/objwatch/testenv"
)

// cutProxy forwards TCP connections to the server until cut: then it
// closes the connections it holds and every new one at once, as a
// network that drops, until mend. Its goroutines end when the test does.
type cutProxy struct {
	addr   string
	target string
	l      net.Listener

	mu    sync.Mutex
	down  bool
	conns map[net.Conn]bool
	wg    sync.WaitGroup
}

func startProxy(t testing.TB, target string) *cutProxy {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &cutProxy{addr: l.Addr().String(), target: target, l: l, conns: map[net.Conn]bool{}}
	p.wg.Add(1)
	go p.serve()
	t.Cleanup(func() {
		l.Close()
		p.cut()
		p.wg.Wait()
	})
	return p
}

func (p *cutProxy) serve() {
	defer p.wg.Done()
	for {
		c, err := p.l.Accept()
		if err != nil {
			return
		}
		p.mu.Lock()
		down := p.down
		if !down {
			p.conns[c] = true
		}
		p.mu.Unlock()
		if down {
			c.Close()
			continue
		}
		p.wg.Add(1)
		go func() {
			defer p.wg.Done()
			p.forward(c)
		}()
	}
}

// forward copies c to a new connection to the target and back until
// either side ends.
func (p *cutProxy) forward(c net.Conn) {
	defer func() {
		p.mu.Lock()
		delete(p.conns, c)
		p.mu.Unlock()
		c.Close()
	}()
	s, err := net.Dial("tcp", p.target)
	if err != nil {
		return
	}
	p.mu.Lock()
	if p.down {
		p.mu.Unlock()
		s.Close()
		return
	}
	p.conns[s] = true
	p.mu.Unlock()
	done := make(chan struct{})
	go func() {
		io.Copy(s, c)
		s.Close()
		close(done)
	}()
	io.Copy(c, s)
	c.Close()
	<-done
	p.mu.Lock()
	delete(p.conns, s)
	p.mu.Unlock()
}

// cut closes every connection and refuses new ones until mend.
func (p *cutProxy) cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.down = true
	for c := range p.conns {
		c.Close()
	}
}

// mend lets connections through again.
func (p *cutProxy) mend() {
	p.mu.Lock()
	p.down = false
	p.mu.Unlock()
}

// startNoHistoryProxy serves plain HTTP on a loopback port, forwarding
// every request to env's server as admin except GET .../history, which
// it answers as kube-apiserver answers a subresource it does not serve.
// It returns its URL; it stops when the test ends.
func startNoHistoryProxy(t testing.TB, env *testenv.Env) string {
	t.Helper()
	target, err := url.Parse(env.Config.Host)
	if err != nil {
		t.Fatal(err)
	}
	rp := httputil.NewSingleHostReverseProxy(target)
	rp.Transport = env.HTTPClient().Transport
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasSuffix(r.URL.Path, "/history") {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusNotFound)
			io.WriteString(w, `{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"the server could not find the requested resource","reason":"NotFound","details":{},"code":404}`)
			return
		}
		rp.ServeHTTP(w, r)
	})
	srv := httptest.NewServer(h)
	t.Cleanup(func() {
		srv.Close()
		if tr, ok := rp.Transport.(*http.Transport); ok {
			tr.CloseIdleConnections()
		}
	})
	return srv.URL
}
