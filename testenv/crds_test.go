package testenv_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"

	"github.com/objwatch/objwatch/testenv"
)

// testCRDsFromFiles is what a test of yours does (name it TestWidgets):
// the CRDs in a directory are installed and served when Start returns, so
// the test creates custom resources at once, without polling.
func testCRDsFromFiles(t *testing.T) {
	env := testenv.Start(t, testenv.WithCRDs("testdata/crds"))
	hc := env.HTTPClient()
	defer hc.CloseIdleConnections()
	w := `{"apiVersion":"shop.example.com/v1","kind":"Widget","metadata":{"name":"w1"},"spec":{"size":"3"}}`
	resp, err := hc.Post(env.Config.Host+"/apis/shop.example.com/v1/namespaces/default/widgets", "application/json", strings.NewReader(w))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusCreated {
		t.Fatalf("create Widget = %s", resp.Status)
	}
}

// ExampleWithCRDs installs every CustomResourceDefinition in a directory
// (YAML with several documents, JSON) before Start returns, as envtest's
// CRDDirectoryPaths does; TestCRDsFromDirectory runs testCRDsFromFiles.
func ExampleWithCRDs() {
	// In a _test.go file:
	//
	//	env := testenv.Start(t, testenv.WithCRDs("config/crd/bases"))
	//
	// and the Widgets are served at once.
}

func TestCRDsFromDirectory(t *testing.T) {
	testCRDsFromFiles(t)
}

// TestCRDsServedWhenStartReturns: every CRD of the directory (two from a
// multi-document YAML file, one from JSON, the .txt file ignored) is
// Established and each served version lists when Start returns.
func TestCRDsServedWhenStartReturns(t *testing.T) {
	env := testenv.Start(t, testenv.WithCRDs("testdata/crds"), testenv.WithCRDs("testdata/nothing-here"), testenv.WithCRDPathsOptional())
	var names []string
	for _, c := range env.CRDs {
		names = append(names, c.Name)
		if len(c.Status.Conditions) == 0 {
			t.Errorf("%s: Env.CRDs has no status", c.Name)
		}
	}
	slices.Sort(names)
	want := []string{"gadgets.shop.example.com", "sprockets.shop.example.com", "widgets.shop.example.com"}
	if !slices.Equal(names, want) {
		t.Fatalf("Env.CRDs = %q, want %q", names, want)
	}
	hc := env.HTTPClient()
	defer hc.CloseIdleConnections()
	for _, path := range []string{
		"/apis/shop.example.com/v1/namespaces/default/widgets",
		"/apis/shop.example.com/v1/gadgets",
		"/apis/shop.example.com/v1alpha1/gadgets",
		"/apis/shop.example.com/v1/namespaces/default/sprockets",
	} {
		resp, err := hc.Get(env.Config.Host + path)
		if err != nil {
			t.Fatal(err)
		}
		var list struct{ Kind string }
		json.NewDecoder(resp.Body).Decode(&list)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || !strings.HasSuffix(list.Kind, "List") {
			t.Errorf("GET %s = %s kind %q, want 200 and a list", path, resp.Status, list.Kind)
		}
	}
	// InstallCRDs after Start: the same waits, the CRD appended.
	env.InstallCRDs(t, writeCRD(t, "bolts"))
	if got := env.CRDs[len(env.CRDs)-1].Name; got != "bolts.shop.example.com" {
		t.Errorf("after InstallCRDs, last of Env.CRDs = %s", got)
	}
	resp, err := hc.Get(env.Config.Host + "/apis/shop.example.com/v1/namespaces/default/bolts")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Errorf("bolts after InstallCRDs = %s", resp.Status)
	}
}

// writeCRD writes a one-version CRD for plural.shop.example.com into a
// temporary .yml file and returns its path.
func writeCRD(t *testing.T, plural string) string {
	t.Helper()
	kind := strings.ToUpper(plural[:1]) + plural[1:len(plural)-1]
	path := filepath.Join(t.TempDir(), plural+".yml")
	writeFile(t, path, `apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: `+plural+`.shop.example.com}
spec:
  group: shop.example.com
  scope: Namespaced
  names: {plural: `+plural+`, kind: `+kind+`}
  versions:
  - {name: v1, served: true, storage: true, schema: {openAPIV3Schema: {type: object, x-kubernetes-preserve-unknown-fields: true}}}
`)
	return path
}

