// Package watchstream writes watch responses: the Writer that bounds how
// long a write to a client that stopped reading may block and, on
// HTTP/1.1, takes the connection from net/http to write each batch as one
// chunk in one system call (on HTTP/2 it hands each batch to the HTTP/2
// server in one write: one DATA frame); and the Pacer that chooses how long busy
// watches batch their output from how busy the CPUs are.
//
// It knows nothing of resources or storage: the server's watch loop (one,
// for watches served from the watch cache and from etcd) encodes events
// and decides when to flush; this package moves the bytes.
//
// # Concurrency
//
// A Writer belongs to the goroutine serving its watch. A Pacer's Window
// and Batch may be called from any goroutine; its Run belongs to the
// server's Run.
package watchstream
