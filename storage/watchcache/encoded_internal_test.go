package watchcache

import (
	"bytes"
	"testing"
)

// TestEncodedLosesPublication: an encoding taken from the budget whose
// publication loses its CompareAndSwap gives its bytes back, both when
// the object left its cache meanwhile (the caller still gets its bytes,
// kept nowhere) and when another reader published the same encoding
// first (the caller gets that one). The window is made deterministic by
// beforePublish.
func TestEncodedLosesPublication(t *testing.T) {
	upper := func(b []byte) ([]byte, error) { return bytes.ToUpper(b), nil }
	t.Cleanup(func() { beforePublish = nil })

	budget := NewBudget(1 << 20)
	o := &Object{Key: "/a", JSON: []byte(`{"a":1}`)}
	o.adopt(budget)
	beforePublish = func(o *Object) {
		beforePublish = nil
		if budget.Used() != int64(len(o.JSON)) {
			t.Errorf("before publication the budget holds %d, want the encoding's %d", budget.Used(), len(o.JSON))
		}
		o.retire()
	}
	b, err := o.Encoded("upper", upper)
	if err != nil || string(b) != `{"A":1}` || o.EncodedSize() != 0 || budget.Used() != 0 {
		t.Fatalf("departed during publication: %q %v, keeps %d, budget %d; want the bytes, nothing kept, budget 0", b, err, o.EncodedSize(), budget.Used())
	}

	o = &Object{Key: "/b", JSON: []byte(`{"b":2}`)}
	o.adopt(budget)
	var first []byte
	beforePublish = func(o *Object) {
		beforePublish = nil
		first, _ = o.Encoded("upper", upper) // another reader, published first
	}
	b, err = o.Encoded("upper", upper)
	if err != nil || string(b) != `{"B":2}` || &b[0] != &first[0] {
		t.Fatalf("lost to another reader: %q %v; want the other reader's kept bytes", b, err)
	}
	if n := int64(len(o.JSON)); o.EncodedSize() != int(n) || budget.Used() != n {
		t.Fatalf("lost to another reader: keeps %d, budget %d; want one copy, %d bytes", o.EncodedSize(), budget.Used(), n)
	}

	// Another encoding published first: the CompareAndSwap is tried again
	// and both are kept.
	beforePublish = func(o *Object) {
		beforePublish = nil
		if _, err := o.Encoded("other", upper); err != nil {
			t.Error(err)
		}
	}
	if _, err := o.Encoded("third", upper); err != nil {
		t.Fatal(err)
	}
	if n := int64(3 * len(o.JSON)); o.EncodedSize() != int(n) || budget.Used() != n {
		t.Fatalf("three encodings: keeps %d, budget %d; want %d", o.EncodedSize(), budget.Used(), n)
	}
	o.retire()
	if budget.Used() != 0 {
		t.Fatalf("budget %d after retire", budget.Used())
	}
}
