package server

// Every server test checks each write hint the watch caches use against
// decoding the same etcd event (a mismatch panics).
func init() { verifyHints.Store(true) }