// TestReadCRDsErrors: bad files are refused with the file and document
// named; a missing path is an error unless optional.
func TestReadCRDsErrors(t *testing.T) {
	_, err := testenv.ReadCRDs(false, "testdata/badcrds")
	if err == nil || !strings.Contains(err.Error(), filepath.Join("testdata", "badcrds", "mixed.yaml")+": document 2") ||
		!strings.Contains(err.Error(), "ConfigMap") {
		t.Errorf("mixed file: err = %v, want the file, document 2 and its kind named", err)
	}
	_, err = testenv.ReadCRDs(false, "testdata/missing")
	if !errors.Is(err, fs.ErrNotExist) || !strings.Contains(err.Error(), "testdata/missing") {
		t.Errorf("missing path: err = %v, want a not-exist error naming it", err)
	}
	crds, err := testenv.ReadCRDs(true, "testdata/missing", "testdata/crds/sprockets.json")
	if err != nil || len(crds) != 1 || crds[0].Name != "sprockets.shop.example.com" {
		t.Errorf("optional missing path: %v, %v; want the one CRD of sprockets.json", crds, err)
	}
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "typo.yaml"), `apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: x.shop.example.com}
spec: {group: shop.example.com, scpoe: Namespaced}
`)
	if _, err := testenv.ReadCRDs(false, dir); err == nil || !strings.Contains(err.Error(), "scpoe") {
		t.Errorf("unknown field: err = %v, want it named", err)
	}
	writeFile(t, filepath.Join(dir, "typo.yaml"), "apiVersion: apiextensions.k8s.io/v1beta1\nkind: CustomResourceDefinition\nmetadata: {name: y}\n")
	if _, err := testenv.ReadCRDs(false, dir); err == nil || !strings.Contains(err.Error(), "v1beta1") {
		t.Errorf("v1beta1 CRD: err = %v, want it refused", err)
	}
}

func writeFile(t *testing.T, path, data string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(data), 0o600); err != nil {
		t.Fatal(err)
	}
}

// fatalTB records Fatalf and ends the goroutine, as testing.T does, so a
// test can check the failure Start reports.
type fatalTB struct {
	testing.TB
	msg string
}

func (f *fatalTB) Fatalf(format string, args ...any) {
	f.msg = fmt.Sprintf(format, args...)
	runtime.Goexit()
}

// startFails runs Start with opts and returns the message it failed
// with ("" if it did not fail).
func startFails(t *testing.T, opts ...testenv.Option) string {
	t.Helper()
	f := &fatalTB{TB: t}
	done := make(chan struct{})
	go func() {
		defer close(done)
		testenv.Start(f, opts...)
	}()
	<-done
	return f.msg
}

// TestStartCRDErrors: bad CRD options fail Start with what is wrong.
func TestStartCRDErrors(t *testing.T) {
	for _, c := range []struct {
		name string
		opts []testenv.Option
		want string
	}{
		{"missing path", []testenv.Option{testenv.WithCRDs("testdata/missing")}, "testdata/missing"},
		{"not a CRD", []testenv.Option{testenv.WithCRDs("testdata/badcrds")}, "mixed.yaml: document 2"},
		{"conversion of no CRD", []testenv.Option{testenv.WithCRDs("testdata/crds"), testenv.WithConversion("dials.shop.example.com", convertDial)},
			`WithConversion: no CustomResourceDefinition "dials.shop.example.com"`},
	} {
		t.Run(c.name, func(t *testing.T) {
			if msg := startFails(t, c.opts...); !strings.Contains(msg, c.want) {
				t.Errorf("Start failed with %q, want %q in it", msg, c.want)
			}
		})
	}
}

// ExampleReadCRDs reads the CRDs of a directory as WithCRDs does: every
// document of its YAML and JSON files, other files ignored.
func ExampleReadCRDs() {
	crds, err := testenv.ReadCRDs(false, "testdata/crds")
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, c := range crds {
		fmt.Println(c.Name, len(c.Spec.Versions))
	}
	// Output:
	// widgets.shop.example.com 1
	// gadgets.shop.example.com 2
	// sprockets.shop.example.com 1
}
