package change_test

import (
	"encoding/json"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/objwatch/objwatch/change"
)

func mustFingerprinter(t testing.TB, exclude ...string) *change.Fingerprinter {
	t.Helper()
	f, err := change.NewFingerprinter(exclude...)
	if err != nil {
		t.Fatal(err)
	}
	return f
}

func sum(t testing.TB, f *change.Fingerprinter, obj any) change.Fingerprint {
	t.Helper()
	s, err := f.Sum(obj)
	if err != nil {
		t.Fatalf("Sum(%v) = %v", obj, err)
	}
	return s
}

func TestFingerprint(t *testing.T) {
	f := mustFingerprinter(t, change.Volatile()...)
	tests := []struct {
		name string
		a, b string
		same bool
	}{
		{"member order", `{"a":1,"b":{"c":[1,2],"d":null}}`, `{"b":{"d":null,"c":[1,2]},"a":1}`, true},
		{"1 and 1.0", `{"a":1}`, `{"a":1.0}`, true},
		{"list order", `{"a":[1,2]}`, `{"a":[2,1]}`, false},
		{"string vs number", `{"a":"1"}`, `{"a":1}`, false},
		{"null vs absent", `{"a":null}`, `{}`, false},
		{"empty list vs object", `{"a":[]}`, `{"a":{}}`, false},
		{"true vs false", `{"a":true}`, `{"a":false}`, false},
		{"member moved", `{"a":{"b":1}}`, `{"b":{"a":1}}`, false},
		{"nested vs flat", `{"a":[[1],[2]]}`, `{"a":[[1,2]]}`, false},
		{"name boundary", `{"ab":"c"}`, `{"a":"bc"}`, false},
		{"resourceVersion", `{"metadata":{"name":"x","resourceVersion":"1"}}`, `{"metadata":{"name":"x","resourceVersion":"2"}}`, true},
		{"managedFields", `{"metadata":{"managedFields":[{"manager":"a"}]}}`, `{"metadata":{"managedFields":[{"manager":"b"}]}}`, true},
		{"creationTimestamp", `{"metadata":{"creationTimestamp":"2026-01-01T00:00:00Z"}}`, `{"metadata":{}}`, true},
		{"deletionTimestamp", `{"metadata":{"deletionTimestamp":"2026-01-01T00:00:00Z"}}`, `{"metadata":{}}`, false},
		{"resourceVersion elsewhere", `{"spec":{"resourceVersion":"1"}}`, `{"spec":{"resourceVersion":"2"}}`, false},
		{"generation", `{"metadata":{"generation":1}}`, `{"metadata":{"generation":2}}`, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a, b := sum(t, f, obj(tt.a)), sum(t, f, obj(tt.b))
			if (a == b) != tt.same {
				t.Errorf("Sum(%s) = %v, Sum(%s) = %v, want same %v", tt.a, a, tt.b, b, tt.same)
			}
		})
	}
}

func TestFingerprintExclude(t *testing.T) {
	tests := []struct {
		exclude []string
		a, b    string
		same    bool
	}{
		{[]string{"metadata.generation"}, `{"metadata":{"generation":1}}`, `{"metadata":{"generation":2}}`, true},
		{[]string{"status"}, `{"spec":1,"status":{"a":1}}`, `{"spec":1,"status":{"a":2}}`, true},
		{[]string{"status"}, `{"spec":1,"status":{"a":1}}`, `{"spec":2,"status":{"a":1}}`, false},
		{[]string{"metadata.annotations.*"}, `{"metadata":{"annotations":{"a":"1"}}}`, `{"metadata":{"annotations":{"b":"2"}}}`, true},
		{[]string{"status.conditions[*].lastTransitionTime"},
			`{"status":{"conditions":[{"type":"A","lastTransitionTime":"1"}]}}`,
			`{"status":{"conditions":[{"type":"A","lastTransitionTime":"2"}]}}`, true},
		{[]string{"status.conditions[type=A]"},
			`{"status":{"conditions":[{"type":"A","x":"1"},{"type":"B"}]}}`,
			`{"status":{"conditions":[{"type":"B"},{"type":"A","x":"2"}]}}`, true}, // [B] remains in both
		{[]string{"status.conditions[type=A]"},
			`{"status":{"conditions":[{"type":"A"},{"type":"B","x":"1"}]}}`,
			`{"status":{"conditions":[{"type":"A"},{"type":"B","x":"2"}]}}`, false},
		{[]string{"status.conditions[type=A]"},
			`{"status":{"conditions":[{"type":"A","x":"1"},{"type":"B"}]}}`,
			`{"status":{"conditions":[{"type":"A","x":"2"},{"type":"B"}]}}`, true},
		{[]string{"l[0]"}, `{"l":[1,2]}`, `{"l":[3,2]}`, true},
		{[]string{"l[0]"}, `{"l":[1,2]}`, `{"l":[1,3]}`, false},
		{[]string{`["a.b"]`}, `{"a.b":1,"c":1}`, `{"a.b":2,"c":1}`, true},
	}
	for _, tt := range tests {
		f := mustFingerprinter(t, tt.exclude...)
		a, b := sum(t, f, obj(tt.a)), sum(t, f, obj(tt.b))
		if (a == b) != tt.same {
			t.Errorf("exclude %q: Sum(%s) = %v, Sum(%s) = %v, want same %v", tt.exclude, tt.a, a, tt.b, b, tt.same)
		}
	}
	if _, err := change.NewFingerprinter("a..b"); err == nil {
		t.Errorf("NewFingerprinter(a..b) = nil error")
	}
	many := make([]string, 65)
	for i := range many {
		many[i] = "a"
	}
	if _, err := change.NewFingerprinter(many...); err == nil {
		t.Errorf("NewFingerprinter(65 patterns) = nil error")
	}
}

