package watchstream

import (
	"context"
	"net/http"
	"time"
)

// Start sends the headers of a watch response, with Content-Type
// application/json unless the caller set one. An HTTP/1.1 watch then
// takes its connection from net/http (see rawStream).
func (ww *Writer) Start() {
	h := ww.w.Header()
	if h.Get("Content-Type") == "" {
		h.Set("Content-Type", "application/json")
	}
	h.Set("Cache-Control", "no-cache, private")
	takeover := ww.cancel != nil && ww.r != nil && ww.r.ProtoMajor == 1 && ww.r.ProtoMinor >= 1
	if takeover {
		h.Set("Connection", "close")
	}
	ww.w.WriteHeader(http.StatusOK)
	if takeover {
		if ww.raw = takeConn(ww.rc, ww.cancel); ww.raw != nil {
			ww.armed = time.Time{} // the deadline was cleared
			return
		}
	}
	ww.Flush()
}

// Writer writes one watch response and bounds how long a write to a
// client that stopped reading may block. Before every write and flush the
// connection's write deadline is moved to now+timeout, but at most once per
// step (a second, or a quarter of a shorter timeout), which keeps it off the
// per-event path; an idle watch moves it before it expires (see Idle). So a
// write or flush blocked for between timeout-step and timeout fails: on
// HTTP/1.1 the connection is broken and closed, on HTTP/2 the stream is
// reset; either way the request's context ends, which ends the watch.
//
// An HTTP/1.1 watch writes to its connection itself once the headers are
// out (see rawStream); Write then buffers and Flush writes one chunk.
// Otherwise (HTTP/2) Write buffers too and Flush hands the batch to the
// ResponseWriter in one Write: Go's HTTP/2 server (net/http's, or
// golang.org/x/net's, which objwatch serves) takes each 4 KiB of a
// handler's buffered output to the connection's serve goroutine in a round
// trip of its own, and writes a DATA frame too large for its 4 KiB
// connection buffer from a goroutine of its own; one Write of a batch is
// one round trip and one frame (see BenchmarkFanout). A batch that reaches
// rawChunkLimit goes out without waiting for the flush, and Stop hands
// what is pending to net/http, which sends it before it ends the response.
//
// A Writer belongs to the goroutine serving the watch, which must call
// Stop when done.
type Writer struct {
	w      http.ResponseWriter
	f      http.Flusher
	rc     *http.ResponseController
	r      *http.Request      // nil: never take the connection
	cancel context.CancelFunc // ends the watch; nil: never take the connection
	raw    *rawStream         // the taken connection, or nil
	pend   pending            // output not yet handed to w (raw nil)

	timeout, step time.Duration // timeout 0: no deadline
	armed         time.Time     // the deadline is armed+timeout
	idleT         *time.Timer
	idleFor       time.Time // the armed idleT was set for
}

// NewWriter returns the writer of a watch response to r. cancel ends
// the watch; it is called when the client closes a taken connection. With
// a nil r or cancel the connection stays with net/http.
func NewWriter(w http.ResponseWriter, r *http.Request, f http.Flusher, timeout time.Duration, cancel context.CancelFunc) *Writer {
	ww := &Writer{w: w, f: f, rc: http.NewResponseController(w), r: r, cancel: cancel}
	if timeout > 0 {
		ww.timeout, ww.step = timeout, min(time.Second, timeout/4)
	}
	return ww
}

// extend moves the write deadline to now+timeout unless it did so less
// than step ago.
func (ww *Writer) extend() {
	if ww.timeout == 0 {
		return
	}
	now := time.Now()
	if now.Sub(ww.armed) < ww.step {
		return
	}
	setDeadline := ww.rc.SetWriteDeadline
	if ww.raw != nil {
		setDeadline = ww.raw.conn.SetWriteDeadline
	}
	if err := setDeadline(now.Add(ww.timeout)); err != nil {
		ww.timeout = 0 // not a network connection (handler tests)
		return
	}
	ww.armed = now
}

func (ww *Writer) Write(p []byte) (int, error) {
	if ww.raw != nil {
		if ww.raw.pend.fills(len(p)) {
			ww.extend() // the write sends the pending chunk
		}
		return ww.raw.Write(p)
	}
	full := ww.pend.fills(len(p))
	ww.pend.add(p)
	if full {
		if err := ww.send(); err != nil {
			return 0, err
		}
	}
	return len(p), nil
}

// send hands the pending output to net/http in one Write.
func (ww *Writer) send() error {
	if ww.pend.buf == nil {
		return nil
	}
	ww.extend()
	b := *ww.pend.buf
	if _, err := ww.w.Write(b[chunkRoom:]); err != nil {
		ww.pend.buf = nil // not pooled: net/http may not be done with it
		return err
	}
	ww.pend.release(b)
	return nil
}

func (ww *Writer) Flush() {
	ww.extend()
	if ww.raw != nil {
		ww.raw.flush()
		return
	}
	ww.send()
	ww.f.Flush()
}

// Idle returns a channel for a watch waiting for events to wait on too:
// it fires half a timeout after the deadline was last moved, and the watch
// then calls Idle again, which moves it. HTTP/2 resets a stream whose
// deadline passes even when nothing is being written, so an idle watch
// must keep its deadline ahead. It returns nil when there is no deadline.
func (ww *Writer) Idle() <-chan time.Time {
	if ww.raw != nil {
		return nil // a connection's deadline only bounds writes
	}
	ww.extend()
	if ww.timeout == 0 {
		return nil
	}
	if ww.idleFor != ww.armed {
		d := time.Until(ww.armed.Add(ww.timeout / 2))
		if ww.idleT == nil {
			ww.idleT = time.NewTimer(d)
		} else {
			ww.idleT.Reset(d)
		}
		ww.idleFor = ww.armed
	}
	return ww.idleT.C
}

// Stop releases the idle timer and hands what is pending to net/http (or
// writes it to a taken connection). The deadline stays: it bounds the
// final flush net/http does after the handler returns.
func (ww *Writer) Stop() {
	if ww.idleT != nil {
		ww.idleT.Stop()
	}
	ww.extend()
	if ww.raw != nil {
		ww.raw.close()
		return
	}
	ww.send()
}
