// Package audit is objwatch's audit log: Kubernetes' audit.k8s.io/v1
// Event records, one JSON line each, chosen by an audit.k8s.io/v1 Policy
// (evaluated by k8s.io/apiserver's own rule evaluator), plus what
// Kubernetes does not record: the change each write made, a durability
// guarantee and a hash chain that shows tampering.
//
// # What is recorded when
//
// The HTTP layer (endpoints.WithAudit) asks the policy for the request's
// level; at None nothing is recorded. Otherwise, as kube-apiserver does:
// RequestReceived when the request arrives, ResponseStarted when a watch
// sends its headers, ResponseComplete when the response is done, Panic
// when a handler panics; omitStages leave stages out. At Request the
// request body of a mutation is recorded, at RequestResponse also the
// response body (reads too, up to 3 MiB), without managedFields when
// omitManagedFields is set. The user is the authenticated one; with
// impersonation it is the sender and impersonatedUser the one acted as.
//
// Every successful mutation's ResponseComplete record carries, as
// annotations (JSON text in strings, so the record stays a valid Event):
//
//   - objwatch.io/patch: the RFC 6902 JSON Patch from the stored old object
//     to the stored new one, without metadata.resourceVersion and
//     metadata.managedFields; a create is one add of the whole object at
//     the root (path ""), a completed deletion one remove of it, an update
//     that changed nothing "[]".
//   - objwatch.io/changed-paths: the changed fields (change package paths;
//     a create's or delete's top-level fields).
//   - objwatch.io/resource-version: the resourceVersion written.
//
// The diff comes from the object service's Written hook (Log.Written),
// which sees the stored old and new object of every write, never a
// re-read; it finds the request's Record in the context (WithRecord).
// Writes no request made (objects.Request.User nil) get records of their
// own: user objects.Request.Actor when set (the garbage collector's
// system:serviceaccount:kube-system:generic-garbage-collector, namespace
// cleanup's ...:namespace-controller), else system:apiserver. A
// deletecollection's first object is in its record, each further one in a
// record of its own with the request's audit ID.
//
// # Durability
//
// A mutation's response is held until its ResponseComplete record is on
// disk (written and fsynced): a client never sees a write acknowledged
// whose record a crash could lose. Before a write reaches etcd, Reserve
// (a Validate hook, the last) checks that Config.Headroom is allocated
// past the log's end; on a full file system the write is refused with 507
// and nothing is stored (room.go). A batch whose write still fails is
// taken back from the file whole (no torn record, the chain continues
// from the record before it), its requests get 500 although their writes
// happened, and the log writes again as soon as there is space; only
// failures that cannot be taken back (an fsync's I/O error, a rotation
// that cannot create its file) make every later record fail. Records are written in queue order, one fsync for everything
// queued while the previous one ran (group commit). The response waiting
// for a batch's first durable record is the batch's leader: once the
// batch before is written it writes and fsyncs the queue itself, with the
// records of the writes that finished meanwhile, and the other responses
// of the batch, which wait only for it, return with it. So no goroutine
// has to be woken between a write's etcd commit and its record's fsync,
// and only one per batch competes for the file. While writes run
// concurrently (the last fsync made several waiting records durable), the
// writer first waits up to four times the last fsync's duration (at most
// 8 ms) for more records: an fsync costs kernel CPU, and on busy cores
// fewer, fuller fsyncs are what keeps audited writes close to unaudited
// ones; a lone writer never waits. Records nobody waits for (other
// stages, reads) are written with the next fsync or by Run's goroutine
// within 50 ms. The objwatch_audit_fsync_duration_seconds and
// objwatch_audit_wait_duration_seconds histograms show both durations. A
// record cut by a crash is never acknowledged; New drops it when the log
// is reopened.
//
// The fsync is of the journal (PATH.journal, Config.JournalSize, 16 MiB
// by default), not of the log. Each batch is appended to the log and
// written into the journal, a file of fixed size whose blocks were
// written with zeros when it was made, overwritten as a ring. Appending to
// a file changes its size, so an fdatasync of the log would commit the
// file system's journal, and with embedded etcd, etcd's WAL fsyncs wait
// behind that commit; an fdatasync of the journal flushes its data alone.
// The log itself is fsynced when the journal is full (and starts over),
// before it is rotated and when Run ends; after a crash of the machine,
// New writes into the log what the journal holds and the log lacks, and
// a log changed while the server was down is left as it is (the journal
// is set aside). A kill -9 of the server loses nothing either way: what
// it wrote is in the kernel. The format and the recovery rules are in
// journal.go.
//
// # Chain format
//
// Each record has objwatch.io/seq (1, 2, ... across rotated files) and
// objwatch.io/prev-hash: the hex SHA-256 of the previous record's line
// without its newline (64 zeros for seq 1). Rotation (MaxSizeMB) renames
// the file to NAME-TIMESTAMP.EXT as kube-apiserver's lumberjack does and
// the chain goes on in the new file. Every CheckpointInterval the head
// (seq and hash of the last record) is saved in etcd under
// /registry/objwatch.io/audit/checkpoints/ID, so a log truncated or
// rewritten with fresh hashes fails Verify at the checkpointed record;
// only records after the last checkpoint can be cut undetected. Verify
// names the first record edited, removed, reordered or cut.
//
// # Concurrency
//
// A Log is safe for concurrent use. New opens the file; Run, called once
// by its owner (server.Run), writes until its context ends, then writes
// what is queued, takes a last checkpoint and closes the file; records
// queued after that fail with ErrClosed. Log.mu, Log.headMu and
// Record.mu are leaves: none is held while another is taken or across
// I/O.
package audit
