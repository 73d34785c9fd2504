package change

import "testing"

func TestMaskPointer(t *testing.T) {
	for _, c := range []struct {
		pattern, want string
		ok            bool
	}{
		{"spec.replicas", "/spec/replicas", true},
		{"metadata.labels.*", "/metadata/labels", true},
		{"spec.containers[*].image", "/spec/containers", true},
		{"spec.containers[0].image", "/spec/containers/0/image", true},
		{"spec.containers[name=web].image", "/spec/containers", true},
		{`metadata.annotations["example.com/a~b"]`, "/metadata/annotations/example.com~1a~0b", true},
		{`data["a,b"]`, "/data", true},
		{"*.x", "", false},
	} {
		got, ok := MustPattern(c.pattern).MaskPointer()
		if got != c.want || ok != c.ok {
			t.Errorf("MaskPointer(%s) = %q, %v; want %q, %v", c.pattern, got, ok, c.want, c.ok)
		}
	}
	if ptrs, ok := MustFilter("spec.replicas", "metadata.labels.*").MaskPointers(); !ok || len(ptrs) != 2 || ptrs[1] != "/metadata/labels" {
		t.Errorf("MaskPointers = %v, %v", ptrs, ok)
	}
	if _, ok := MustFilter("spec.replicas", "*").MaskPointers(); ok {
		t.Error("MaskPointers of a filter with * has a mask")
	}
}
