package change_test

import (
	"os/exec"
	"slices"
	"strings"
	"testing"
)

// TestDependencies keeps change usable without compiling the server: it
// may not depend on objwatch's server, storage or internals, on etcd, or
// (outside tests, which may use it as a reference) on client-go.
func TestDependencies(t *testing.T) {
	if testing.Short() {
		t.Skip("runs go list")
	}
	forbidden := []string{
		"github.com/objwatch/objwatch/server",
		"github.com/objwatch/objwatch/storage",
		"github.com/objwatch/objwatch/internal",
		"github.com/objwatch/objwatch/testenv",
		"go.etcd.io/etcd",
	}
	for _, tt := range []struct {
		name  string
		args  []string
		extra []string
	}{
		{"package", []string{"list", "-deps", "github.com/objwatch/objwatch/change/..."}, []string{"k8s.io/client-go"}},
		{"tests", []string{"list", "-deps", "-test", "github.com/objwatch/objwatch/change/..."}, nil},
	} {
		out, err := exec.Command("go", tt.args...).CombinedOutput()
		if err != nil {
			t.Fatalf("go %s: %v\n%s", strings.Join(tt.args, " "), err, out)
		}
		pkgs := strings.Fields(string(out))
		if !slices.Contains(pkgs, "github.com/objwatch/objwatch/change") {
			t.Fatalf("go list -deps did not list the change package:\n%s", out)
		}
		for _, pkg := range pkgs {
			for _, f := range append(forbidden, tt.extra...) {
				if pkg == f || strings.HasPrefix(pkg, f+"/") {
					t.Errorf("%s: change depends on %s", tt.name, pkg)
				}
			}
		}
	}
}
