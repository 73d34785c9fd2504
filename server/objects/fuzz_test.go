package objects

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"strconv"
	"testing"
	"time"
	"unicode/utf8"
)

// FuzzWithResourceVersion checks the splice against its oracle: for any
// JSON object with a metadata object, splicing the resourceVersion into
// its stored encoding gives exactly json.Marshal of the object with it.
// On any other input it must not panic.
func FuzzWithResourceVersion(f *testing.F) {
	for _, s := range []string{
		`{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"a","namespace":"ns","uid":"u"},"data":{"resourceVersion":"x"}}`,
		`{"metadata":{}}`, `{"metadata":{"uid":"after"}}`, `{"metadata":{"name":"only"}}`,
		`{"a":["]",{"metadata":1}],"metadata":{"generation":3,"selfLink":"s","zz":"z"}}`,
		`{"metadata":{"annotations":{"a}\"{":"b\\\"}"},"labels":{"x":"y"},"managedFields":[{"f":[1,2.5,true,null]}]},"spec":{"k":"v"}}`,
		`{"metadata":{"resourceVersion":"1"}}`, `{"metadata":"x"}`, `[]`, ``, `{"metadata":{"a":`,
		`{"metadata":{"r\u00e9sourceVersion":1,"\u0072esourceVersion":2}}`,
	} {
		f.Add([]byte(s), int64(12345))
	}
	f.Fuzz(func(t *testing.T, data []byte, rev int64) {
		_ = withResourceVersion(data, rev) // arbitrary bytes: no panic
		var obj map[string]any
		if json.Unmarshal(data, &obj) != nil {
			return
		}
		md, ok := obj["metadata"].(map[string]any)
		if !ok {
			return
		}
		if _, has := md["resourceVersion"]; has {
			return
		}
		stored, err := json.Marshal(obj)
		if err != nil {
			return
		}
		got := withResourceVersion(stored, rev)
		md["resourceVersion"] = strconv.FormatInt(rev, 10)
		want, _ := json.Marshal(obj)
		if got == nil && bytes.IndexByte(stored, '\\') >= 0 {
			return // an escaped key: the caller encodes instead (allowed)
		}
		if string(got) != string(want) {
			t.Fatalf("withResourceVersion(%s, %d) =\n%s\nwant\n%s", stored, rev, got, want)
		}
	})
}

// FuzzDecodeContinue checks continue tokens against their oracle: every
// token encodeContinue issues for a valid UTF-8 start key (storage keys are
// made of validated names; JSON would replace invalid bytes) decodes to
// what it encoded, and any other
// string decodes only if the plain decode (base64, then JSON) accepts it,
// to the same token, and never to a start key that escapes the prefix.
func FuzzDecodeContinue(f *testing.F) {
	f.Add(encodeContinue(42, "ns/name\x00", time.Now()), int64(0), "")
	f.Add("", int64(7), "a/b")
	f.Add("not base64!", int64(-1), "../x")
	f.Add(base64.RawURLEncoding.EncodeToString([]byte(`{"v":"meta.k8s.io/v1","rv":1,"start":"/etc"}`)), int64(1), "/")
	f.Add(base64.RawURLEncoding.EncodeToString([]byte(`{"v":"meta.k8s.io/v1","rv":1,"start":"a","rv":2}`)), int64(1), "a..b")
	f.Fuzz(func(t *testing.T, s string, rv int64, start string) {
		tok := encodeContinue(rv, start, time.Now())
		got, err := decodeContinue(tok)
		validStart := !containsDotDot(start) && (start == "" || start[0] != '/')
		if validStart && utf8.ValidString(start) && (err != nil || got.RV != rv || got.Start != start) {
			t.Fatalf("decodeContinue(encodeContinue(%d, %q)) = %+v, %v", rv, start, got, err)
		}
		if !validStart && err == nil {
			t.Fatalf("decodeContinue accepted start key %q", start)
		}

		got, err = decodeContinue(s)
		var plain continueToken
		b, berr := base64.RawURLEncoding.DecodeString(s)
		plainOK := berr == nil && json.Unmarshal(b, &plain) == nil && plain.APIVersion == "meta.k8s.io/v1"
		if err == nil {
			if !plainOK || got != plain {
				t.Fatalf("decodeContinue(%q) = %+v, the plain decode %+v (ok %v)", s, got, plain, plainOK)
			}
			if containsDotDot(got.Start) || (got.Start != "" && got.Start[0] == '/') {
				t.Fatalf("decodeContinue(%q) accepted start key %q", s, got.Start)
			}
		}
	})
}

func containsDotDot(s string) bool {
	for i := 0; i+1 < len(s); i++ {
		if s[i] == '.' && s[i+1] == '.' {
			return true
		}
	}
	return false
}
