package client

import (
	"encoding/json"
	"math/rand/v2"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/objwatch/objwatch/internal/testobj"
)

func TestPeekMeta(t *testing.T) {
	tests := []struct {
		in     string
		want   Meta
		wantOK bool
	}{
		{`{"metadata":{"name":"a","namespace":"ns","uid":"u-1","resourceVersion":"42"}}`, Meta{"ns", "a", "u-1", "42"}, true},
		{` { "apiVersion" : "v1", "data" : {"k":"v \" } {","n":[1,{"x":[]}],"t":true,"z":null}, "kind":"ConfigMap",
		   "metadata" : { "labels":{"a":"b"}, "name" : "b", "resourceVersion":"7", "creationTimestamp": null } , "later": "x"}`, Meta{"", "b", "", "7"}, true},
		{`{"kind":"X","metadata":{}}`, Meta{}, true},
		{`{"metadata":{"name":"a\u0062"}}`, Meta{}, false},
		{`{"kind":"X"}`, Meta{}, false},
		{`{"metadata":{"name":"a"`, Meta{}, false},
		{`[1]`, Meta{}, false},
		{`{"a":1.5e3,"b":-2,"metadata":{"namespace":null,"name":"c"}}`, Meta{"", "c", "", ""}, true},
	}
	for _, tt := range tests {
		m, ok := peekMeta([]byte(tt.in))
		got := Meta{string(m.Namespace), string(m.Name), string(m.UID), string(m.ResourceVersion)}
		if ok != tt.wantOK || ok && got != tt.want {
			t.Errorf("peekMeta(%s) = %+v, %v; want %+v, %v", tt.in, got, ok, tt.want, tt.wantOK)
		}
		if !json.Valid([]byte(tt.in)) {
			continue
		}
		// Meta agrees with a full decode whether or not the peek succeeded.
		full, err := Raw[*unstructured.Unstructured]{data: []byte(tt.in)}.Meta()
		var ref metaOnly
		json.Unmarshal([]byte(tt.in), &ref)
		if md := ref.Metadata; err == nil && full != (Meta{md.Namespace, md.Name, md.UID, md.ResourceVersion}) {
			t.Errorf("Meta(%s) = %+v, want %+v", tt.in, full, md)
		}
	}
}

func TestPeekMetaAllocs(t *testing.T) {
	data := []byte(`{"apiVersion":"v1","data":{"k":"value"},"kind":"ConfigMap","metadata":{"name":"a","namespace":"ns","uid":"u","resourceVersion":"1"}}`)
	if n := testing.AllocsPerRun(100, func() { peekMeta(data) }); n != 0 {
		t.Errorf("peekMeta allocates %v times, want 0", n)
	}
}

// BenchmarkPeekMeta peeks at BenchmarkInformer's 1 KiB ConfigMap as a
// server encodes it.
//
//	go test ./client -run '^$' -bench PeekMeta
func BenchmarkPeekMeta(b *testing.B) {
	cm := testobj.ConfigMap("bench", 1, rand.New(rand.NewPCG(1, 2)))
	cm.Kind, cm.APIVersion = "ConfigMap", "v1"
	cm.UID, cm.ResourceVersion = "8f2b6c1e-0d4a-4b7e-9c3f-000000000001", "100001"
	data, err := json.Marshal(cm)
	if err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(len(data)))
	for b.Loop() {
		if _, ok := peekMeta(data); !ok {
			b.Fatal("peekMeta: not ok")
		}
	}
}
