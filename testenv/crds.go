package testenv

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"

	"github.com/objwatch/objwatch/internal/instance"
)

// CRDs from files, as envtest's CRDInstallOptions install them: Start
// reads every CustomResourceDefinition in the paths WithCRDs names,
// creates them, and returns once each is Established and each of its
// served versions answers a list. A test then uses the resources at once,
// without polling.

// crdPlan is what the CRD options asked of one Start: the options are
// functions of instance.Options, so they leave their requests here, keyed
// by the Options value Start passes them, and Start takes them out.
type crdPlan struct {
	paths       []string
	optional    bool
	objects     []*apiextensionsv1.CustomResourceDefinition
	conversions []conversionPlan
	crds        []*apiextensionsv1.CustomResourceDefinition // read, wired, to install
}

// crdPlans maps *instance.Options to *crdPlan for the Starts under way.
var crdPlans sync.Map

func planOf(o *instance.Options) *crdPlan {
	p, _ := crdPlans.LoadOrStore(o, &crdPlan{})
	return p.(*crdPlan)
}

// takeCRDPlan removes what the options asked for o and prepares it
// before the server starts: the CRDs read and their conversion webhooks
// started and wired, so that a bad file fails the test at once. nil: no
// CRDs.
func takeCRDPlan(t testing.TB, o *instance.Options) *crdPlan {
	t.Helper()
	v, ok := crdPlans.LoadAndDelete(o)
	if !ok {
		return nil
	}
	p := v.(*crdPlan)
	crds, err := ReadCRDs(p.optional, p.paths...)
	if err != nil {
		t.Fatalf("testenv: %v", err)
	}
	p.crds = append(crds, p.objects...)
	for _, c := range p.conversions {
		if err := c.wire(t, p.crds); err != nil {
			t.Fatalf("testenv: %v", err)
		}
	}
	return p
}

// WithCRDs installs the CustomResourceDefinitions in paths before Start
// returns (envtest's CRDDirectoryPaths). A path is a file or a directory;
// a directory contributes its files ending in .yaml, .yml or .json (not
// its subdirectories). A file may hold several YAML documents or one JSON
// object. Every document must be an apiextensions.k8s.io/v1
// CustomResourceDefinition: anything else fails Start with an error that
// names the file and the document. A missing path fails Start too, unless
// WithCRDPathsOptional is given (envtest's ErrorIfCRDPathMissing false).
//
// Start returns once every CRD is Established and each served version of
// its resource answers a list; the CRDs are in Env.CRDs.
func WithCRDs(paths ...string) Option {
	return func(o *instance.Options) {
		p := planOf(o)
		p.paths = append(p.paths, paths...)
	}
}

// WithCRDPathsOptional makes the paths of WithCRDs that do not exist be
// skipped instead of failing Start.
func WithCRDPathsOptional() Option {
	return func(o *instance.Options) { planOf(o).optional = true }
}

// WithCRDObjects installs crds as WithCRDs installs those from files.
func WithCRDObjects(crds ...*apiextensionsv1.CustomResourceDefinition) Option {
	return func(o *instance.Options) {
		p := planOf(o)
		for _, c := range crds {
			p.objects = append(p.objects, c.DeepCopy())
		}
	}
}

// install creates the prepared CRDs on a started server and waits for
// them.
func (p *crdPlan) install(t testing.TB, e *Env) {
	t.Helper()
	if err := e.installCRDs(p.crds); err != nil {
		t.Fatalf("testenv: %v", err)
	}
}

// InstallCRDs installs the CRDs in paths on a running server, as WithCRDs
// does at Start (a missing path is an error), and returns them once they
// are all Established and served.
func (e *Env) InstallCRDs(t testing.TB, paths ...string) []*apiextensionsv1.CustomResourceDefinition {
	t.Helper()
	crds, err := ReadCRDs(false, paths...)
	if err != nil {
		t.Fatalf("testenv: %v", err)
	}
	if err := e.installCRDs(crds); err != nil {
		t.Fatalf("testenv: %v", err)
	}
	return crds
}

// ReadCRDs reads the CustomResourceDefinitions in paths as WithCRDs does,
// without installing them. With optional, missing paths are skipped.
func ReadCRDs(optional bool, paths ...string) ([]*apiextensionsv1.CustomResourceDefinition, error) {
	var crds []*apiextensionsv1.CustomResourceDefinition
	for _, path := range paths {
		files, err := crdFiles(path)
		if errors.Is(err, fs.ErrNotExist) && optional {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("CRD path: %w", err)
		}
		for _, f := range files {
			cs, err := readCRDFile(f)
			if err != nil {
				return nil, err
			}
			crds = append(crds, cs...)
		}
	}
	return crds, nil
}

// crdFiles returns path if it is a file, else the YAML and JSON files in
// the directory path, sorted by name.
func crdFiles(path string) ([]string, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return nil, err
	}
	if !fi.IsDir() {
		return []string{path}, nil
	}
	entries, err := os.ReadDir(path)
	if err != nil {
		return nil, err
	}
	var files []string
	for _, e := range entries {
		switch strings.ToLower(filepath.Ext(e.Name())) {
		case ".yaml", ".yml", ".json":
			if !e.IsDir() {
				files = append(files, filepath.Join(path, e.Name()))
			}
		}
	}
	return files, nil
}

