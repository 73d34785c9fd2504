package jsonenc

import (
	"bytes"
	"encoding/json"
	"math"
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
