package client

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"unicode/utf8"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	sigsjson "sigs.k8s.io/json"
)

// peekSeeds are realistic objects and the edge cases of peekMeta's
// contract: escapes, nesting, duplicate keys, unicode, wrong types.
var peekSeeds = []string{
	// Objects as servers send them.
	`{"kind":"ConfigMap","apiVersion":"v1","metadata":{"name":"settings","namespace":"default","uid":"3f0c2a1e-8b7d-4c55-9a1e-2f6b7c8d9e0f","resourceVersion":"12345","creationTimestamp":"2026-01-02T03:04:05Z","labels":{"app":"web","tier":"front"},"annotations":{"note":"a \"quoted\" {value}"}},"data":{"config.yaml":"a: 1\nb: [2, 3]\n","k":"}{]["}}`,
	`{"kind":"Pod","apiVersion":"v1","metadata":{"name":"web-7d9f8b-x2x4z","generateName":"web-7d9f8b-","namespace":"prod","uid":"u-1","resourceVersion":"998877","ownerReferences":[{"apiVersion":"apps/v1","kind":"ReplicaSet","name":"web-7d9f8b","uid":"u-rs","controller":true,"blockOwnerDeletion":true}],"managedFields":[{"manager":"kube-controller-manager","operation":"Update","apiVersion":"v1","time":"2026-01-02T03:04:05Z","fieldsType":"FieldsV1","fieldsV1":{"f:metadata":{"f:name":{}}}}]},"spec":{"containers":[{"name":"web","image":"nginx:1.27","resources":{"limits":{"cpu":"500m","memory":"1.5e3Mi"}},"ports":[{"containerPort":8080}]}],"nodeName":"node-1"},"status":{"phase":"Running","conditions":[{"type":"Ready","status":"True"}]}}`,
	`{"apiVersion":"apps/v1","kind":"Deployment","spec":{"template":{"metadata":{"name":"template","labels":{"app":"web"}}},"replicas":3},"metadata":{"name":"web","namespace":"default","uid":"u-d","resourceVersion":"5"}}`,
	`{"apiVersion":"example.com/v1","kind":"Widget","metadata":{"name":"w","uid":"u-w","resourceVersion":"1","finalizers":["example.com/cleanup"],"deletionTimestamp":"2026-01-02T03:04:05Z"},"spec":{"size":-1.5e-3,"on":true,"off":false,"none":null,"list":[[],{},[{"a":[1,2,{"b":"]"}]}]]}}`,
	` { "metadata" : { "name" : "spaced" ,
	  "namespace":"ns",	"uid" : "u" ,"resourceVersion":"7" } , "kind" : "X" } `,
	`{"metadata":{"name":"a","namespace":null,"uid":null,"resourceVersion":null}}`,
	`{"kind":"X","metadata":{}}`,
	// Escapes.
	`{"metadata":{"name":"a\u0062"}}`,
	`{"metadata":{"name":"a\\b","namespace":"\"q\""}}`,
	`{"meta\u0064ata":{"name":"escaped-key"}}`,
	`{"metadata":{"na\u006de":"escaped-inner-key","name":"plain"}}`,
	`{"a\"b":1,"metadata":{"name":"after-escaped-key"}}`,
	`{"data":{"metadata":"not it","s":"\\\"metadata\\\":{"},"metadata":{"name":"real"}}`,
	// Duplicate keys.
	`{"metadata":{"name":"first","uid":"u1"},"metadata":{"name":"second"}}`,
	`{"metadata":{"name":"first"},"kind":"X","metadata":null}`,
	`{"metadata":{"name":"a","name":"b"}}`,
	`{"metadata":{"name":"a","name":null}}`,
	`{"metadata":{"uid":"u","resourceVersion":"1","resourceVersion":"2"}}`,
	// Case: field names are case-sensitive.
	`{"Metadata":{"name":"upper"},"metadata":{"Name":"x","name":"lower"}}`,
	// Unicode.
	`{"metadata":{"name":"名前","namespace":"naïve","uid":"🙂"}}`,
	"{\"metadata\":{\"name\":\"\xff\xfe\"}}",
	"{\"metadata\":{\"name\":\"a\xc3\"}}",
	"{\"metadata\":{\"name\":\"\u2028\"}}",
	// Wrong types.
	`{"metadata":{"name":5}}`,
	`{"metadata":{"name":{"x":"y"},"namespace":["a"],"uid":true}}`,
	`{"metadata":"string"}`,
	`{"metadata":null}`,
	`{"metadata":[]}`,
	// Not objects, truncated, trailing garbage.
	`[{"metadata":{"name":"in-array"}}]`,
	`"metadata"`,
	`null`,
	`{"metadata":{"name":"a"`,
	`{"metadata":{"name":"a"}} {"metadata":{"name":"b"}}`,
	`{"metadata":{"name":"a"}}x`,
	``,
}

