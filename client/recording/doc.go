// Package recording writes and reads recorded event streams: what a
// Kubernetes-compatible server told a client about some resources (the
// initial list, every watch event with its arrival time, 410 Gone and the
// relists after it), and plays them back, into a server (Replay) or into
// informer-style handlers driven by a virtual clock (Player).
//
//   - Writer and Reader (ReadAll) write and check the file format below.
//   - Capture records a resource from a server: list, watch, resume,
//     410 Gone and relist (objwatch record). informer.Record, in
//     client/informer, records what a running informer tells its handlers.
//   - Replay writes a recording into a server (objwatch replay): creates,
//     updates by name and deletes, with the recorded spacing scaled.
//   - Player plays one resource into handlers with the calls an informer
//     makes, on a virtual clock, with injectable outages and 410s;
//     Interleave plays several Players in the recording's order.
//
// # Format (version 1)
//
// A recording is a gzip-compressed file of JSON lines (one JSON object per
// line, "\n"-terminated). docs/RECORDING.md has the full description.
//
// Line 1 is the header:
//
//	{"format":"objwatch-recording","version":1,"resources":["v1/configmaps"],
//	 "server":"https://127.0.0.1:6443","namespace":"","labelSelector":"",
//	 "start":"2026-12-04T07:00:00Z","secrets":false,"redacted":["/data/password"]}
//
// Each later line is an item with a kind, its arrival time "at" (nanoseconds
// since start, never decreasing from one line to the next) and the resource
// it belongs to (apiVersion/plural: "v1/configmaps", "apps/v1/deployments",
// one of the header's resources):
//
//	initial    an object of the initial list (object)
//	synced     the end of the initial list or of a relist (resourceVersion)
//	ADDED, MODIFIED, DELETED, BOOKMARK
//	           a watch event (object); a DELETED with "unknown":true is a
//	           deletion the client missed (final state unknown)
//	gone       the server answered 410 Gone: it forgot the resourceVersion
//	           the watch resumed from (resourceVersion)
//	relist     the start of a relist: "listed" items follow, then "synced"
//	listed     an object of a relist (object)
//	end        the last line: "items" counts the lines between header and end
//
// A file without its end line is truncated and refused.
//
// # Secrets and redaction
//
// A Writer leaves Secrets (kind Secret, apiVersion v1) out unless
// Options.IncludeSecrets; Options.Redact names field paths, as RFC 6901 JSON
// Pointers ("/data/password") or dotted ("data.password"; "*" matches any
// key or index), whose string values, and every string below them, are
// replaced by "REDACTED" (other values keep their shape, so a redacted
// object still decodes into its Go type).
//
// # Concurrency
//
// A Writer is safe for concurrent use; a Reader and a Player are not (one
// goroutine each). Player calls handlers on the goroutine that drives it,
// one call at a time, so a test is deterministic.
package recording
