package encryption

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apiserver/pkg/storage/value"

	"github.com/objwatch/objwatch/server/registry"
)

func write(t *testing.T, content string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "enc.yaml")
	if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

const header = "apiVersion: apiserver.config.k8s.io/v1\nkind: EncryptionConfiguration\n"

// Bad files get Kubernetes' own errors; KMS providers are refused.
func TestLoadErrors(t *testing.T) {
	for _, c := range []struct{ name, file, want string }{
		{"short aes key", header + "resources:\n- resources: [secrets]\n  providers:\n  - aesgcm: {keys: [{name: k, secret: c2hvcnQ=}]}\n", "secret is not of the expected length"},
		{"no providers", header + "resources:\n- resources: [secrets]\n  providers: []\n", "providers"},
		{"masked by wildcard", header + "resources:\n- resources: ['*.*']\n  providers: [{identity: {}}]\n- resources: [secrets]\n  providers: [{identity: {}}]\n", "masked"},
		{"unknown field", header + "resources:\n- resources: [secrets]\n  providers: [{identity: {}}]\n  bogus: 1\n", "bogus"},
		{"kms", header + "resources:\n- resources: [secrets]\n  providers:\n  - kms: {apiVersion: v2, name: p, endpoint: unix:///tmp/none.sock}\n", "kms providers are not supported"},
		{"wrong kind", "apiVersion: v1\nkind: ConfigMap\n", "encryption"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := Load(write(t, c.file))
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("Load = %v, want an error with %q", err, c.want)
			}
		})
	}
	if _, err := Load(filepath.Join(t.TempDir(), "missing.yaml")); err == nil {
		t.Fatal("Load of a missing file succeeded")
	}
}

// For picks the configured transformer by the key's group and resource,
// wildcards as Kubernetes resolves them, and none for bookkeeping.
func TestFor(t *testing.T) {
	tr, err := Load(write(t, header+`resources:
- resources: [secrets, widgets.example.com]
  providers: [{aesgcm: {keys: [{name: k1, secret: c2VjcmV0IGlzIHNlY3VyZSwgc2VjcmV0IGlzIGdvb2Q=}]}}]
- resources: ['*.apps']
  providers: [{secretbox: {keys: [{name: b1, secret: c2VjcmV0IGlzIHNlY3VyZSwgc2VjcmV0IGlzIGdvb2Q=}]}}]
`))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for key, prefix := range map[string]string{
		registry.StoragePrefix("", "secrets") + "ns/s":            "k8s:enc:aesgcm:v1:k1:",
		registry.StoragePrefix("example.com", "widgets") + "ns/w": "k8s:enc:aesgcm:v1:k1:",
		registry.StoragePrefix("apps", "deployments") + "ns/d":    "k8s:enc:secretbox:v1:b1:",
		registry.StoragePrefix("", "configmaps") + "ns/c":         "",
		registry.StoragePrefix("example.com", "gadgets") + "ns/g": "",
		registry.StoragePrefix("objwatch.io", "audit") + "cp/x":   "none",
		registry.Root + "ranges/serviceips/10.0.0.1":              "none",
		"/elsewhere/key": "none",
	} {
		x := tr.For(key)
		if prefix == "none" {
			if x != nil {
				t.Errorf("For(%s) = %T, want none", key, x)
			}
			continue
		}
		out, err := x.TransformToStorage(ctx, []byte(`{"a":1}`), value.DefaultContext(key))
		if err != nil || !strings.HasPrefix(string(out), prefix) || (prefix == "" && string(out) != `{"a":1}`) {
			t.Errorf("For(%s) stores %q, %v; want prefix %q", key, out, err, prefix)
			continue
		}
		back, _, err := x.TransformFromStorage(ctx, out, value.DefaultContext(key))
		if err != nil || string(back) != `{"a":1}` {
			t.Errorf("For(%s) reads back %q, %v", key, back, err)
		}
	}
	if none := None().For(registry.StoragePrefix("", "secrets") + "ns/s"); none == nil {
		t.Fatal("None().For(a secret) = nil, want the identity check")
	} else if _, _, err := none.TransformFromStorage(ctx, []byte("k8s:enc:aesgcm:v1:k1:xyz"), value.DefaultContext("k")); err == nil {
		t.Fatal("the identity check read encrypted data")
	}
}

// FuzzResourceOfKey: any key parses without panicking, and a key of a
// resource names what registry.StoragePrefix built it from.
func FuzzResourceOfKey(f *testing.F) {
	f.Add("", "secrets", "ns/name")
	f.Add("example.com", "widgets", "x")
	f.Add("objwatch.io", "audit", "checkpoints/1")
	f.Add("a/b", "", "")
	f.Fuzz(func(t *testing.T, group, resource, rest string) {
		key := registry.StoragePrefix(group, resource) + rest
		gr, name, ok := resourceOfKey(key)
		resourceOfKey(group + resource + rest)
		valid := resource != "" && !strings.Contains(group, "/") && !strings.Contains(resource, "/") && group != "core"
		if !valid || bookkeeping[strings.TrimSuffix(strings.TrimPrefix(registry.StoragePrefix(group, resource), registry.Root), "/")] {
			return
		}
		want := schema.GroupResource{Group: group, Resource: resource}
		if !ok || gr != want || !strings.HasPrefix(key, registry.Root+name+"/") {
			t.Fatalf("resourceOfKey(%q) = %v %q %v, want %v", key, gr, name, ok, want)
		}
	})
}
