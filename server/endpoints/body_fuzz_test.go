package endpoints

import (
	"bytes"
	"encoding/json"
	"errors"
	"net/http"
	"net/url"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"

	jsonpatch "gopkg.in/evanphx/json-patch.v4"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	kjson "k8s.io/apimachinery/pkg/runtime/serializer/json"
	utiljson "k8s.io/apimachinery/pkg/util/json"
	"sigs.k8s.io/yaml"

	"github.com/objwatch/objwatch/server/objects"
	"github.com/objwatch/objwatch/server/registry"
)

var bodyTypes = []string{"application/json", "application/yaml", protobufType, cborType}

// mustBeStatus fails unless err is a metav1.Status error of a client's
// mistake (4xx).
func mustBeStatus(t *testing.T, what string, err error) {
	t.Helper()
	var s apierrors.APIStatus
	if !errors.As(err, &s) || s.Status().Code < 400 || s.Status().Code >= 500 {
		t.Fatalf("%s: %v (%T), want a 4xx Status error", what, err, err)
	}
}

func bodyRequest(ct string) *http.Request {
	return &http.Request{Header: http.Header{"Content-Type": []string{ct}}}
}

// FuzzDecodeBody decodes any bytes as a JSON, YAML, protobuf or CBOR
// request body: it fails with a 4xx Status or gives an object whose JSON,
// YAML, protobuf or CBOR encoding decodes to the same object; a JSON body decodes
// exactly when apimachinery's JSON decoder (with Kubernetes' depth limit)
// reads it as an object whose metadata, if any, is an object.
func FuzzDecodeBody(f *testing.F) {
	cm, _ := protobufCodecFor(`{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"a","labels":{"k":"v"}},"data":{"x":"y"}}`)
	for _, s := range []string{
		`{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"a"},"data":{"k":"v"}}`,
		`{"a":1,"b":1.5,"c":-0,"d":1e400,"e":12345678901234567890,"f":[null,true,{}]}`,
		`{"metadata":null}`, `{"metadata":[]}`, `[]`, `"x"`, `{"a":` + strings.Repeat("[", 10000) + strings.Repeat("]", 10000) + `}`,
		"apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: a\ndata:\n  k: v\n", "a: &x [1]\nb: *x\n", "? [a]\n: b\n",
		"{\"a\": \"\xff\"}", `{"a":"\ud800"}`,
	} {
		for i := range bodyTypes {
			f.Add([]byte(s), uint8(i))
		}
	}
	f.Add(cm, uint8(2))
	for _, j := range []string{
		`{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"a"},"data":{"k":"v"},"binaryData":{"b":"AP8="}}`,
		`{"apiVersion":"x.io/v1","kind":"Thing","metadata":{"name":"a"},"spec":{"n":1,"f":1.5,"l":[true,null]}}`,
	} {
		u, _ := objects.Decode([]byte(j))
		var buf bytes.Buffer
		if err := cborCodec.Encode(u, &buf); err != nil {
			f.Fatal(err)
		}
		f.Add(buf.Bytes(), uint8(3))
	}
	f.Add(append([]byte("k8s\x00"), 0x0a, 0x02, 0x0a, 0x00), uint8(2))
	f.Fuzz(func(t *testing.T, body []byte, which uint8) {
		ct := bodyTypes[int(which)%len(bodyTypes)]
		obj, err := decodeBody(bodyRequest(ct), body)
		if ct == "application/json" {
			var m map[string]any
			jerr := jsonUnmarshal(body, &m)
			md, hasMD := m["metadata"]
			_, mdObject := md.(map[string]any)
			oracleOK := jerr == nil && m != nil && bytes.HasPrefix(bytes.TrimSpace(body), []byte("{")) && (!hasMD || md == nil || mdObject)
			if (err == nil) != oracleOK {
				t.Fatalf("decodeBody(%q) error %v; apimachinery's decoder: %v (object %v)", body, err, jerr, m != nil)
			}
		}
		if err != nil {
			mustBeStatus(t, "decodeBody("+ct+")", err)
			return
		}
		j, err := json.Marshal(obj.Object)
		if err != nil {
			t.Fatalf("decodeBody(%q, %s) = %v: not encodable: %v", body, ct, obj.Object, err)
		}
		again, err := decodeBody(bodyRequest("application/json"), j)
		// Equal as JSON, not as Go values: a number written with an
		// exponent (0e0) decodes to float64, as apimachinery's decoder
		// has it, and is encoded back as 0, which decodes to int64.
		if err != nil || !jsonEqual(again.Object, obj.Object) {
			t.Fatalf("decodeBody(%q, %s) = %v; its JSON %s decodes to %v, %v", body, ct, obj.Object, j, again, err)
		}
		y, err := yaml.Marshal(obj.Object)
		if err != nil && strings.Contains(err.Error(), "control characters are not allowed") {
			return // a string JSON holds and YAML cannot print (kubectl -o yaml fails alike)
		}
		if anyKey(obj.Object, func(k string) bool { return k == "<<" || utf8.RuneCountInString(k) > 1000 }) {
			// The YAML encoder prints a key "<<" unquoted, which YAML reads
			// back as a merge key, and cannot convert a key of over 1024
			// characters (YAML's longest simple key): the converter's
			// limits, not the decoder's (Kubernetes' YAML serializer is the
			// same converter).
			return
		}
		if err != nil {
			t.Fatalf("decodeBody(%q, %s) = %v: no YAML: %v", body, ct, obj.Object, err)
		}
		if again, err := decodeBody(bodyRequest("application/yaml"), y); err != nil || !jsonEqual(again.Object, obj.Object) {
			t.Fatalf("decodeBody(%q, %s) = %v; its YAML %s decodes to %v, %v", body, ct, obj.Object, y, again, err)
		}
		if ct == cborType {
			var buf bytes.Buffer
			if err := cborCodec.Encode(obj, &buf); err != nil {
				t.Fatalf("decodeBody(%x, cbor) = %v: not encodable as CBOR: %v", body, obj.Object, err)
			}
			if again, err := decodeBody(bodyRequest(cborType), buf.Bytes()); err != nil || !jsonEqual(again.Object, obj.Object) {
				t.Fatalf("decodeBody(%x, cbor) = %v; encoded again it decodes to %v, %v", body, obj.Object, again, err)
			}
		}
		if ct == protobufType {
			pb, err := protobufCodecFor(string(j))
			if err != nil {
				t.Fatalf("decodeBody(%q, protobuf) = %s: not encodable as protobuf: %v", body, j, err)
			}
			if again, err := decodeBody(bodyRequest(protobufType), pb); err != nil || !reflect.DeepEqual(again.Object, obj.Object) {
				t.Fatalf("decodeBody(%q, protobuf) = %v; encoded again it decodes to %v, %v", body, obj.Object, again, err)
			}
		}
	})
}