// FuzzPeekMeta checks peekMeta against full decodes. Its contract: when
// it reports ok, the identity it returns is the one decoding the object
// would give; when it cannot be sure it reports not ok, and callers
// (Raw.Meta, Raw.PeekMeta) decode instead. Callers get objects from JSON
// decoders, which have validated them, so the oracle applies to valid
// JSON; for other input peekMeta must only not panic and return slices of
// its input. The two decodes are the client's own: into a struct with
// string fields, case-sensitively (Raw.Meta's fallback; typed objects'
// ObjectMeta), and into a map read with unstructured's accessors (the
// codec for *unstructured.Unstructured). They differ on duplicate keys
// (a struct merges repeated objects, a map keeps the last): where they
// do, peekMeta must not be ok. And peekMeta must be ok on a plain object
// with those values, as a server would send it.
func FuzzPeekMeta(f *testing.F) {
	for _, s := range peekSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		m, ok := peekMeta(data)
		got := Meta{string(m.Namespace), string(m.Name), string(m.UID), string(m.ResourceVersion)}
		for _, s := range [][]byte{m.Namespace, m.Name, m.UID, m.ResourceVersion} {
			if len(s) > 0 && !within(data, s) {
				t.Fatalf("peekMeta(%q) returned %q, not a slice of its input", data, s)
			}
		}
		if !json.Valid(data) {
			return
		}
		var ref metaOnly
		structErr := sigsjson.UnmarshalCaseSensitivePreserveInts(data, &ref)
		md := ref.Metadata
		fromStruct := Meta{md.Namespace, md.Name, md.UID, md.ResourceVersion}
		var obj map[string]any
		mapErr := sigsjson.UnmarshalCaseSensitivePreserveInts(data, &obj)
		u := unstructured.Unstructured{Object: obj}
		fromMap := Meta{u.GetNamespace(), u.GetName(), string(u.GetUID()), u.GetResourceVersion()}
		if ok {
			if structErr != nil || mapErr != nil || obj == nil {
				t.Fatalf("peekMeta(%s) = %q, ok; but decoding fails (struct: %v, map: %v)", data, got, structErr, mapErr)
			}
			if got != fromStruct || got != fromMap {
				t.Fatalf("peekMeta(%q) = %q, ok; decoded into a struct %q, into a map %q", data, got, fromStruct, fromMap)
			}
		}
		if structErr == nil && mapErr == nil && fromStruct == fromMap {
			checkPlain(t, fromStruct)
		}
	})
}

// checkPlain checks that peekMeta reads want from a plain object holding
// it, as a server would encode it, unless a value needs escapes there.
func checkPlain(t *testing.T, want Meta) {
	t.Helper()
	meta := map[string]string{}
	for k, v := range map[string]string{"namespace": want.Namespace, "name": want.Name, "uid": want.UID, "resourceVersion": want.ResourceVersion} {
		if strings.ContainsAny(v, "\"\\\u2028\u2029") || strings.ContainsFunc(v, func(r rune) bool { return r < 0x20 }) || !utf8.ValidString(v) {
			return
		}
		if v != "" {
			meta[k] = v
		}
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(map[string]any{"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta, "data": map[string]string{"k": "v"}}); err != nil {
		t.Fatal(err)
	}
	m, ok := peekMeta(buf.Bytes())
	if got := (Meta{string(m.Namespace), string(m.Name), string(m.UID), string(m.ResourceVersion)}); !ok || got != want {
		t.Fatalf("peekMeta(%s) = %q, %v; want %q, true", buf.Bytes(), got, ok, want)
	}
}

// within reports whether s shares b's array (ends where b's capacity
// does and starts inside it).
func within(b, s []byte) bool {
	return cap(b) > 0 && cap(s) > 0 && cap(s) <= cap(b) && &b[:cap(b)][cap(b)-1] == &s[:cap(s)][cap(s)-1]
}
