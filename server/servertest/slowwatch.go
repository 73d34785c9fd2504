package servertest

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"

	"io"
	"net"
	"net/http"

	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/objwatch/objwatch/testenv"
)

// BigPayload makes each event large, so that a client that does not read
// fills the socket buffers after a few dozen events.
var BigPayload = strings.Repeat("x", 200<<10)

// Client returns a client authenticated with the environment's admin
// certificate that speaks only HTTP/1.1, with a small socket receive
// buffer, or only HTTP/2, with a small stream window: either way a watch
// it does not read stalls the server after little data.
func Client(t *testing.T, env *testenv.Env, http2 bool) *http.Client {
	t.Helper()
	var protos http.Protocols
	protos.SetHTTP1(!http2)
	protos.SetHTTP2(http2)
	var d net.Dialer
	tr := &http.Transport{
		TLSClientConfig: AdminTLS(t, env),
		Protocols:       &protos,
		HTTP2:           &http.HTTP2Config{MaxReceiveBufferPerStream: 64 << 10},
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			c, err := d.DialContext(ctx, network, addr)
			if err == nil && !http2 {
				// Not much smaller: below loopback's 64 KiB segments
				// TCP falls back to zero-window probes with backoff,
				// and reading the backlog takes tens of seconds.
				c.(*net.TCPConn).SetReadBuffer(128 << 10)
			}
			return c, err
		},
	}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr}
}

// AdminTLS is a TLS client configuration with the environment's admin
// certificate, trusting its CA.
func AdminTLS(t *testing.T, env *testenv.Env) *tls.Config {
	t.Helper()
	cert, err := tls.X509KeyPair(env.Config.CertData, env.Config.KeyData)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(env.Config.CAData)
	return &tls.Config{RootCAs: pool, Certificates: []tls.Certificate{cert}}
}

// WireEvent is a watch event as far as these tests look at it.
type WireEvent struct {
	Type, RV string
	Line     []byte
}

func (e WireEvent) Status() metav1.Status {
	var ev struct{ Object metav1.Status }
	json.Unmarshal(e.Line, &ev)
	return ev.Object
}

// Events reads watch events one line at a time and picks out their type
// and resourceVersion without decoding them: encoding/json takes long over
// hundreds of 200 KiB objects under the race detector.
type Events struct{ R *bufio.Reader }

func NewEvents(body io.Reader) Events { return Events{bufio.NewReaderSize(body, 256<<10)} }

// next returns the next event; io.EOF only at a clean end of the response.
func (es Events) Next() (WireEvent, error) {
	line, err := es.R.ReadBytes('\n')
	if err != nil {
		if err == io.EOF && len(line) > 0 {
			err = io.ErrUnexpectedEOF
		}
		return WireEvent{}, err
	}
	ev := WireEvent{Line: line}
	typ, ok := bytes.CutPrefix(line, []byte(`{"type":"`))
	if i := bytes.IndexByte(typ, '"'); ok && i > 0 {
		ev.Type = string(typ[:i])
	}
	ev.RV = ResourceVersion(line)
	return ev, nil
}

// ResourceVersion returns the first resourceVersion in an encoded object
// or event: its own, for the objects these tests write.
func ResourceVersion(b []byte) string {
	const key = `"resourceVersion":"`
	i := bytes.Index(b, []byte(key))
	if i < 0 {
		return ""
	}
	rv, _, _ := bytes.Cut(b[i+len(key):], []byte(`"`))
	return string(rv)
}

// OpenWatches reads the server's gauge of ConfigMap watches being served;
// a watch stops counting when its handler returns.
func OpenWatches(a *API) int {
	a.T.Helper()
	return MetricValue(a, `objwatch_apiserver_open_watches{group="",resource="configmaps"} `)
}
