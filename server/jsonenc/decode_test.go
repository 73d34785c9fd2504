package jsonenc

import (
	"reflect"
	"strings"
	"testing"

	utiljson "k8s.io/apimachinery/pkg/util/json"
)

// checkDecode fails unless Decode gives what apimachinery's json.Unmarshal
// gives wherever it decodes at all.
func checkDecode(t *testing.T, in string) (ok bool) {
	t.Helper()
	got, ok := Decode([]byte(in))
	var want map[string]any
	err := utiljson.Unmarshal([]byte(in), &want)
	if !ok {
		return false
	}
	if err != nil {
		t.Fatalf("Decode(%q) decoded what apimachinery refuses: %v", in, err)
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("Decode(%q) = %#v, apimachinery %#v", in, got, want)
	}
	return true
}

func TestDecode(t *testing.T) {
	tests := []struct {
		in string
		ok bool
	}{
		{`{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"a","labels":{"x":"y"}},"data":{"k":"v"}}`, true},
		{` {"a":[1,-2,3.5,1e3,-0,12345678901234567890,9223372036854775807,-9223372036854775808],"b":[],"c":{},"d":null,"e":true,"f":false} `, true},
		{`{"s":"tab\there \"quoted\" \\ \/ \u00e9 \ud83d\ude00 é"}`, true},
		{`{"a":1,"a":2}`, true},
		{`{"n":123456789012345678}`, true},
		{`{"n":1234567890123456789}`, true},
		// Left to apimachinery: invalid JSON, and what it repairs.
		{`{"a":1,}`, false},
		{`{"a":01}`, false},
		{`{"a":1.}`, false},
		{`{"a":+1}`, false},
		{`{"a":1e400}`, false},
		{`{"a":"x` + "\x01" + `"}`, false},
		{`{"a":"\ud83d"}`, false},
		{"{\"a\":\"\xff\"}", false},
		{`{"a":1} x`, false},
		{`[1]`, false},
		{`{"a":tru}`, false},
		{`{"a" 1}`, false},
		{`{` + strings.Repeat(`"a":{`, 600) + strings.Repeat(`}`, 601), false},
	}
	for _, tc := range tests {
		if got := checkDecode(t, tc.in); got != tc.ok {
			t.Errorf("Decode(%.60q) ok = %v, want %v", tc.in, got, tc.ok)
		}
	}
}

func FuzzDecode(f *testing.F) {
	for _, s := range []string{
		`{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"a"},"data":{"k":"v"}}`,
		`{"a":[1,-2,3.5,1e3,-0,12345678901234567890],"b":{"c":null,"d":true}}`,
		`{"s":"\u00e9\ud83d\ude00\n\"x\""}`,
		`{"a":1,"a":[{}]}`,
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, in string) { checkDecode(t, in) })
}

func BenchmarkDecode(b *testing.B) {
	body := []byte(`{"apiVersion":"bench.objwatch.io/v1","kind":"BenchObject","metadata":{"name":"o-1","labels":{"app":"bench","shard":"s3"}},"spec":{"replicas":1,"data":"` + strings.Repeat("x", 724) + `"}}`)
	b.Run("jsonenc", func(b *testing.B) {
		for b.Loop() {
			if _, ok := Decode(body); !ok {
				b.Fatal("not decoded")
			}
		}
	})
	b.Run("apimachinery", func(b *testing.B) {
		for b.Loop() {
			var m map[string]any
			if err := utiljson.Unmarshal(body, &m); err != nil {
				b.Fatal(err)
			}
		}
	})
}
