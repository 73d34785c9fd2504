package robustness

import (
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// proxy forwards TCP connections from a loopback port to a target (an
// etcd member's client port), and can delay, blackhole or cut them: the
// network between one objwatch server and one etcd member. Its methods are
// safe for concurrent use; Close stops its goroutines.
type proxy struct {
	ln        net.Listener
	target    atomic.Pointer[string]
	delay     atomic.Int64 // nanoseconds added to every chunk forwarded
	blackhole atomic.Bool  // while set, nothing is forwarded (bytes wait)

	mu     sync.Mutex
	conns  map[net.Conn]struct{}
	closed bool
	wg     sync.WaitGroup
}

func newProxy(target string) (*proxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &proxy{ln: ln, conns: map[net.Conn]struct{}{}}
	p.target.Store(&target)
	p.wg.Go(p.accept)
	return p, nil
}

func (p *proxy) addr() string { return p.ln.Addr().String() }

// setTarget sends new connections to target (a replaced member).
func (p *proxy) setTarget(target string) { p.target.Store(&target) }

// reset cuts every open connection (both ends see it closed).
func (p *proxy) reset() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for c := range p.conns {
		c.Close()
	}
}

func (p *proxy) track(c net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		c.Close()
		return false
	}
	p.conns[c] = struct{}{}
	return true
}

func (p *proxy) untrack(c net.Conn) {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.conns, c)
	c.Close()
}

func (p *proxy) accept() {
	for {
		in, err := p.ln.Accept()
		if err != nil {
			return
		}
		if !p.track(in) {
			continue
		}
		p.wg.Go(func() {
			defer p.untrack(in)
			out, err := net.DialTimeout("tcp", *p.target.Load(), 2*time.Second)
			if err != nil || !p.track(out) {
				return
			}
			defer p.untrack(out)
			var wg sync.WaitGroup
			wg.Go(func() { p.pipe(out, in); out.Close() })
			p.pipe(in, out)
			in.Close()
			wg.Wait()
		})
	}
}

// pipe copies src to dst, chunk by chunk, with the proxy's delay and
// blackhole, until either fails.
func (p *proxy) pipe(dst, src net.Conn) {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			for p.blackhole.Load() && !p.isClosed() {
				time.Sleep(10 * time.Millisecond)
			}
			if d := time.Duration(p.delay.Load()); d > 0 {
				time.Sleep(d)
			}
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

func (p *proxy) isClosed() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.closed
}

// close stops accepting, cuts every connection and waits for the
// goroutines.
func (p *proxy) close() {
	p.ln.Close()
	p.mu.Lock()
	p.closed = true
	p.mu.Unlock()
	p.reset()
	p.wg.Wait()
}
