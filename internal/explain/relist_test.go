package explain

import (
	"fmt"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
)

func relistObj(name, uid, rv string) *unstructured.Unstructured {
	o := &unstructured.Unstructured{Object: map[string]any{}}
	o.SetNamespace("ns")
	o.SetName(name)
	o.SetUID(types.UID(uid))
	o.SetResourceVersion(rv)
	return o
}

// TestRelistChanges: a relist finds the new, the changed, the re-created
// and the gone objects, in the list's order then the gone ones' keys,
// and leaves the cache holding the list.
func TestRelistChanges(t *testing.T) {
	cache := map[string]*unstructured.Unstructured{}
	for _, o := range []*unstructured.Unstructured{
		relistObj("same", "u1", "1"), relistObj("changed", "u2", "2"), relistObj("recreated", "u3", "3"),
		relistObj("gone-b", "u4", "4"), relistObj("gone-a", "u5", "5"),
	} {
		cache[KeyOf(o)] = o
	}
	items := []*unstructured.Unstructured{
		relistObj("new", "u6", "9"), relistObj("same", "u1", "1"), relistObj("changed", "u2", "8"), relistObj("recreated", "u7", "7"),
	}
	var got []string
	for _, c := range RelistChanges(cache, items) {
		s := fmt.Sprintf("%s %s@%s", c.Type, c.Obj.GetName(), c.Obj.GetResourceVersion())
		if c.Old != nil {
			s += " old@" + c.Old.GetResourceVersion()
		}
		got = append(got, s)
	}
	want := "ADDED new@9|MODIFIED changed@8 old@2|DELETED recreated@3|ADDED recreated@7|DELETED gone-a@5|DELETED gone-b@4"
	if strings.Join(got, "|") != want {
		t.Fatalf("changes:\n got %s\nwant %s", strings.Join(got, "|"), want)
	}
	if len(cache) != 4 || cache["ns/recreated"].GetUID() != "u7" || cache["ns/gone-a"] != nil || cache["ns/new"] == nil {
		t.Fatalf("cache after = %v", cache)
	}
}