// anyKey tells whether a field name of v or of any object inside it
// satisfies f.
func anyKey(v any, f func(string) bool) bool {
	switch v := v.(type) {
	case map[string]any:
		for k, e := range v {
			if f(k) || anyKey(e, f) {
				return true
			}
		}
	case []any:
		return slices.ContainsFunc(v, func(e any) bool { return anyKey(e, f) })
	}
	return false
}

// jsonEqual compares decoded values by their JSON values: YAML has no
// int64 / float64 distinction for integral floats, and a string of
// invalid UTF-8 (a CBOR byte string) is written as U+FFFD, which reads
// back as the valid rune and is written unescaped next time.
func jsonEqual(a, b any) bool {
	return reflect.DeepEqual(jsonValue(a), jsonValue(b))
}

func jsonValue(v any) any {
	j, err := json.Marshal(v)
	if err != nil {
		return err.Error()
	}
	d := json.NewDecoder(bytes.NewReader(j))
	d.UseNumber()
	var out any
	if err := d.Decode(&out); err != nil {
		return err.Error()
	}
	return out
}

func jsonUnmarshal(b []byte, v any) error { return utiljson.Unmarshal(b, v) }

// legacyJSON decodes built-in objects from JSON into their Go types.
var legacyJSON = kjson.NewSerializerWithOptions(kjson.DefaultMetaFactory, registry.Scheme, registry.Scheme, kjson.SerializerOptions{})

