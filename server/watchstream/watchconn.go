package watchstream

import (
	"context"
	"net"
	"net/http"
	"strconv"
	"sync"
)

// rawStream is the body of an HTTP/1.1 watch response written straight to
// the connection, which the watch takes from net/http once the headers are
// out (Hijack). net/http writes a response through two buffers (2 KiB and
// 4 KiB) and so one system call and one TLS record per 4 KiB; here each
// flush is one chunk of the chunked encoding written in one call, however
// many events it carries (up to rawChunkLimit). Over loopback TLS that
// costs 11% less CPU per event at one event per flush and a third less at
// ten (BenchmarkDeliveryFloor, the one-write cases).
//
// The response announces Connection: close, and the connection is closed
// after the last chunk: it cannot be handed back to net/http. Since
// net/http no longer reads the connection, a goroutine does, to end the
// watch (cancel) when the client closes it.
//
// A rawStream belongs to the goroutine serving the watch; close stops its
// reader goroutine.
type rawStream struct {
	conn       net.Conn
	pend       pending
	err        error // the first write error; the stream is dead after it
	readerDone chan struct{}
}

const (
	// chunkRoom is reserved before the data for the chunk-size line.
	chunkRoom = 12
	// rawChunkLimit: a pending chunk this large is written without
	// waiting for the flush (a TLS record carries at most 16 KiB).
	rawChunkLimit = 16<<10 - 64
	// chunkBufCap: pooled buffers hold a full chunk, its CRLF and the
	// write that filled it (1 KiB events); larger ones are not pooled.
	chunkBufCap = chunkRoom + rawChunkLimit + 2 + 1<<10
)

var chunkBufs = sync.Pool{New: func() any {
	b := make([]byte, chunkRoom, chunkBufCap)
	return &b
}}

// pending is the output of a watch waiting for its flush, in a pooled
// buffer (chunkRoom bytes reserved in front, for a chunk header), or
// nothing: an idle watch holds no buffer. It belongs to its watch's
// goroutine.
type pending struct {
	buf *[]byte // nil when nothing is pending
}

// add appends p.
func (pd *pending) add(p []byte) {
	if pd.buf == nil {
		pd.buf = chunkBufs.Get().(*[]byte)
	}
	*pd.buf = append(*pd.buf, p...)
}

// size is how many bytes are pending.
func (pd *pending) size() int {
	if pd.buf == nil {
		return 0
	}
	return len(*pd.buf) - chunkRoom
}

// fills reports whether n more bytes make the pending output as large as
// a batch is let grow (rawChunkLimit) before it is written without waiting
// for the flush.
func (pd *pending) fills(n int) bool { return pd.size()+n >= rawChunkLimit }

// release returns the buffer to the pool unless it grew past the pooled
// size; b is the buffer as last used (it may have been appended to).
func (pd *pending) release(b []byte) {
	if cap(b) <= chunkBufCap {
		*pd.buf = b[:chunkRoom]
		chunkBufs.Put(pd.buf)
	}
	pd.buf = nil
}

// takeConn takes the connection of an HTTP/1.1 response whose headers
// have been written, or returns nil (HTTP/2, or a ResponseWriter that
// cannot give it up). cancel is called when the client closes it.
func takeConn(rc *http.ResponseController, cancel context.CancelFunc) *rawStream {
	conn, _, err := rc.Hijack()
	if err != nil {
		return nil
	}
	rs := &rawStream{conn: conn, readerDone: make(chan struct{})}
	go func() {
		defer close(rs.readerDone)
		var b [64]byte
		for {
			if _, err := conn.Read(b[:]); err != nil {
				cancel()
				return
			}
		}
	}()
	return rs
}

func (rs *rawStream) Write(p []byte) (int, error) {
	if rs.err != nil {
		return 0, rs.err
	}
	rs.pend.add(p)
	if rs.pend.size() >= rawChunkLimit {
		if err := rs.flush(); err != nil {
			return 0, err
		}
	}
	return len(p), nil
}

// flush writes what is pending as one chunk.
func (rs *rawStream) flush() error {
	if rs.pend.buf == nil || rs.err != nil {
		return rs.err
	}
	b := *rs.pend.buf
	var line [chunkRoom]byte
	size := append(strconv.AppendInt(line[:0], int64(len(b)-chunkRoom), 16), '\r', '\n')
	start := chunkRoom - len(size)
	copy(b[start:], size)
	b = append(b, '\r', '\n')
	_, rs.err = rs.conn.Write(b[start:])
	rs.pend.release(b)
	return rs.err
}

// close writes what is pending and the end of the body, closes the
// connection and waits for the reader goroutine.
func (rs *rawStream) close() {
	if rs.flush() == nil {
		_, _ = rs.conn.Write([]byte("0\r\n\r\n"))
	}
	rs.conn.Close()
	<-rs.readerDone
}
