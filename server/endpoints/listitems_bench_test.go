package endpoints

import (
	"fmt"
	"strings"
	"testing"
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
