package server_test

import (
	"bytes"
	"crypto/tls"
	"fmt"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"

	"github.com/objwatch/objwatch/server"
	"github.com/objwatch/objwatch/server/servertest"
	"github.com/objwatch/objwatch/testenv"
)

// An HTTP/2 client that stops reading its connection altogether blocks
// every write to it, stream resets included, so the per-watch write
// timeout cannot end its watches: the server closes the connection once it
// has accepted no bytes for the HTTP/2 write-byte timeout, which ends them.
// The client here is a bare HTTP/2 framer that opens a watch with a large
// window, then never reads again.
func TestHTTP2StuckConnectionClosed(t *testing.T) {
	env := testenv.Start(t,
		testenv.WithHTTP2WriteByteTimeout(2*time.Second),
		testenv.WithServerConfig(func(c *server.Config) { c.WatchWriteTimeout = 10 * time.Minute }))
	a := servertest.NewAPI(t, env)
	for i := range 40 { // 8 MB of initial events: more than the socket buffers hold
		r := a.JSON("POST", servertest.CMs, fmt.Sprintf(`{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"big-%d"},"data":{"k":%q}}`, i, servertest.BigPayload))
		servertest.MustCode(t, "create", r, http.StatusCreated)
	}
	base := servertest.OpenWatches(a)

	conn := dialHTTP2(t, env)
	defer conn.Close()
	fr := http2.NewFramer(conn, conn)
	if _, err := conn.Write([]byte(http2.ClientPreface)); err != nil {
		t.Fatal(err)
	}
	check := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	check(fr.WriteSettings(http2.Setting{ID: http2.SettingInitialWindowSize, Val: 1<<31 - 1}))
	check(fr.WriteWindowUpdate(0, 1<<31-1-65535))
	var hdr bytes.Buffer
	enc := hpack.NewEncoder(&hdr)
	host := strings.TrimPrefix(env.Config.Host, "https://")
	for _, f := range [][2]string{
		{":method", "GET"}, {":scheme", "https"}, {":authority", host},
		{":path", servertest.CMs + "?watch=true&resourceVersion=0"}, {"accept", "application/json"},
	} {
		check(enc.WriteField(hpack.HeaderField{Name: f[0], Value: f[1]}))
	}
	check(fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: hdr.Bytes(), EndStream: true, EndHeaders: true}))

	// Read until the watch's response headers, acknowledging the server's
	// settings; from then on, read nothing.
	conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	for answered := false; !answered; {
		f, err := fr.ReadFrame()
		check(err)
		switch f := f.(type) {
		case *http2.SettingsFrame:
			if !f.IsAck() {
				check(fr.WriteSettingsAck())
			}
		case *http2.HeadersFrame:
			answered = f.StreamID == 1
		case *http2.GoAwayFrame:
			t.Fatalf("GOAWAY before the watch was answered: %v", f.ErrCode)
		}
	}
	if err := servertest.WaitOpenWatches(a, base+1); err != nil {
		t.Fatal(err)
	}
	// The watch's writes fill the socket buffers and stop; after the
	// write-byte timeout the connection is closed and the watch ends.
	start := time.Now()
	if err := servertest.WaitOpenWatches(a, base); err != nil {
		t.Fatalf("the stuck connection's watch still open after %v: %v", time.Since(start), err)
	}
	// The connection is gone: reading it (draining what was buffered)
	// ends in an error, not a deadline.
	conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	for {
		if _, err := fr.ReadFrame(); err != nil {
			if ne, ok := err.(net.Error); ok && ne.Timeout() {
				t.Fatal("the connection is still open")
			}
			break
		}
	}
}

// dialHTTP2 opens a TLS connection negotiating HTTP/2 with the admin
// certificate and a small receive buffer.
func dialHTTP2(t *testing.T, env *testenv.Env) *tls.Conn {
	t.Helper()
	cfg := servertest.AdminTLS(t, env)
	cfg.NextProtos, cfg.ServerName = []string{"h2"}, "127.0.0.1"
	raw, err := net.Dial("tcp", strings.TrimPrefix(env.Config.Host, "https://"))
	if err != nil {
		t.Fatal(err)
	}
	raw.(*net.TCPConn).SetReadBuffer(128 << 10)
	conn := tls.Client(raw, cfg)
	if err := conn.Handshake(); err != nil {
		raw.Close()
		t.Fatal(err)
	}
	if p := conn.ConnectionState().NegotiatedProtocol; p != "h2" {
		conn.Close()
		t.Fatalf("negotiated %q, want h2", p)
	}
	return conn
}
