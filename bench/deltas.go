package bench

import (
	"context"
	"fmt"
	"strings"
)

// Deltas measures objwatch's watch extensions (fieldMask, watchDeltas) on
// what they are for: o.Watchers watches of one large object (a Node-like
// ~40 KiB status: conditions, images, capacity) whose writer changes one
// small field o.WriteRate times a second, four ways in turn, each on its
// own object: no watches (the writes' own cost), full watches, delta watches (watchDeltas=true) and masked
// watches whose mask excludes the changing field (fieldMask=/spec, so
// nothing but bookmarks is sent). Each way reports bytes per delivered
// event, server CPU per write and per delivered event, and delivery p99
// (the prefixes "deltas unwatched", "deltas full", "deltas delta",
// "deltas masked"). A server
// without the extensions ignores their parameters: its delta and masked
// watches are full ones.
func Deltas(ctx context.Context, t *Target, o *Options) ([]Result, error) {
	var out []Result
	for _, way := range []struct{ name, query string }{
		{"unwatched", ""},
		{"full", ""},
		{"delta", "&watchDeltas=true"},
		{"masked", "&fieldMask=%2Fspec&allowWatchBookmarks=true"},
	} {
		name := "deltas-" + way.name
		wo := o
		if way.name == "unwatched" {
			// The writes' own cost, to tell the watches' from it.
			unwatched := *o
			unwatched.Watchers = 0
			wo = &unwatched
		}
		rs, err := fanout(ctx, t, []*Target{t}, wo, false, fanoutSpec{
			name: name, body: nodeLike(name), query: way.query, prefix: "deltas " + way.name,
			patch: func(startRV int64, n int) string {
				return fmt.Sprintf(`{"status":{"heartbeat":"%d-%d"}}`, startRV, n)
			},
		})
		out = append(out, rs...)
		if err != nil {
			return out, err
		}
	}
	return out, nil
}

// nodeLike is a benchmark object shaped like a Node's status, about
// 40 KiB: conditions, addresses, capacity and 200 images.
func nodeLike(name string) []byte {
	var b strings.Builder
	fmt.Fprintf(&b, `{"apiVersion":"%s/v1","kind":"BenchObject","metadata":{"name":%q,"labels":{"app":"bench"}},`, Group, name)
	b.WriteString(`"spec":{"podCIDR":"10.0.1.0/24","providerID":"bench://node"},"status":{"heartbeat":"0","conditions":[`)
	for i, c := range []string{"Ready", "MemoryPressure", "DiskPressure", "PIDPressure", "NetworkUnavailable"} {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, `{"type":%q,"status":"False","reason":"KubeletHasSufficient%s","message":"kubelet has sufficient %s available","lastTransitionTime":"2026-12-01T00:00:00Z"}`, c, c, c)
	}
	b.WriteString(`],"addresses":[{"type":"InternalIP","address":"10.0.0.1"},{"type":"Hostname","address":"node-1"}],`)
	b.WriteString(`"capacity":{"cpu":"16","memory":"65842604Ki","pods":"110","ephemeral-storage":"507944172Ki"},"images":[`)
	for i := range 200 {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, `{"names":["registry.example/team-%03d/service-%03d@sha256:%064x","registry.example/team-%03d/service-%03d:v1.%d.0"],"sizeBytes":%d}`,
			i%40, i, i*7919, i%40, i, i, 10_000_000+i*12345)
	}
	b.WriteString(`]}}`)
	return []byte(b.String())
}
