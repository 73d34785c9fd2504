package endpoints

import (
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/objwatch/objwatch/server/objects"
	"github.com/objwatch/objwatch/server/registry"
)

// BenchmarkBareItem: the scan of one ConfigMap of about 1 KiB as the
// watch cache holds it (sorted keys: data before kind).
func BenchmarkBareItem(b *testing.B) {
	raw := []byte(fmt.Sprintf(`{"apiVersion":"v1","data":{"a":%q,"b":"x"},"kind":"ConfigMap","metadata":{"creationTimestamp":"2026-12-03T22:05:47Z","labels":{"app":"bench"},"managedFields":[{"apiVersion":"v1","fieldsType":"FieldsV1","fieldsV1":{"f:data":{".":{},"f:a":{},"f:b":{}},"f:metadata":{"f:labels":{".":{},"f:app":{}}}},"manager":"Go-http-client","operation":"Update","time":"2026-12-03T22:05:47Z"}],"name":"cm-000001","namespace":"default","resourceVersion":"12345","uid":"2fe32495-92f5-4cac-969e-612f076ceed7"}}`, strings.Repeat("x", 800)))
	b.SetBytes(int64(len(raw)))
	for b.Loop() {
		if _, err := bareItem(raw); err != nil {
			b.Fatal(err)
		}
	}
}

// discard is a ResponseWriter that keeps nothing.
type discard struct{ h http.Header }

func (d *discard) Header() http.Header         { return d.h }
func (d *discard) Write(b []byte) (int, error) { return len(b), nil }
func (d *discard) WriteHeader(int)             {}

// BenchmarkWriteRawList: a cached list of 10,000 ConfigMaps of ~1.3 KiB
// written as stored (custom) and without apiVersion and kind (built-in).
func BenchmarkWriteRawList(b *testing.B) {
	raw := make([][]byte, 10000)
	for i := range raw {
		raw[i] = []byte(fmt.Sprintf(`{"apiVersion":"v1","data":{"a":%q,"b":"x"},"kind":"ConfigMap","metadata":{"creationTimestamp":"2026-12-03T22:05:47Z","labels":{"app":"bench"},"name":"cm-%06d","namespace":"default","resourceVersion":"%d","uid":"2fe32495-92f5-4cac-969e-612f076ceed7"}}`, strings.Repeat("x", 1000), i, i+100))
	}
	l := &objects.List{Raw: raw}
	for _, custom := range []bool{true, false} {
		res := &registry.Resource{Version: "v1", Plural: "configmaps", Kind: "ConfigMap", ListKind: "ConfigMapList", Custom: custom}
		b.Run(fmt.Sprintf("bare=%v", !custom), func(b *testing.B) {
			w := &discard{h: http.Header{}}
			for b.Loop() {
				if err := writeRawList(w, res, l, output{}); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