// TestFingerprintProperties: on random objects, equal content has equal
// fingerprints whatever its form (maps, JSON, copies), and different
// content has different fingerprints.
func TestFingerprintProperties(t *testing.T) {
	f := mustFingerprinter(t)
	g := newGen(t, 3)
	for range 3000 {
		a := g.object(4)
		b, ok := g.mutate(a).(map[string]any)
		if !ok {
			continue
		}
		sa, sb := sum(t, f, a), sum(t, f, b)
		if got := sum(t, f, deepCopy(a)); got != sa {
			t.Fatalf("Sum(copy) = %v, Sum = %v", got, sa)
		}
		if got := sum(t, f, json.RawMessage(mustJSON(t, a))); got != sa {
			t.Fatalf("Sum(JSON) = %v, Sum(map) = %v for %s", got, sa, mustJSON(t, a))
		}
		if equalContent := change.Between(a, b).Empty(); equalContent != (sa == sb) {
			t.Fatalf("equal content %v but fingerprints %v, %v\na: %s\nb: %s", equalContent, sa, sb, mustJSON(t, a), mustJSON(t, b))
		}
	}
}

func TestFingerprintTyped(t *testing.T) {
	f := mustFingerprinter(t, change.Volatile()...)
	d := deployment()
	typed := sum(t, f, d)
	if got := sum(t, f, toUnstructured(t, d)); got != typed {
		t.Errorf("Sum(unstructured) = %v, Sum(typed) = %v", got, typed)
	}
	if got := sum(t, f, json.RawMessage(mustJSON(t, d))); got != typed {
		t.Errorf("Sum(JSON) = %v, Sum(typed) = %v", got, typed)
	}
	noise := deployment()
	noise.ResourceVersion = "99"
	noise.CreationTimestamp = metav1.Now()
	noise.ManagedFields = []metav1.ManagedFieldsEntry{{Manager: "kubectl"}}
	if got := sum(t, f, noise); got != typed {
		t.Errorf("Sum(noise only) = %v, want %v", got, typed)
	}
	changed := deployment()
	changed.Spec.Template.Spec.Containers[0].Env[0].Value = "dev"
	if got := sum(t, f, changed); got == typed {
		t.Errorf("Sum(changed env) = Sum(original)")
	}
	var none *appsv1.Deployment
	if got, want := sum(t, f, none), sum(t, f, nil); got != want {
		t.Errorf("Sum(nil deployment) = %v, Sum(nil) = %v", got, want)
	}
}

// TestFingerprintJSON: JSON text is fingerprinted without decoding, to the
// fingerprint of its decoded value.
func TestFingerprintJSON(t *testing.T) {
	fps := map[string]*change.Fingerprinter{
		"none":     mustFingerprinter(t),
		"default":  mustFingerprinter(t, change.Volatile()...),
		"wildcard": mustFingerprinter(t, "*.a", "l[*].b", "l[1]", `["x.y"]`),
		"keyed":    mustFingerprinter(t, "l[name=n]"), // decodes
	}
	docs := []string{
		`{}`, `[]`, `null`, `true`, `"s"`, `0`, `-0`, `1.0`, `1e2`, `-1.5E-3`, `12345678901234567890`, `-9223372036854775808`,
		` { "a" : [ 1 , 2 ] , "b":{"a":null} } `,
		`{"s":"\u00e9\n\t\"\\\/ \ud83d\ude00","\u0061":1}`,
		"{\"bad utf8\":\"\xff\",\"lone surrogate\":\"\\ud800\"}",
		`{"l":[{"name":"n","b":1},{"name":"m","b":2},3],"x.y":1,"metadata":{"resourceVersion":"1","name":"x"}}`,
	}
	for name, f := range fps {
		for _, doc := range docs {
			var v any
			if err := json.Unmarshal([]byte(doc), &v); err != nil {
				t.Fatalf("bad test doc %s: %v", doc, err)
			}
			got, err := f.Sum(json.RawMessage(doc))
			if err != nil {
				t.Errorf("%s: Sum(%s) = %v", name, doc, err)
				continue
			}
			if want := sum(t, f, v); got != want {
				t.Errorf("%s: Sum(JSON %s) = %v, Sum(decoded) = %v", name, doc, got, want)
			}
		}
	}
	for _, doc := range []string{``, `{`, `{"a"}`, `{"a":1,}`, `[1,]`, `[1 2]`, `01`, `1.`, `.5`, `-`, `1e`, `tru`, `"a`, `"\x"`, `{} x`, "\"\x01\"", `{a:1}`, `1e999`} {
		if _, err := fps["none"].Sum(json.RawMessage(doc)); err == nil {
			t.Errorf("Sum(%q) = nil error", doc)
		}
	}
}
