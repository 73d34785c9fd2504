package client_test

import (
	"os/exec"
	"slices"
	"strings"
	"testing"
)

// TestDependencies keeps the client usable without compiling the server:
// nothing under client/ may depend on objwatch's server or storage, on
// etcd, or on client-go (which tests may use as a reference client).
func TestDependencies(t *testing.T) {
	if testing.Short() {
		t.Skip("runs go list")
	}
	out, err := exec.Command("go", "list", "-deps", "github.com/objwatch/objwatch/client/...").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	forbidden := []string{
		"github.com/objwatch/objwatch/server",
		"github.com/objwatch/objwatch/storage",
		"github.com/objwatch/objwatch/internal",
		"github.com/objwatch/objwatch/testenv",
		"go.etcd.io/etcd",
		"k8s.io/client-go",
	}
	pkgs := strings.Fields(string(out))
	if !slices.Contains(pkgs, "github.com/objwatch/objwatch/client/informer") {
		t.Fatalf("go list -deps did not list the client packages:\n%s", out)
	}
	for _, pkg := range pkgs {
		for _, f := range forbidden {
			if pkg == f || strings.HasPrefix(pkg, f+"/") {
				t.Errorf("client depends on %s", pkg)
			}
		}
	}
}
