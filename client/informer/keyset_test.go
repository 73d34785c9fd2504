package informer

import (
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
)

func TestKeySet(t *testing.T) {
	st := NewStore[*corev1.Pod](nil)
	for _, k := range []Key{{"a", "x"}, {"a", "y"}, {"a", "yy"}, {"b", "x"}, {"", "cluster-scoped"}} {
		st.Put(pod(k.Namespace, k.Name, ""))
	}
	ks := st.keySet("")
	ks.strike([]byte("a"), []byte("y"))
	ks.strike([]byte("b"), []byte("x"))
	ks.strike([]byte("a"), []byte("not-stored"))
	ks.strike([]byte("c"), []byte("x"))
	var left []string
	ks.unstruck(func(k Key) bool { left = append(left, k.String()); return true })
	slices.Sort(left)
	if got, want := strings.Join(left, " "), "a/x a/yy cluster-scoped"; got != want {
		t.Errorf("keys left = %q, want %q", got, want)
	}
}

func TestCompareStringBytes(t *testing.T) {
	for _, c := range [][2]string{{"", ""}, {"a", ""}, {"", "a"}, {"ab", "abc"}, {"abd", "abc"}, {"x", "x"}} {
		if got, want := compareStringBytes(c[0], []byte(c[1])), strings.Compare(c[0], c[1]); got != want {
			t.Errorf("compareStringBytes(%q, %q) = %d, want %d", c[0], c[1], got, want)
		}
	}
}
