package registry

import "testing"

func TestForKindAndKey(t *testing.T) {
	r := New()
	cm, ok := r.ForKind("", "v1", "ConfigMap")
	if !ok || cm.Plural != "configmaps" {
		t.Fatalf("ForKind(ConfigMap) = %v, %v", cm, ok)
	}
	if res, ok := r.ForKind("", "v9", "ConfigMap"); !ok || res != cm {
		t.Fatalf("ForKind(ConfigMap) in an unserved version = %v, %v; want configmaps", res, ok)
	}
	if _, ok := r.ForKind("example.com", "v1", "ConfigMap"); ok {
		t.Fatal("ForKind of another group's ConfigMap: ok")
	}
	for _, c := range []struct {
		key, plural, ns, name string
		ok                    bool
	}{
		{"/registry/core/configmaps/default/a", "configmaps", "default", "a", true},
		{"/registry/core/namespaces/default", "namespaces", "", "default", true},
		{"/registry/core/configmaps/default", "", "", "", false},     // a namespace, not an object
		{"/registry/core/configmaps/default/a/b", "", "", "", false}, // too deep
		{"/registry/core/namespaces/a/b", "", "", "", false},
		{"/registry/example.com/things/a", "", "", "", false},
	} {
		res, ns, name, ok := r.ForKey(c.key)
		if ok != c.ok || ok && (res.Plural != c.plural || ns != c.ns || name != c.name) {
			t.Errorf("ForKey(%q) = %v %q %q %v, want %s %q %q %v", c.key, res, ns, name, ok, c.plural, c.ns, c.name, c.ok)
		}
	}
}
