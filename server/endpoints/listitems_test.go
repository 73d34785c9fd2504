package endpoints

import (
	"bufio"
	"bytes"
	"encoding/json"
	"reflect"
	"testing"
)

// bareItemOracle is what bareItem must give: raw decoded, without
// apiVersion and kind.
func bareItemOracle(raw []byte) (map[string]any, bool) {
	var obj map[string]any
	if json.Unmarshal(raw, &obj) != nil || obj == nil {
		return nil, false
	}
	delete(obj, "apiVersion")
	delete(obj, "kind")
	return obj, true
}

// writtenItem is bareItem's output as a list writes it, and its announced
// length.
func writtenItem(t *testing.T, p itemParts) []byte {
	t.Helper()
	var buf bytes.Buffer
	bw := bufio.NewWriter(&buf)
	p.writeTo(bw)
	bw.Flush()
	if buf.Len() != p.len() {
		t.Fatalf("item written is %d bytes, its length said %d: %s", buf.Len(), p.len(), buf.Bytes())
	}
	return buf.Bytes()
}

var bareItemSeeds = []string{
	`{"apiVersion":"v1","kind":"Pod","metadata":{"name":"p"},"spec":{}}`,
	`{"apiVersion":"v1","data":{"kind":"x","a":"\"kind\":\"y\""},"kind":"ConfigMap","metadata":{"name":"c"}}`,
	`{"action":"a","apiVersion":"v1","count":2,"involvedObject":{"kind":"Pod"},"kind":"Event","metadata":{}}`,
	`{"apiVersion":"v1","kind":"Namespace"}`,
	`{"metadata":{"name":"x"},"kind":"K","apiVersion":"v1"}`,
	`{"metadata":{"name":"x"},"apiVersion":"v1"}`,
	`{"metadata":{"name":"x"}}`,
	`{}`,
	` { "apiVersion" : "apps/v1" , "kind" : "Deployment" , "spec" : { "replicas" : 1 } , "status" : [ 1 , 2 ] } `,
	`{"a":"\\","apiVersion":"v1","b":"\\\"kind\\\"","kind":"K","c":null,"d":true,"e":-1.5e3}`,
	`{"apiVers\u0069on":"v1","kind":"K","x":1}`,
	`{"apiVersion":"v1","kind":"K","x":1,"kind":"L"}`,
	`[1,2]`,
	`{"a":1`,
	`{"a" 1}`,
	`{"a":1}}`,
}

// TestBareItem: items lose their top-level apiVersion and kind, and
// nothing else, whatever the members' order and spacing; nested kinds and
// strings that look like members stay.
func TestBareItem(t *testing.T) {
	for _, s := range bareItemSeeds {
		checkBareItem(t, []byte(s))
	}
	p, err := bareItem([]byte(bareItemSeeds[1]))
	if err != nil || p.whole != nil {
		t.Fatalf("a compact object was not cut in place: %v %v", p, err)
	}
	if got, want := string(writtenItem(t, p)), `{"data":{"kind":"x","a":"\"kind\":\"y\""},"metadata":{"name":"c"}}`; got != want {
		t.Fatalf("bare item\n got %s\nwant %s", got, want)
	}
}

func FuzzBareItem(f *testing.F) {
	for _, s := range bareItemSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, raw []byte) { checkBareItem(t, raw) })
}

func checkBareItem(t *testing.T, raw []byte) {
	t.Helper()
	want, valid := bareItemOracle(raw)
	p, err := bareItem(raw)
	if !valid {
		if err == nil && json.Valid(raw) {
			t.Fatalf("%s is no JSON object, but bareItem took it", raw)
		}
		return // invalid JSON: the cache never holds it
	}
	if err != nil {
		t.Fatalf("%s: %v", raw, err)
	}
	out := writtenItem(t, p)
	var got map[string]any
	if err := json.Unmarshal(out, &got); err != nil {
		t.Fatalf("%s became invalid JSON %s: %v", raw, out, err)
	}
	if !reflect.DeepEqual(got, want) && !hasDuplicateKeys(raw) {
		t.Fatalf("bare item of %s\n got %s", raw, out)
	}
}

// hasDuplicateKeys reports whether raw repeats a top-level key (the
// oracle keeps the last, the scan the first members after both types).
func hasDuplicateKeys(raw []byte) bool {
	dec := json.NewDecoder(bytes.NewReader(raw))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return false
	}
	seen := map[string]bool{}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return false
		}
		k, _ := tok.(string)
		if seen[k] {
			return true
		}
		seen[k] = true
		var skip json.RawMessage
		if dec.Decode(&skip) != nil {
			return false
		}
	}
	return false
}
