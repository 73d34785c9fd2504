package watchstream

import (
	"bytes"
	"context"
	"crypto/tls"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// An HTTP/2 watch hands each batch to net/http in one write, which
// net/http sends as one DATA frame (it used to send one per 4 KiB of the
// handler's buffer); a batch that reaches rawChunkLimit goes out before the
// flush; what is pending when the watch stops is sent before the end of
// the stream. The client is a bare HTTP/2 framer, to see the frames.
func TestHTTP2WriterBatches(t *testing.T) {
	event := []byte(strings.Repeat("x", 1199) + "\n")
	sawLimit := make(chan struct{}) // the client got rawChunkLimit bytes of the second batch
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithCancel(r.Context())
		defer cancel()
		ww := NewWriter(w, r, w.(http.Flusher), time.Minute, cancel)
		defer ww.Stop()
		ww.Start()
		for range 8 {
			ww.Write(event)
		}
		ww.Flush()
		for range 20 { // 24,000 bytes: past rawChunkLimit
			ww.Write(event)
		}
		select {
		case <-sawLimit:
		case <-ctx.Done():
			return
		}
		ww.Flush()
		for range 3 {
			ww.Write(event) // sent by Stop
		}
	}))
	srv.EnableHTTP2 = true
	srv.StartTLS()
	defer srv.Close()

	cfg := srv.Client().Transport.(*http.Transport).TLSClientConfig.Clone()
	cfg.NextProtos = []string{"h2"}
	conn, err := tls.Dial("tcp", srv.Listener.Addr().String(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(20 * time.Second))
	check := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	_, err = conn.Write([]byte(http2.ClientPreface))
	check(err)
	fr := http2.NewFramer(conn, conn)
	check(fr.WriteSettings(http2.Setting{ID: http2.SettingInitialWindowSize, Val: 1 << 30}))
	check(fr.WriteWindowUpdate(0, 1<<30))
	var hdr bytes.Buffer
	enc := hpack.NewEncoder(&hdr)
	for _, f := range [][2]string{{":method", "GET"}, {":scheme", "https"}, {":authority", "x"}, {":path", "/"}} {
		check(enc.WriteField(hpack.HeaderField{Name: f[0], Value: f[1]}))
	}
	check(fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: hdr.Bytes(), EndStream: true, EndHeaders: true}))

	var frames []int // the sizes of stream 1's DATA frames
	var got int      // bytes received
	for ended := false; !ended; {
		f, err := fr.ReadFrame()
		check(err)
		switch f := f.(type) {
		case *http2.SettingsFrame:
			if !f.IsAck() {
				check(fr.WriteSettingsAck())
			}
		case *http2.RSTStreamFrame:
			t.Fatalf("stream reset: %v", f.ErrCode)
		case *http2.DataFrame:
			if len(f.Data()) > 0 {
				frames = append(frames, len(f.Data()))
			}
			before := got
			got += len(f.Data())
			if before < 8*len(event)+rawChunkLimit && got >= 8*len(event)+rawChunkLimit {
				close(sawLimit)
			}
			ended = f.StreamEnded()
		}
	}
	if want := (8 + 20 + 3) * len(event); got != want {
		t.Fatalf("received %d bytes, want %d", got, want)
	}
	if frames[0] != 8*len(event) {
		t.Errorf("first batch in DATA frames of %v bytes, want one of %d", frames, 8*len(event))
	}
	if last := frames[len(frames)-1]; last != 3*len(event) {
		t.Errorf("what Stop sent: a DATA frame of %d bytes, want %d (frames %v)", last, 3*len(event), frames)
	}
}
