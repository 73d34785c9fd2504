package audit

import (
	"bytes"
	"encoding/json"
	"testing"
)

// FuzzAppendString checks the hand-written string encoder against its
// oracle, encoding/json, for any string, valid UTF-8 or not.
func FuzzAppendString(f *testing.F) {
	for _, s := range []string{"", "plain", "quote\"back\\slash", "<html>&amp;", "\n\r\t\x00\x1f\x7f",
		"é\u2028\u2029", "\xff\xfe", "a\xc3", "emoji 😀"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		want, _ := json.Marshal(s)
		if got := appendString(nil, s); !bytes.Equal(got, want) {
			t.Fatalf("appendString(%q) = %s, encoding/json %s", s, got, want)
		}
	})
}

// FuzzAppendValue checks the encoder of decoded JSON values (what objects
// and patches are made of) against encoding/json.
func FuzzAppendValue(f *testing.F) {
	for _, s := range []string{`null`, `true`, `{"b":1,"a":[1.5,-2e-7,1e21,"x"]}`, `{"<":"&"}`, `[{}, [], 0, -0, 123456789012345678]`,
		`{"m":{"z":null,"y":false}}`, `1e-6`, `0.000001`, `"\u2028"`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		var v any
		if json.Unmarshal(b, &v) != nil {
			return
		}
		want, err := json.Marshal(v)
		if err != nil {
			return
		}
		if got := appendValue(nil, v); !bytes.Equal(got, want) {
			t.Fatalf("appendValue(%s) = %s, encoding/json %s", b, got, want)
		}
	})
}
