package endpoints

import (
	"net/http"
	"runtime"
	"slices"
	"strings"
	"time"

	"github.com/objwatch/objwatch/server/auth"
	"github.com/objwatch/objwatch/server/objects"
	"github.com/objwatch/objwatch/server/watchstream"
)

// DefaultWatchEventCPU is Config.WatchEventCPU's default: the server CPU
// per delivered watch event measured for ~1 KiB objects over HTTP/1.1
// (docs/PERFORMANCE.md, "Watch fan-out": 4–5 µs per event, of which the
// bytes' share is the per-byte term), rounded down so that the hold
// rather undercounts.
const DefaultWatchEventCPU = 3 * time.Microsecond

// maxDeliveryHold bounds how long one write keeps its seat after it
// returns, whatever the number of watches.
const maxDeliveryHold = time.Second

// unknownEventBytes is the size assumed for an event whose request
// carried no body of known length (a delete, a chunked body).
const unknownEventBytes = 1024

// deliveryHold is how long the seat of a successful request keeps being
// taken after it returns: for a write of a stored object, the CPU its
// watch event is estimated to cost the server to deliver to every watch
// of the resource, in seat time (see the package doc, "Delivery"). Reads,
// dry runs, reviews, exempt users and writes of resources nobody watches
// hold nothing.
func (a *API) deliveryHold(r *http.Request, req *objects.Request, verb string) time.Duration {
	perEvent := a.cfg.WatchEventCPU
	if perEvent == 0 {
		perEvent = DefaultWatchEventCPU
	}
	switch {
	case perEvent < 0:
		return 0
	case verb != "create" && verb != "update" && verb != "patch" && verb != "delete" && verb != "deletecollection":
		return 0
	case verb == "create" && req.Subresource != "": // a review or an action: nothing stored
		return 0
	}
	if u, ok := auth.UserFrom(r.Context()); !ok || slices.Contains(u.Groups, auth.GroupMasters) {
		return 0 // no seat to hold
	}
	if strings.Contains(r.URL.RawQuery, "dryRun") && r.URL.Query().Has("dryRun") {
		return 0
	}
	watches := a.objects.Caches().Watchers(req.Resource, req.Namespace)
	if watches == 0 {
		return 0
	}
	size := r.ContentLength
	if size <= 0 {
		size = unknownEventBytes
	}
	// A seat is a share of a CPU (seats per CPU of them run at once), and
	// delivering is CPU all along: hold the seat that many times longer.
	perCPU := max(1, a.seats.seats/runtime.GOMAXPROCS(0))
	d := time.Duration(watches) * (perEvent + time.Duration(size)) * time.Duration(perCPU)
	return min(d, maxDeliveryHold)
}

// DefaultWatchWriters is how many watches write at once when
// Config.WatchWriters is 0: one per CPU (GOMAXPROCS), of which one slot
// is kept from new writes while more than one user is active
// (watchstream.Gate.Keep, told by the fair queue). Delivery is work for
// events already committed; a request readied while every CPU runs a
// watch's write waits for one of those writes to end, and a co-located
// etcd's threads compete with them for the machine. Keeping one CPU from
// the gate while users share leaves one for requests and etcd whatever
// the watches do; a user alone, whose own writes' events are delivered,
// gets every CPU for them (measured in docs/PERFORMANCE.md, "One CPU kept
// from the delivery gate").
func DefaultWatchWriters() int { return runtime.GOMAXPROCS(0) }

// watchWriterPatience is how long one watch's write keeps its place in
// the delivery gate (watchstream.Gate) at most: a few ordinary writes'
// time, so that a write blocked on a client that stopped reading delays
// the others little.
const watchWriterPatience = 2 * time.Millisecond

// newDeliveryGate returns the gate of n watches writing at once (0:
// DefaultWatchWriters; negative: nil, no gate).
func newDeliveryGate(n int) *watchstream.Gate {
	switch {
	case n < 0:
		return nil
	case n == 0:
		n = DefaultWatchWriters()
	}
	return watchstream.NewGate(n, watchWriterPatience)
}
