package informer

import (
	"math/rand/v2"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
)

func configMap(apiVersion, name string) *corev1.ConfigMap {
	return &corev1.ConfigMap{
		TypeMeta: metav1.TypeMeta{APIVersion: apiVersion, Kind: "ConfigMap"},
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, UID: types.UID("u-" + name), ResourceVersion: "42",
			Labels:            map[string]string{"app": "x", "tier": "web"},
			CreationTimestamp: metav1.Now().Rfc3339Copy(),
			OwnerReferences:   []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: "rs", UID: "rs-uid"}}},
		Data:       map[string]string{"a": "1", "b": "two"},
		BinaryData: map[string][]byte{"bin": {0, 1, 2}},
	}
}

// widget is a custom resource type without protobuf methods.
type widget struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Spec              struct {
		Size  int64             `json:"size"`
		Tags  []string          `json:"tags,omitempty"`
		Extra map[string]any    `json:"extra,omitempty"`
		Refs  map[string]string `json:"refs,omitempty"`
	} `json:"spec"`
}

// checkRoundTrip encodes obj, checks the blob's format and size, and that
// it decodes to obj.
func checkRoundTrip[T any](t *testing.T, encode func(T) ([]byte, error), decode func([]byte) (T, error), obj T, format byte) {
	t.Helper()
	blob, err := encode(obj)
	if err != nil {
		t.Fatalf("encode(%v) error: %v", obj, err)
	}
	if blob[0] != format {
		t.Errorf("blob format = %q, want %q", blob[0], format)
	}
	if len(blob) != cap(blob) {
		t.Errorf("blob len %d, cap %d: want an exactly sized slice", len(blob), cap(blob))
	}
	got, err := decode(blob)
	if err != nil {
		t.Fatalf("decode error: %v", err)
	}
	if diff := cmp.Diff(obj, got); diff != "" {
		t.Errorf("round trip mismatch (-want +got):\n%s", diff)
	}
}

func TestCompactCodec(t *testing.T) {
	t.Run("k8s.io/api type", func(t *testing.T) {
		c := newCompactCodec[*corev1.ConfigMap]()
		if !c.proto {
			t.Fatalf("ConfigMap: proto = false, want true")
		}
		checkRoundTrip(t, c.encode, c.decode, configMap("v1", "first"), formatProto)
		checkRoundTrip(t, c.encode, c.decode, configMap("v1", "same-typemeta"), formatProto)
		// Protobuf does not carry TypeMeta: an object with another one must
		// keep it, as JSON.
		checkRoundTrip(t, c.encode, c.decode, configMap("v2", "other-typemeta"), formatJSON)
		noKind := configMap("", "no-typemeta")
		noKind.Kind = ""
		checkRoundTrip(t, c.encode, c.decode, noKind, formatJSON)
	})
	t.Run("custom struct", func(t *testing.T) {
		c := newCompactCodec[*widget]()
		w := &widget{TypeMeta: metav1.TypeMeta{APIVersion: "example.com/v1", Kind: "Widget"},
			ObjectMeta: metav1.ObjectMeta{Name: "w", Labels: map[string]string{"a": "b"}}}
		w.Spec.Size = 1 << 40
		w.Spec.Tags = []string{"x", "y"}
		w.Spec.Extra = map[string]any{"n": int64(7), "f": 1.5, "s": "str", "l": []any{int64(1), "two"}}
		checkRoundTrip(t, c.encode, c.decode, w, formatJSON)
	})
	t.Run("unstructured", func(t *testing.T) {
		c := newCompactCodec[*unstructured.Unstructured]()
		u := &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "example.com/v1", "kind": "Widget",
			"metadata": map[string]any{"name": "u", "namespace": "ns", "labels": map[string]any{"a": "b"}},
			"spec":     map[string]any{"size": int64(3), "ratio": 0.25, "tags": []any{"x", true, nil}},
		}}
		checkRoundTrip(t, c.encode, c.decode, u, formatJSON)
	})
}

// TestCompactCodecSize: random alphanumeric data, where the fastest level
// finds no repeats, still gets its literals compressed.
func TestCompactCodecSize(t *testing.T) {
	c := newCompactCodec[*corev1.ConfigMap]()
	rnd := rand.New(rand.NewPCG(5, 6))
	for i := range 20 {
		cm := storeBenchConfigMap(i, rnd)
		blob, err := c.encode(cm)
		if err != nil {
			t.Fatal(err)
		}
		pb, _ := cm.Marshal()
		if len(blob) > len(pb)*8/10 {
			t.Errorf("object %d: compact blob %d bytes, protobuf %d: want at most 80%%", i, len(blob), len(pb))
		}
	}
}

// TestCompactCodecDictionary: after dictSamples objects the codec trains a
// dictionary; later blobs use it, round-trip, and are smaller than the
// same objects compressed alone. Blobs from before it still decode.
func TestCompactCodecDictionary(t *testing.T) {
	c := newCompactCodec[*corev1.ConfigMap]()
	rnd := rand.New(rand.NewPCG(7, 8))
	var early []byte
	for i := range dictSamples {
		blob, err := c.encode(storeBenchConfigMap(i, rnd))
		if err != nil {
			t.Fatal(err)
		}
		if blob[0] != formatProto {
			t.Fatalf("object %d of the first %d: format %q, want %q", i, dictSamples, blob[0], formatProto)
		}
		early = blob
	}
	if c.dict.Load() == nil {
		t.Fatalf("no dictionary after %d objects", dictSamples)
	}
	plain := newCompactCodec[*corev1.ConfigMap]()
	var withDict, alone int
	for i := range 50 {
		cm := storeBenchConfigMap(dictSamples+i, rnd)
		checkRoundTrip(t, c.encode, c.decode, cm, formatProtoDict)
		blob, _ := c.encode(cm)
		withDict += len(blob)
		blob, _ = plain.encode(cm)
		alone += len(blob)
	}
	if withDict*100 > alone*90 {
		t.Errorf("50 objects: %d bytes with the dictionary, %d without: want at least 10%% smaller", withDict, alone)
	}
	if _, err := c.decode(early); err != nil {
		t.Errorf("a blob from before the dictionary: %v", err)
	}
}

func TestCompactLabels(t *testing.T) {
	sets := []map[string]string{
		nil,
		{"a": "1"},
		{"a": "1", "ab": "2", "b": ""},
		{"app": "web", "tier": "front", "example.com/x": "y", "z": "last"},
	}
	selectors := []string{"", "a", "!a", "a=1", "a!=1", "ab=2", "b", "b=", "a in (1,2)", "a notin (1)",
		"app=web,tier=front", "app=web,tier!=front", "example.com/x=y", "z", "zz", "a,ab,b"}
	for _, set := range sets {
		cl := makeCompactLabels(set)
		for k, v := range set {
			if got, ok := cl.Lookup(k); !ok || got != v {
				t.Errorf("%q.Lookup(%q) = %q, %v; want %q, true", cl, k, got, ok, v)
			}
		}
		for _, missing := range []string{"", "0", "aa", "c", "zzz"} {
			if _, in := set[missing]; in {
				continue
			}
			if cl.Has(missing) || cl.Get(missing) != "" {
				t.Errorf("%q.Has(%q) = true or Get = %q, want absent", cl, missing, cl.Get(missing))
			}
		}
		for _, s := range selectors {
			sel, err := labels.Parse(s)
			if err != nil {
				t.Fatal(err)
			}
			if got, want := sel.Matches(cl), sel.Matches(labels.Set(set)); got != want {
				t.Errorf("selector %q on %v: compact Matches = %v, want %v", s, set, got, want)
			}
		}
	}
}
