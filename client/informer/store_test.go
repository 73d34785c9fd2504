package informer

import (
	"fmt"
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
)

func pod(ns, name, node string, owners ...string) *corev1.Pod {
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: map[string]string{"node": node}}}
	p.Spec.NodeName = node
	for _, o := range owners {
		p.OwnerReferences = append(p.OwnerReferences, metav1.OwnerReference{UID: types.UID(o)})
	}
	return p
}

func byOwner(p *corev1.Pod) []string {
	var uids []string
	for _, r := range p.OwnerReferences {
		uids = append(uids, string(r.UID))
	}
	return uids
}

func names(objs []*corev1.Pod) []string {
	var out []string
	for _, o := range objs {
		out = append(out, KeyOf(o).String())
	}
	slices.Sort(out)
	return out
}

func TestStore(t *testing.T) {
	for _, compact := range []bool{false, true} {
		t.Run(fmt.Sprintf("compact=%v", compact), func(t *testing.T) { testStore(t, compact) })
	}
}

func testStore(t *testing.T, compact bool) {
	s := newStore(Indexers[*corev1.Pod]{"owner": byOwner}, compact)
	s.Put(pod("a", "p1", "n1", "rs1"))
	s.Put(pod("a", "p2", "n2", "rs1", "rs2"))
	s.Put(pod("b", "p1", "n1", "rs2"))
	if _, replaced := s.Put(pod("b", "p1", "n2", "rs3")); !replaced {
		t.Errorf("Put(existing) replaced = false, want true")
	}
	if err := s.AddIndexers(Indexers[*corev1.Pod]{"node": func(p *corev1.Pod) []string { return []string{p.Spec.NodeName} }}); err != nil {
		t.Fatal(err)
	}
	if err := s.AddIndexers(Indexers[*corev1.Pod]{"node": nil}); err == nil {
		t.Errorf("AddIndexers(duplicate) error = nil, want an error")
	}
	tests := []struct {
		name string
		got  func() ([]*corev1.Pod, error)
		want []string
	}{
		{"all", func() ([]*corev1.Pod, error) { return s.List("", nil), nil }, []string{"a/p1", "a/p2", "b/p1"}},
		{"namespace", func() ([]*corev1.Pod, error) { return s.List("a", labels.Everything()), nil }, []string{"a/p1", "a/p2"}},
		{"missing namespace", func() ([]*corev1.Pod, error) { return s.List("zz", nil), nil }, nil},
		{"selector", func() ([]*corev1.Pod, error) {
			return s.List("", labels.SelectorFromSet(labels.Set{"node": "n2"})), nil
		}, []string{"a/p2", "b/p1"}},
		{"owner rs1", func() ([]*corev1.Pod, error) { return s.ByIndex("owner", "rs1") }, []string{"a/p1", "a/p2"}},
		{"owner rs2 after replace", func() ([]*corev1.Pod, error) { return s.ByIndex("owner", "rs2") }, []string{"a/p2"}},
		{"owner rs3", func() ([]*corev1.Pod, error) { return s.ByIndex("owner", "rs3") }, []string{"b/p1"}},
		{"node added later", func() ([]*corev1.Pod, error) { return s.ByIndex("node", "n2") }, []string{"a/p2", "b/p1"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := tt.got()
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.want, names(got)); diff != "" {
				t.Errorf("mismatch (-want +got):\n%s", diff)
			}
		})
	}
	if _, err := s.ByIndex("nope", "x"); err == nil {
		t.Errorf("ByIndex(unknown index) error = nil, want an error")
	}

	old, ok := s.Delete(Key{"a", "p2"})
	if !ok || old.Name != "p2" {
		t.Fatalf("Delete(a/p2) = %v, %v", old, ok)
	}
	if _, ok := s.Delete(Key{"a", "p2"}); ok {
		t.Errorf("Delete(deleted) ok = true, want false")
	}
	if got, _ := s.ByIndex("owner", "rs2"); len(got) != 0 {
		t.Errorf("ByIndex(owner, rs2) after delete = %v, want none", names(got))
	}
	if v, _ := s.IndexValues("owner"); !slices.Equal(v, []string{"rs1", "rs3"}) {
		t.Errorf("IndexValues(owner) = %v, want [rs1 rs3]", v)
	}
	if s.Len() != 2 {
		t.Errorf("Len() = %d, want 2", s.Len())
	}
	if _, ok := s.Get("a", "p1"); !ok {
		t.Errorf("Get(a, p1) not found")
	}
}

// TestCompactStoreCopies: a compact store's readers own what they get.
func TestCompactStoreCopies(t *testing.T) {
	s := newStore(Indexers[*corev1.Pod]{"node": func(p *corev1.Pod) []string { return []string{p.Spec.NodeName} }}, true)
	s.Put(pod("a", "p1", "n1", "rs1"))
	s.Put(pod("a", "p2", "n1", "rs1"))
	mutate := func(p *corev1.Pod) {
		p.Labels["node"] = "changed"
		p.Spec.NodeName = "changed"
		p.OwnerReferences[0].UID = "changed"
	}
	got, _ := s.Get("a", "p1")
	mutate(got)
	for _, p := range s.List("", nil) {
		mutate(p)
	}
	byNode, _ := s.ByIndex("node", "n1")
	for _, p := range byNode {
		mutate(p)
	}
	s.Range(func(p *corev1.Pod) bool { mutate(p); return true })
	for _, name := range []string{"p1", "p2"} {
		got, _ := s.Get("a", name)
		if diff := cmp.Diff(pod("a", name, "n1", "rs1"), got); diff != "" {
			t.Errorf("Get(a, %s) after readers modified their copies (-want +got):\n%s", name, diff)
		}
	}
	if got := s.List("", labels.SelectorFromSet(labels.Set{"node": "n1"})); len(got) != 2 {
		t.Errorf("List(node=n1) = %v, want both pods", names(got))
	}
	if got, _ := s.ByIndex("node", "n1"); len(got) != 2 {
		t.Errorf("ByIndex(node, n1) = %v, want both pods", names(got))
	}
}

// TestIdentityBytesAllocs: a relist compares each listed object with the
// store without allocating, in both modes.
func TestIdentityBytesAllocs(t *testing.T) {
	for _, compact := range []bool{false, true} {
		s := newStore[*corev1.Pod](nil, compact)
		s.Put(pod("a", "p1", "n1"))
		ns, name := []byte("a"), []byte("p1")
		if _, ok := s.identityBytes(ns, name); !ok {
			t.Fatalf("compact=%v: identityBytes(a, p1) not found", compact)
		}
		if n := testing.AllocsPerRun(100, func() { s.identityBytes(ns, name) }); n != 0 {
			t.Errorf("compact=%v: identityBytes allocates %v times, want 0", compact, n)
		}
	}
}