// readCRDFile decodes every document of a YAML or JSON file as a CRD.
func readCRDFile(name string) ([]*apiextensionsv1.CustomResourceDefinition, error) {
	data, err := os.ReadFile(name)
	if err != nil {
		return nil, fmt.Errorf("CRD file: %w", err)
	}
	r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(data)))
	var crds []*apiextensionsv1.CustomResourceDefinition
	for doc := 1; ; doc++ {
		b, err := r.Read()
		if errors.Is(err, io.EOF) {
			return crds, nil
		}
		if err != nil {
			return nil, fmt.Errorf("%s: document %d: %w", name, doc, err)
		}
		crd, err := decodeCRD(b)
		if err != nil {
			return nil, fmt.Errorf("%s: document %d: %w", name, doc, err)
		}
		if crd != nil {
			crds = append(crds, crd)
		}
	}
}

// decodeCRD decodes one YAML or JSON document; nil for an empty one.
func decodeCRD(doc []byte) (*apiextensionsv1.CustomResourceDefinition, error) {
	j, err := yaml.YAMLToJSON(doc)
	if err != nil {
		return nil, err
	}
	if t := bytes.TrimSpace(j); len(t) == 0 || string(t) == "null" {
		return nil, nil
	}
	var tm struct{ APIVersion, Kind string }
	if err := json.Unmarshal(j, &tm); err != nil {
		return nil, fmt.Errorf("not an object: %w", err)
	}
	if tm.APIVersion != "apiextensions.k8s.io/v1" || tm.Kind != "CustomResourceDefinition" {
		return nil, fmt.Errorf("%q %q is not an apiextensions.k8s.io/v1 CustomResourceDefinition", tm.APIVersion, tm.Kind)
	}
	crd := &apiextensionsv1.CustomResourceDefinition{}
	if err := yaml.UnmarshalStrict(j, crd); err != nil {
		return nil, fmt.Errorf("CustomResourceDefinition: %w", err)
	}
	if crd.Name == "" {
		return nil, errors.New("CustomResourceDefinition without metadata.name")
	}
	return crd, nil
}

// crdWait bounds how long installCRDs waits for each CRD.
const crdWait = 30 * time.Second

// installCRDs creates crds, then waits for each to be Established and
// served, and keeps them in e.CRDs.
func (e *Env) installCRDs(crds []*apiextensionsv1.CustomResourceDefinition) error {
	hc := e.HTTPClient()
	defer hc.CloseIdleConnections()
	base := e.Config.Host + "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"
	for _, c := range crds {
		c.APIVersion, c.Kind = "apiextensions.k8s.io/v1", "CustomResourceDefinition"
		if _, err := createObject(hc, base, c); err != nil {
			return fmt.Errorf("create CustomResourceDefinition %s: %w", c.Name, err)
		}
	}
	for _, c := range crds {
		if err := e.waitCRD(hc, base, c); err != nil {
			return err
		}
		e.CRDs = append(e.CRDs, c)
	}
	return nil
}

// waitCRD returns once c is Established and every served version lists.
func (e *Env) waitCRD(hc *http.Client, base string, c *apiextensionsv1.CustomResourceDefinition) error {
	deadline := time.Now().Add(crdWait)
	var last string
	for {
		ok, why, err := e.crdReady(hc, base, c)
		if err != nil {
			return fmt.Errorf("CustomResourceDefinition %s: %w", c.Name, err)
		}
		if ok {
			return nil
		}
		last = why
		if time.Now().After(deadline) {
			return fmt.Errorf("CustomResourceDefinition %s not ready after %v: %s", c.Name, crdWait, last)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// crdReady reports whether c is Established and served, and if not why.
func (e *Env) crdReady(hc *http.Client, base string, c *apiextensionsv1.CustomResourceDefinition) (bool, string, error) {
	code, body, err := get(hc, base+"/"+c.Name)
	if err != nil {
		return false, "", err
	}
	if code != http.StatusOK {
		return false, fmt.Sprintf("GET = %d %s", code, body), nil
	}
	var got apiextensionsv1.CustomResourceDefinition
	if err := json.Unmarshal(body, &got); err != nil {
		return false, "", fmt.Errorf("decode: %w", err)
	}
	if !slices.ContainsFunc(got.Status.Conditions, func(c apiextensionsv1.CustomResourceDefinitionCondition) bool {
		return c.Type == apiextensionsv1.Established && c.Status == apiextensionsv1.ConditionTrue
	}) {
		return false, "not Established", nil
	}
	c.Status = got.Status
	c.ResourceVersion, c.UID = got.ResourceVersion, got.UID
	for _, v := range c.Spec.Versions {
		if !v.Served {
			continue
		}
		url := e.Config.Host + "/apis/" + c.Spec.Group + "/" + v.Name + "/" + c.Spec.Names.Plural + "?limit=1"
		code, body, err := get(hc, url)
		if err != nil {
			return false, "", err
		}
		if code != http.StatusOK {
			return false, fmt.Sprintf("list %s/%s = %d %s", c.Spec.Group, v.Name, code, body), nil
		}
	}
	return true, "", nil
}

// get GETs url and returns the status code and body.
func get(hc *http.Client, url string) (int, []byte, error) {
	resp, err := hc.Get(url)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, b, err
}
