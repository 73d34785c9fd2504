// Package history keeps every revision of every key objwatch stores in
// etcd, past etcd's compaction, with the author of each: the store behind
// reads as of a past revision or moment, watches that resume from one, the
// history subresource and `objwatch history`, `blame` and `changes`.
//
// The Store is a Pebble database (an LSM tree: appends of time-ordered
// records are sequential writes, every block is checksummed and
// compressed, and dropping the oldest revisions is a range of deletions).
// Each change of a key is a record at its revision: the value whole, or a
// Fossil delta (github.com/centrifugal/fdelta) from the key's previous
// value when the delta is smaller, at most FullEvery-1 deltas in a row. A
// delta works on bytes, so neither recording nor reading parses JSON, and
// it carries a checksum of the value it makes.
// Values are kept in their form at rest: a value etcd holds encrypted is
// recorded as it is in etcd, whole, and never decrypted on its way in.
//
// A Recorder feeds the store from one etcd watch over the whole keyspace.
// It resumes from the last recorded revision after a restart; revisions
// etcd compacted before it could read them are a Gap, kept and reported.
// Who made a revision comes from the author key (AuthorKey) that the
// server's storage writes in the same etcd transaction as every change it
// makes.
//
// Concurrency: a Store has one writer at a time (Append, AddGap, Trim and
// Retain serialize among themselves); reads are safe concurrently with
// the writer and each sees one consistent state of the database.
package history
