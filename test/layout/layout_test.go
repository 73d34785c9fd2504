// Package layout checks the module's dependency rules (docs/ARCHITECTURE.md,
// "Dependency rules"): only
// storage/etcd imports etcd, and the client library never pulls in the
// server, the storage layer, etcd, client-go or k8s.io/kubernetes.
package layout

import (
	"os/exec"
	"strings"
	"testing"
)

const module = "github.com/objwatch/objwatch"

// goList runs go list with a template over the module's packages.
func goList(t *testing.T, args ...string) []string {
	t.Helper()
	out, err := exec.Command("go", append([]string{"list"}, args...)...).Output()
	if err != nil {
		t.Fatalf("go list %v: %v", args, err)
	}
	return strings.Split(strings.TrimSpace(string(out)), "\n")
}

func TestOnlyStorageEtcdImportsEtcd(t *testing.T) {
	for _, line := range goList(t, "-f", "{{.ImportPath}} {{join .Imports \" \"}}", module+"/...") {
		pkg, imports, _ := strings.Cut(line, " ")
		switch pkg {
		case module + "/storage/etcd":
			continue
		case module + "/bench", module + "/internal/robustness":
			// Tools about etcd itself, not layers of the server: the
			// benchmark loads objects straight into etcd and measures raw
			// puts; the robustness harness changes an etcd cluster's
			// membership, compacts it and reads its history as the truth
			// the servers are checked against.
			continue
		}
		for _, imp := range strings.Fields(imports) {
			if strings.HasPrefix(imp, "go.etcd.io/etcd/") {
				t.Errorf("%s imports %s; only storage/etcd may import etcd", pkg, imp)
			}
		}
	}
}

func TestClientLibraryIsStandalone(t *testing.T) {
	deps := goList(t, "-deps", module+"/client/...", module+"/change/...")
	for _, d := range deps {
		for _, banned := range []string{module + "/server", module + "/storage", module + "/internal", "go.etcd.io/etcd/", "k8s.io/client-go", "k8s.io/kubernetes/"} {
			if strings.HasPrefix(d, banned) {
				t.Errorf("the client library depends on %s", d)
			}
		}
	}
}

// TestWebPageIsAClient: objwatch ui (internal/ui) and the explanations
// it shares with the command line (internal/explain) are clients of any
// Kubernetes API server: they never pull in the server, the storage
// layer, etcd, client-go or the command line.
func TestWebPageIsAClient(t *testing.T) {
	for _, d := range goList(t, "-deps", module+"/internal/ui", module+"/internal/explain") {
		for _, banned := range []string{module + "/server", module + "/storage", module + "/internal/cli", module + "/testenv", "go.etcd.io/etcd/", "k8s.io/client-go", "k8s.io/kubernetes/"} {
			if strings.HasPrefix(d, banned) {
				t.Errorf("internal/ui or internal/explain depends on %s", d)
			}
		}
	}
}

// TestServerImportsPointDown: the server's subpackages never import the
// facade (server) or the command line, and the watch wire knows nothing of
// resources or storage.
func TestServerImportsPointDown(t *testing.T) {
	// rank orders the server's layers: a package may import only packages
	// of a lower rank (or outside the server).
	rank := map[string]int{
		"server/servertest":        8, // test helpers: drive a whole server through testenv
		"server":                   7,
		"server/openapi":           6,
		"server/endpoints":         5,
		"server/lifecycle":         5,
		"server/access":            5,
		"server/admission/policy":  5,
		"server/admission/webhook": 5,
		"server/audit":             4,
		"server/gc/runner":         4, // acts through objects; lifecycle's containers come through an interface
		"server/mirror":            4,
		"server/objects":           3,
		"server/versions":          2, // admission's view of the served versions (equivalence, conversion)
		"server/gc":                2,
		"server/fieldmanager":      2,
		"server/encryption":        2,
		"server/rbac":              1,
		"server/registry/kube":     2, // built-in kinds with k8s.io/kubernetes rules
		"server/registry":          1,
		"server/conversion":        1,
		"server/registry/crd":      0,
		"server/apistatus":         0,
		"server/auth":              0,
		"server/watchstream":       0,
		"server/webhookclient":     0,
		"server/jsonenc":           0,
		"server/jsonpatch":         1, // patches of watch deltas, encoded by jsonenc
		"server/history":           2, // the revision store: records patched with jsonpatch
		"server/rungroup":          0,
	}
	seen := 0
	for _, line := range goList(t, "-f", "{{.ImportPath}} {{join .Imports \" \"}}", module+"/server/...") {
		pkg, imports, _ := strings.Cut(line, " ")
		name := strings.TrimPrefix(pkg, module+"/")
		r, ranked := rank[name]
		if !ranked {
			t.Errorf("%s has no place in the server's layers; add it to rank", pkg)
			continue
		}
		seen++
		for _, imp := range strings.Fields(imports) {
			dep := strings.TrimPrefix(imp, module+"/")
			switch {
			case strings.HasPrefix(imp, module+"/internal/cli"):
				t.Errorf("%s imports %s", pkg, imp)
			case name == "server/watchstream" && (strings.HasPrefix(imp, module+"/") || strings.HasPrefix(imp, "k8s.io/")):
				t.Errorf("server/watchstream imports %s; it writes bytes and knows no resources", imp)
			case name == "server/objects" && imp == "net/http":
				t.Errorf("server/objects imports net/http; the object service knows no HTTP")
			case name == "server/endpoints" && (strings.HasPrefix(dep, "storage") || strings.HasPrefix(imp, "go.etcd.io/")):
				t.Errorf("server/endpoints imports %s; it reaches storage only through the object service", imp)
			}
			if dr, ok := rank[dep]; ok && dr >= r && dep != name {
				t.Errorf("%s imports %s, which is not below it", pkg, imp)
			}
		}
	}
	if seen < len(rank) {
		t.Errorf("go list found %d of the %d server packages", seen, len(rank))
	}
}

// TestExamplesUseOnlyTheClientLibrary: the examples are programs a user
// would write: objwatch's client library and k8s.io/api, apimachinery and
// apiextensions types, never client-go, controller-runtime, the server or
// its storage.
func TestExamplesUseOnlyTheClientLibrary(t *testing.T) {
	for _, d := range goList(t, "-deps", module+"/examples/...") {
		for _, banned := range []string{module + "/server", module + "/storage", module + "/internal", module + "/testenv", "go.etcd.io/etcd/", "k8s.io/client-go", "k8s.io/kubernetes/", "sigs.k8s.io/controller-runtime"} {
			if strings.HasPrefix(d, banned) {
				t.Errorf("an example depends on %s", d)
			}
		}
	}
}

// TestControllerRuntimeOnlyInTests: controller-runtime is in go.mod for
// comparisons; only tests and the packages under test/ may import it.
func TestControllerRuntimeOnlyInTests(t *testing.T) {
	for _, line := range goList(t, "-f", "{{.ImportPath}} {{join .Imports \" \"}}", module+"/...") {
		pkg, imports, _ := strings.Cut(line, " ")
		if strings.HasPrefix(pkg, module+"/test/") {
			continue
		}
		for _, imp := range strings.Fields(imports) {
			if strings.HasPrefix(imp, "sigs.k8s.io/controller-runtime") {
				t.Errorf("%s imports %s; only tests and test/ may", pkg, imp)
			}
		}
	}
}
