// Package explain computes what objwatch's explaining commands show —
// an object's history with the diff of each revision, its blame (the
// manager and user behind each line of its YAML), why a deletion waits
// — from the answers of any Kubernetes API server, through objwatch's
// client library. The command line (internal/cli) prints it as text and
// the web page (internal/ui) serves it as JSON; both use these functions,
// so the two always agree.
//
// It imports no server or storage package. Its functions hold no state
// between calls and are safe for concurrent use.
package explain