// protobufCodecFor encodes the built-in object in JSON j as protobuf.
func protobufCodecFor(j string) ([]byte, error) {
	obj, _, err := legacyJSON.Decode([]byte(j), nil, nil)
	if err != nil {
		return nil, err
	}
	var buf bytes.Buffer
	if err := protobufCodec.Encode(obj, &buf); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// fuzzSet is a label or field set drawn from b, for selectors to match.
func fuzzSet(b []byte) map[string]string {
	keys := []string{"a", "b", "app", "example.com/x", "metadata.name", "metadata.namespace", "status.phase"}
	vals := []string{"", "1", "x", "y", "10"}
	s := map[string]string{}
	for i, c := range b {
		if i%2 == 0 && i+1 < len(b) {
			s[keys[int(c)%len(keys)]] = vals[int(b[i+1])%len(vals)]
		}
	}
	return s
}

// FuzzSelectors parses label and field selectors as the server does (the
// labelSelector and fieldSelector query parameters of a list) and checks
// each parsed selector against its requirements read directly (=, ==,
// !=, in, notin, exists, !exists, gt, lt; a field selector's terms), and
// that its String form parses back to a selector deciding the same.
func FuzzSelectors(f *testing.F) {
	for _, s := range [][2]string{
		{"a=1,b!=x", "metadata.name=x"}, {"app in (x,y),!b", "metadata.namespace!=y,status.phase=1"},
		{"a notin (1),b", ""}, {"a>5,b<11", "a==b"}, {"example.com/x==y", `metadata.name=x\,y`}, {"a in ()", "=x"}, {"!", "a!"},
	} {
		f.Add(s[0], s[1], []byte{0, 1, 1, 2, 2, 3, 3, 4})
	}
	f.Fuzz(func(t *testing.T, ls, fs string, set []byte) {
		q := url.Values{"labelSelector": {ls}, "fieldSelector": {fs}}
		o, err := listOptions(&http.Request{URL: &url.URL{RawQuery: q.Encode()}}, "list")
		if err != nil {
			mustBeStatus(t, "listOptions", err)
			return
		}
		l, fl := labels.Set(fuzzSet(set)), fields.Set(fuzzSet(slices.Concat(set, []byte{1})))
		if o.LabelSelector != nil {
			reqs, _ := o.LabelSelector.Requirements()
			want := true
			for _, r := range reqs {
				want = want && labelRequirementHolds(r, l)
			}
			if got := o.LabelSelector.Matches(l); got != want {
				t.Fatalf("label selector %q (%s) on %v = %v, its requirements %v", ls, o.LabelSelector, l, got, want)
			}
			again, err := labels.Parse(o.LabelSelector.String())
			if err != nil || again.Matches(l) != want {
				t.Fatalf("label selector %q: String %q parses to %v, %v", ls, o.LabelSelector, again, err)
			}
		}
		if o.FieldSelector != nil {
			want := true
			for _, r := range o.FieldSelector.Requirements() {
				switch r.Operator {
				case "=", "==":
					want = want && fl[r.Field] == r.Value
				case "!=":
					want = want && fl[r.Field] != r.Value
				default:
					t.Fatalf("field selector %q: operator %q", fs, r.Operator)
				}
			}
			if got := o.FieldSelector.Matches(fl); got != want {
				t.Fatalf("field selector %q (%s) on %v = %v, its terms %v", fs, o.FieldSelector, fl, got, want)
			}
			again, err := fields.ParseSelector(o.FieldSelector.String())
			if err != nil || again.Matches(fl) != want {
				t.Fatalf("field selector %q: String %q parses to %v, %v", fs, o.FieldSelector, again, err)
			}
		}
	})
}

func labelRequirementHolds(r labels.Requirement, l labels.Set) bool {
	v, has := l[r.Key()]
	vals := r.Values()
	switch r.Operator() {
	case "=", "==", "in":
		return has && vals.Has(v)
	case "!=", "notin":
		return !has || !vals.Has(v)
	case "exists":
		return has
	case "!":
		return !has
	case "gt", "lt":
		if !has {
			return false
		}
		n, err1 := strconv.ParseInt(v, 10, 64)
		bound, err2 := strconv.ParseInt(vals.UnsortedList()[0], 10, 64)
		if err1 != nil || err2 != nil {
			return false
		}
		return (r.Operator() == "gt" && n > bound) || (r.Operator() == "lt" && n < bound)
	}
	return false
}

var patchTypes = []string{"application/json-patch+json", "application/merge-patch+json", "application/strategic-merge-patch+json"}

// FuzzPatch applies any patch body of each type to a ConfigMap, as a
// PATCH request does: it fails with a 4xx Status or gives a ConfigMap
// (apiVersion and kind as the URL's) that encodes and decodes to itself.
// A merge patch applied twice gives what it gave once (RFC 7386), and a
// JSON patch of tests only, when it applies, gives the object unchanged.
func FuzzPatch(f *testing.F) {
	orig := `{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"a","namespace":"ns","labels":{"k":"v"},"finalizers":["x"]},"data":{"k":"v","n":"1"}}`
	for _, s := range []string{
		`[{"op":"add","path":"/data/x","value":"y"}]`, `[{"op":"remove","path":"/data/k"},{"op":"test","path":"/data/n","value":"1"}]`,
		`[{"op":"copy","from":"/data","path":"/metadata/labels"}]`, `[{"op":"move","from":"/data","path":"/data/k"}]`,
		`[{"op":"replace","path":"/kind","value":"Secret"}]`, `[{"op":"test","path":"/data/k","value":"v"}]`, `[{"op":"add","path":"/metadata/finalizers/-","value":"z"}]`,
		`{"data":{"k":null,"z":"1"}}`, `{"metadata":{"labels":null}}`, `{"metadata":"x"}`, `{"apiVersion":"v2"}`, `null`, `[]`, `"s"`,
		`{"metadata":{"finalizers":["y"],"$setElementOrder/finalizers":["y","x"]}}`, `{"$patch":"replace","data":{}}`, `{"data":{"$patch":"delete"}}`,
		`{"metadata":{"$deleteFromPrimitiveList/finalizers":["x"]}}`, `{"$retainKeys":["data"],"data":{"q":"r"}}`,
	} {
		for i := range patchTypes {
			f.Add([]byte(orig), []byte(s), uint8(i))
		}
	}
	reg := registry.New()
	res, ok := reg.Get(schema.GroupVersionResource{Version: "v1", Resource: "configmaps"})
	if !ok || res.PatchSchema == nil {
		f.Fatal("no configmaps with a patch schema")
	}
	a := &API{cfg: Config{MaxRequestBytes: 3 << 20}}
	f.Fuzz(func(t *testing.T, orig, body []byte, which uint8) {
		if _, err := objects.Decode(orig); err != nil {
			return // the stored object is always one
		}
		pt := patchTypes[int(which)%len(patchTypes)]
		r, _ := http.NewRequest("PATCH", "/", bytes.NewReader(body))
		r.Header.Set("Content-Type", pt)
		p, err := a.bodies.readPatch(r, res)
		if err != nil {
			mustBeStatus(t, "readPatch("+pt+")", err)
			return
		}
		obj, err := p.applyTo(orig, res.PatchSchema, res)
		if err != nil {
			mustBeStatus(t, pt+" "+string(body), err)
			return
		}
		if obj.GetAPIVersion() != "v1" || obj.GetKind() != "ConfigMap" {
			t.Fatalf("%s %s on %s = %s/%s", pt, body, orig, obj.GetAPIVersion(), obj.GetKind())
		}
		j, err := json.Marshal(obj.Object)
		if err != nil {
			t.Fatalf("%s %s on %s: %v not encodable: %v", pt, body, orig, obj.Object, err)
		}
		if again, err := objects.Decode(j); err != nil || !reflect.DeepEqual(again.Object, obj.Object) {
			t.Fatalf("%s %s on %s = %s, which decodes to %v, %v", pt, body, orig, j, again, err)
		}
		if pt == "application/merge-patch+json" {
			twice, err := p.applyTo(j, res.PatchSchema, res)
			if err != nil || !jsonEqual(twice.Object, obj.Object) {
				t.Fatalf("merge patch %s on %s = %s once, %v twice (%v)", body, orig, j, twice, err)
			}
		}
		if pt == "application/json-patch+json" && !slices.ContainsFunc(p.ops, func(op jsonpatch.Operation) bool { return op.Kind() != "test" }) {
			var want map[string]any
			jsonUnmarshal(orig, &want)
			if !jsonEqual(obj.Object, want) && want["apiVersion"] != nil && want["kind"] != nil {
				t.Fatalf("tests-only JSON patch %s on %s = %s", body, orig, j)
			}
		}
	})
}
