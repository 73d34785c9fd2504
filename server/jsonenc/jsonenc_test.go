package jsonenc

import (
	"bytes"
	"encoding/json"
	"math"
	"strings"
	"testing"

	utiljson "k8s.io/apimachinery/pkg/util/json"
)

// FuzzAppend checks Append against its oracle: any JSON value, decoded as
// the server decodes objects (int64 and float64 numbers, apimachinery)
// and as encoding/json decodes into any (float64 only), is encoded exactly
// as encoding/json.Marshal encodes it.
func FuzzAppend(f *testing.F) {
	for _, s := range []string{
		`[{"apiVersion":"v1","fieldsType":"FieldsV1","fieldsV1":{"f:data":{".":{},"f:k":{}}},"manager":"m","operation":"Update","time":"2026-12-01T20:00:00Z"}]`,
		`{"a<b>&c":"\u2028\u2029\ufffd\u0001\b\f\n\r\t\"\\","n":[1,-2,1.5,1e-7,1e21,123456789012345678,0.000001,-0]}`,
		`[null,true,false,{},[],""]`, "\"\xff\xfe\"", `{"z":{},"a":{},"\u00e9":1}`,
		`{"b":1,"a":[1.5,-2e-7,1e21,"x"]}`, `{"m":{"z":null,"y":false}}`, `1e-6`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		for _, decode := range []func([]byte, any) error{utiljson.Unmarshal, json.Unmarshal} {
			var v any
			if decode(b, &v) != nil {
				return
			}
			want, err := json.Marshal(v)
			got, ok := Append(nil, v)
			if err != nil || !ok {
				if ok {
					t.Fatalf("%q: Append encoded what encoding/json refuses (%v)", b, err)
				}
				continue
			}
			if !bytes.Equal(got, want) {
				t.Fatalf("%q:\nAppend        %s\nencoding/json %s", b, got, want)
			}
		}
	})
}

// FuzzAppendString checks AppendString against encoding/json for any
// string, valid UTF-8 or not.
func FuzzAppendString(f *testing.F) {
	for _, s := range []string{"", "plain", "quote\"back\\slash", "<html>&amp;", "\n\r\t\x00\x1f\x7f",
		"é\u2028\u2029", "\xff\xfe", "a\xc3", "emoji 😀"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		want, _ := json.Marshal(s)
		if got := AppendString(nil, s); !bytes.Equal(got, want) {
			t.Fatalf("AppendString(%q) = %s, encoding/json %s", s, got, want)
		}
	})
}

// TestAppendRefuses: what Append cannot encode as encoding/json does is
// refused, for the caller to encode otherwise.
func TestAppendRefuses(t *testing.T) {
	for _, v := range []any{[]any{math.NaN()}, math.Inf(1), map[string]any{"a": int32(1)}, []string{"a"}, map[string]string{}} {
		if _, ok := Append(nil, v); ok {
			t.Errorf("Append(%#v) encoded it", v)
		}
	}
	if got, ok := Append(nil, map[string]any{"n": 3, "m": int64(-4)}); !ok || string(got) != `{"m":-4,"n":3}` {
		t.Errorf("ints: %s %v", got, ok)
	}
}

func BenchmarkAppendString(b *testing.B) {
	s := string(bytes.Repeat([]byte(`{"op":"add","path":"/data/k","value":"v"},`), 40))
	buf := make([]byte, 0, 4096)
	b.SetBytes(int64(len(s)))
	for b.Loop() {
		buf = AppendString(buf[:0], s)
	}
}

// FuzzAppendCompact checks AppendCompact against encoding/json: what
// json.Compact then json.HTMLEscape write for any input, and refused
// exactly when json.Compact refuses it.
func FuzzAppendCompact(f *testing.F) {
	for _, s := range []string{
		"{\n  \"a\": 1,\n  \"b\": \"x y\"\n}\n", `{"html":"<a href='x'>&amp;</a>","sep":"` + "\u2028\u2029\u2027\u20ac" + `"}`,
		`[1, -0.5e+10, 0, -0, 1E3, true, false, null, "\u00e9\n\"\\\/"]`, ` "s" `, `{"a":}`, `[1,]`, `01`, `-`, `1.`, `1e`,
		`"\x01"`, "\"\xff\xe2\x80\"", `{"a" "b"}`, `{1:2}`, `[[[[]]]]`, `tru`, `nul`, "", " ", `{"a":1}x`, `"\u12g4"`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		var compacted bytes.Buffer
		err := json.Compact(&compacted, b)
		var want bytes.Buffer
		json.HTMLEscape(&want, compacted.Bytes())
		got, ok := AppendCompact([]byte("prefix"), b)
		switch {
		case ok != (err == nil):
			t.Fatalf("%q: AppendCompact ok %v, json.Compact %v", b, ok, err)
		case !ok && string(got) != "prefix":
			t.Fatalf("%q: refused, but appended %q", b, got)
		case ok && string(got) != "prefix"+want.String():
			t.Fatalf("%q:\nAppendCompact %s\nencoding/json %s", b, got[len("prefix"):], want.Bytes())
		}
	})
}

// TestAppendCompactNesting: encoding/json's nesting limit, 10000 objects
// or arrays deep.
func TestAppendCompactNesting(t *testing.T) {
	for _, depth := range []int{maxNesting, maxNesting + 1} {
		doc := strings.Repeat(`{"a":[`, depth/2) + strings.Repeat("[", depth%2) + strings.Repeat("]", depth%2) + strings.Repeat("]}", depth/2)
		_, ok := AppendCompact(nil, []byte(doc))
		wantOK := json.Compact(new(bytes.Buffer), []byte(doc)) == nil
		if ok != wantOK || ok != (depth <= maxNesting) {
			t.Errorf("depth %d: AppendCompact ok %v, json.Compact ok %v", depth, ok, wantOK)
		}
	}
}

func BenchmarkAppendCompact(b *testing.B) {
	doc := []byte(`{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"obj-000123","namespace":"default","labels":{"app":"bench"}},"data":{"payload":"` + strings.Repeat("x", 1000) + `","replicas":"3"}}`)
	buf := make([]byte, 0, 4096)
	b.SetBytes(int64(len(doc)))
	b.Run("AppendCompact", func(b *testing.B) {
		for b.Loop() {
			buf, _ = AppendCompact(buf[:0], doc)
		}
	})
	b.Run("encoding/json", func(b *testing.B) {
		var c, e bytes.Buffer
		for b.Loop() {
			c.Reset()
			e.Reset()
			json.Compact(&c, doc)
			json.HTMLEscape(&e, c.Bytes())
		}
	})
}
