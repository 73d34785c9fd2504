package endpoints

import (
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/objwatch/objwatch/server/objects"
	"github.com/objwatch/objwatch/server/registry"
)

// benchConfigMaps are n cached ConfigMaps of ~1.3 KiB, as the watch cache
// holds them.
func benchConfigMaps(n int) [][]byte {
	raw := make([][]byte, n)
	for i := range raw {
		raw[i] = []byte(fmt.Sprintf(`{"apiVersion":"v1","data":{"a":%q,"b":"x"},"kind":"ConfigMap","metadata":{"creationTimestamp":"2026-12-03T22:05:47Z","labels":{"app":"bench"},"name":"cm-%06d","namespace":"default","resourceVersion":"%d","uid":"2fe32495-92f5-4cac-969e-612f076ceed7"}}`, strings.Repeat("x", 1000), i, i+100))
	}
	return raw
}

var benchEncodings = []struct {
	name string
	enc  encoding
}{{"json", encJSON}, {"protobuf", encProtobuf}, {"cbor", encCBOR}}

// countingWriter is a ResponseWriter that counts what it is given.
type countingWriter struct {
	discard
	n int64
}

func (c *countingWriter) Write(b []byte) (int, error) { c.n += int64(len(b)); return len(b), nil }

// BenchmarkListEncoding: a cached list of 10,000 ConfigMaps written in
// JSON (the raw path, writeRawList), protobuf and CBOR (decoded into
// their Go types, then apimachinery's serializers), and protobuf and CBOR
// from the items' encodings kept in the cache (writeCachedList: -first
// makes and keeps them, -cached reuses them); the response's bytes
// reported as resp-bytes. A custom resource's list in CBOR for comparison.
func BenchmarkListEncoding(b *testing.B) {
	l := &objects.List{Raw: benchConfigMaps(10000)}
	cms := &registry.Resource{Version: "v1", Plural: "configmaps", Kind: "ConfigMap", ListKind: "ConfigMapList"}
	crs := &registry.Resource{Group: "bench.objwatch.io", Version: "v1", Plural: "things", Kind: "Thing", ListKind: "ThingList", Custom: true}
	run := func(b *testing.B, res *registry.Resource, enc encoding) {
		w := &countingWriter{discard: discard{h: http.Header{}}}
		o := output{enc: enc}
		for b.Loop() {
			w.n = 0
			var err error
			if enc == encJSON {
				err = writeRawList(w, res, l, o)
			} else {
				obj, e := o.wireList(res, l)
				if e == nil {
					e = enc.encode(w, http.StatusOK, obj)
				}
				err = e
			}
			if err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(w.n), "resp-bytes")
	}
	// The watch cache's path for binary lists (writeCachedList): the
	// first list of the cache's objects encodes each item and keeps it
	// (first, each round with new objects, made outside the timer), later
	// lists reuse them (cached).
	cached := func(b *testing.B, res *registry.Resource, enc encoding, first bool) {
		w := &countingWriter{discard: discard{h: http.Header{}}}
		o := output{enc: enc}
		cl := cachedList(l.Meta, l.Raw)
		if !first {
			if done, err := writeCachedList(w, res, cl, o); !done || err != nil {
				b.Fatal(done, err)
			}
		}
		for b.Loop() {
			if first {
				b.StopTimer()
				cl = cachedList(l.Meta, l.Raw)
				b.StartTimer()
			}
			w.n = 0
			if done, err := writeCachedList(w, res, cl, o); !done || err != nil {
				b.Fatal(done, err)
			}
		}
		b.ReportMetric(float64(w.n), "resp-bytes")
	}
	for _, e := range benchEncodings {
		b.Run("configmaps/"+e.name, func(b *testing.B) { run(b, cms, e.enc) })
		if e.enc != encJSON {
			b.Run("configmaps/"+e.name+"-first", func(b *testing.B) { cached(b, cms, e.enc, true) })
			b.Run("configmaps/"+e.name+"-cached", func(b *testing.B) { cached(b, cms, e.enc, false) })
		}
	}
	b.Run("custom/json", func(b *testing.B) { run(b, crs, encJSON) })
	b.Run("custom/cbor", func(b *testing.B) { run(b, crs, encCBOR) })
	b.Run("custom/cbor-first", func(b *testing.B) { cached(b, crs, encCBOR, true) })
	b.Run("custom/cbor-cached", func(b *testing.B) { cached(b, crs, encCBOR, false) })
}

// BenchmarkWatchEventEncoding: one ConfigMap event of a watch, from the
// cached JSON to the wire: JSON (decoded and encoded, the cost the watch
// cache pays once per event for all its JSON watchers), protobuf and CBOR
// (decoded into the Go type, encoded, framed: paid per watcher).
func BenchmarkWatchEventEncoding(b *testing.B) {
	raw := benchConfigMaps(1)[0]
	res := &registry.Resource{Version: "v1", Plural: "configmaps", Kind: "ConfigMap", ListKind: "ConfigMapList"}
	for _, e := range benchEncodings {
		b.Run(e.name, func(b *testing.B) {
			enc := newEventEncoder(io.Discard, res, output{enc: e.enc})
			wr := &watchRequest{output: output{enc: e.enc}}
			for b.Loop() {
				it := objects.Item{Type: objects.Modified, JSON: raw}
				if e.enc == encJSON {
					// The one encoding the watch cache makes of an
					// event for all its JSON watchers, from the object.
					obj, err := objects.Decode(raw)
					if err != nil {
						b.Fatal(err)
					}
					it = objects.Item{Type: objects.Modified, Object: obj}
				}
				if err := writeItem(enc, nil, res, wr, it); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
