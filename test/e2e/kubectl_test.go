package e2e_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"sigs.k8s.io/yaml"

	"github.com/objwatch/objwatch/testenv"
)

const kcCRD = `apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: widgets.e2e.objwatch.io
spec:
  group: e2e.objwatch.io
  scope: Namespaced
  names:
    plural: widgets
    singular: widget
    kind: Widget
    listKind: WidgetList
    shortNames: [wd]
  versions:
  - name: v1
    served: true
    storage: true
    additionalPrinterColumns:
    - name: Size
      type: string
      jsonPath: .spec.size
    - name: Replicas
      type: integer
      jsonPath: .spec.replicas
    - name: Age
      type: date
      jsonPath: .metadata.creationTimestamp
    schema:
      openAPIV3Schema:
        type: object
        properties:
          spec:
            type: object
            properties:
              size:
                type: string
                default: small
              replicas:
                type: integer
                default: 1
              tags:
                type: array
                items:
                  type: string
`

const kcWidget = `apiVersion: e2e.objwatch.io/v1
kind: Widget
metadata:
  name: w1
  namespace: kubectl-e2e
spec:
  tags: [a]
`

// TestKubectl drives a server with the real kubectl: namespace, CRD with a
// printer column, a custom object with defaults, all three patch types, a
// watch that sees the changes, and deletion.
func TestKubectl(t *testing.T) {
	path, err := exec.LookPath("kubectl")
	if err != nil {
		t.Skip("kubectl not on PATH")
	}
	env := testenv.Start(t)
	k := kcNew(t, path, env.Kubeconfig)
	const ns = "kubectl-e2e"

	// Until the server serves OpenAPI, kubectl cannot validate client-side.
	var validate []string
	if kcOpenAPIServed(t, env) {
		t.Log("GET /openapi/v3 answers 200: kubectl validates client-side")
	} else {
		t.Log("GET /openapi/v3 does not answer 200: using --validate=false")
		validate = []string{"--validate=false"}
	}
	dir := t.TempDir()
	write := func(name, content string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}

	k.ok("create", "namespace", ns)
	k.ok(append([]string{"apply", "-f", write("crd.yaml", kcCRD)}, validate...)...)
	k.ok("wait", "--for", "condition=established", "--timeout", "30s", "crd/widgets.e2e.objwatch.io")
	// Established means served by this server; discovery may lag a moment.
	kcEventually(t, 10*time.Second, func() error {
		_, stderr, err := k.run("get", "widgets", "-n", ns)
		if err != nil {
			return errors.New(stderr)
		}
		return nil
	})
	if out := k.ok(append([]string{"apply", "-f", write("w1.yaml", kcWidget)}, validate...)...); !strings.Contains(out, "widget.e2e.objwatch.io/w1 created") {
		t.Errorf("kubectl apply = %q, want widget.e2e.objwatch.io/w1 created", out)
	}

	// get -o yaml: the defaults of the schema are filled in.
	var got struct {
		Metadata struct {
			Name, Namespace, ResourceVersion string
			Generation                       int64
		}
		Spec struct {
			Size     string
			Replicas int64
			Tags     []string
		}
	}
	if err := yaml.Unmarshal([]byte(k.ok("get", "widget", "w1", "-n", ns, "-o", "yaml")), &got); err != nil {
		t.Fatalf("kubectl get -o yaml: %v", err)
	}
	if got.Spec.Size != "small" || got.Spec.Replicas != 1 || len(got.Spec.Tags) != 1 || got.Metadata.Generation != 1 || got.Metadata.ResourceVersion == "" {
		t.Errorf("kubectl get -o yaml = %+v, want spec {small 1 [a]}, generation 1 and a resourceVersion", got)
	}

	// get: the printer columns (with printer columns, Kubernetes adds only
	// Name; the CRD lists Age itself).
	header, row := kcTable(t, k.ok("get", "wd", "-n", ns), "w1")
	if want := []string{"NAME", "SIZE", "REPLICAS", "AGE"}; strings.Join(header, " ") != strings.Join(want, " ") {
		t.Errorf("kubectl get header = %v, want %v", header, want)
	}
	if len(row) != 4 || row[1] != "small" || row[2] != "1" || !strings.HasSuffix(row[3], "s") {
		t.Errorf("kubectl get row = %v, want [w1 small 1 <age in seconds>]", row)
	}

	// A watch in the background sees every change the patches make.
	w := k.watch("get", "widget", "w1", "-n", ns, "-w", "--output-watch-events", "-o", "json")
	w.next(t, "ADDED", func(o kcObject) bool { return o.Spec.Size == "small" })

	k.ok("patch", "widget", "w1", "-n", ns, "--type", "merge", "-p", `{"spec":{"size":"large"}}`)
	w.next(t, "MODIFIED", func(o kcObject) bool { return o.Spec.Size == "large" })

	k.ok("patch", "widget", "w1", "-n", ns, "--type", "json", "-p", `[{"op":"replace","path":"/spec/replicas","value":3}]`)
	w.next(t, "MODIFIED", func(o kcObject) bool { return o.Spec.Replicas == 3 && o.Spec.Size == "large" })

	// Custom resources have no strategic merge patch: 415.
	if _, stderr, err := k.run("patch", "widget", "w1", "-n", ns, "-p", `{"spec":{"size":"medium"}}`); err == nil ||
		!strings.Contains(stderr, "application/strategic-merge-patch+json is not supported") {
		t.Errorf("kubectl patch (strategic) on a custom resource: err %v, stderr %q, want it to fail as not supported", err, stderr)
	}
	kcStrategicOnCR(t, env, ns)

	_, row = kcTable(t, k.ok("get", "wd", "-n", ns), "w1")
	if len(row) < 3 || row[1] != "large" || row[2] != "3" {
		t.Errorf("kubectl get row after patches = %v, want [w1 large 3 <age>]", row)
	}

	if out := k.ok("delete", "widget", "w1", "-n", ns); !strings.Contains(out, `"w1" deleted`) {
		t.Errorf("kubectl delete = %q, want it to report w1 deleted", out)
	}
	w.next(t, "DELETED", func(o kcObject) bool { return o.Spec.Replicas == 3 })
	events := w.stop(t)
	var types []string
	var last string
	for _, ev := range events {
		types = append(types, ev.Type)
		rv := ev.Object.Metadata.ResourceVersion
		if last != "" && kcRV(t, rv) <= kcRV(t, last) {
			t.Errorf("kubectl get -w: resourceVersion %s after %s, want increasing", rv, last)
		}
		last = rv
	}
	if want := "ADDED MODIFIED MODIFIED DELETED"; strings.Join(types, " ") != want {
		t.Errorf("kubectl get -w events = %v, want %s (the failed strategic patch changes nothing)", types, want)
	}

	_, stderr, err := k.run("get", "widget", "w1", "-n", ns)
	if err == nil || !strings.Contains(stderr, "NotFound") || !strings.Contains(stderr, `widgets.e2e.objwatch.io "w1" not found`) {
		t.Errorf("kubectl get of a deleted object: err %v, stderr %q, want NotFound", err, stderr)
	}

	// Strategic merge patch on a built-in kind: $patch: replace replaces
	// the whole map, which a merge patch cannot express.
	k.ok("create", "configmap", "cm1", "-n", ns, "--from-literal=a=1", "--from-literal=c=3")
	k.ok("patch", "configmap", "cm1", "-n", ns, "-p", `{"data":{"$patch":"replace","b":"2"}}`)
	if data := k.ok("get", "configmap", "cm1", "-n", ns, "-o", "jsonpath={.data}"); data != `{"b":"2"}` {
		t.Errorf("configmap data after strategic $patch: replace = %s, want {\"b\":\"2\"}", data)
	}
	k.ok("patch", "configmap", "cm1", "-n", ns, "-p", `{"data":{"a":"1"}}`)
	if data := k.ok("get", "configmap", "cm1", "-n", ns, "-o", "jsonpath={.data}"); data != `{"a":"1","b":"2"}` {
		t.Errorf("configmap data after strategic patch = %s, want {\"a\":\"1\",\"b\":\"2\"}", data)
	}
}

// kcOpenAPIServed reports whether GET /openapi/v3 answers 200.
func kcOpenAPIServed(t *testing.T, env *testenv.Env) bool {
	t.Helper()
	resp, err := env.HTTPClient().Get(env.Config.Host + "/openapi/v3")
	if err != nil {
		t.Fatalf("GET /openapi/v3: %v", err)
	}
	resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}

// kcStrategicOnCR checks the status code kubectl turns into its message.
func kcStrategicOnCR(t *testing.T, env *testenv.Env, ns string) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPatch, env.Config.Host+"/apis/e2e.objwatch.io/v1/namespaces/"+ns+"/widgets/w1", strings.NewReader(`{"spec":{"size":"medium"}}`))
	req.Header.Set("Content-Type", "application/strategic-merge-patch+json")
	resp, err := env.HTTPClient().Do(req)
	if err != nil {
		t.Fatalf("PATCH (strategic) widget: %v", err)
	}
	defer resp.Body.Close()
	var st struct {
		Kind, Reason, Message string
		Code                  int
	}
	if err := json.NewDecoder(resp.Body).Decode(&st); err != nil {
		t.Fatalf("PATCH (strategic) widget: decode status: %v", err)
	}
	if resp.StatusCode != http.StatusUnsupportedMediaType || st.Kind != "Status" || st.Code != 415 || st.Reason != "UnsupportedMediaType" ||
		!strings.Contains(st.Message, "the body of the request was in an unknown format - accepted media types include: application/json-patch+json, application/merge-patch+json") {
		t.Errorf("PATCH (strategic) widget = %d %+v, want 415 UnsupportedMediaType listing the accepted patch types", resp.StatusCode, st)
	}
}

// kcTable splits kubectl's table output into the header and the row whose
// first cell is name.
func kcTable(t *testing.T, out, name string) (header, row []string) {
	t.Helper()
	lines := strings.Split(strings.TrimSpace(out), "\n")
	header = strings.Fields(lines[0])
	for _, l := range lines[1:] {
		if f := strings.Fields(l); len(f) > 0 && f[0] == name {
			return header, f
		}
	}
	t.Fatalf("kubectl get output has no row %s:\n%s", name, out)
	return nil, nil
}

func kcEventually(t *testing.T, timeout time.Duration, f func() error) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		err := f()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("still failing after %v: %v", timeout, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func kcRV(t *testing.T, rv string) int64 {
	t.Helper()
	n, err := strconv.ParseInt(rv, 10, 64)
	if err != nil {
		t.Fatalf("resourceVersion %q is not a number: %v", rv, err)
	}
	return n
}

// kcKubectl runs kubectl against one server with its own HOME and cache.
type kcKubectl struct {
	t          *testing.T
	path       string
	kubeconfig string
	env        []string
}

func kcNew(t *testing.T, path, kubeconfig string) *kcKubectl {
	home := t.TempDir()
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "KUBECONFIG=") && !strings.HasPrefix(kv, "HOME=") && !strings.HasPrefix(kv, "KUBECACHEDIR=") {
			env = append(env, kv)
		}
	}
	env = append(env, "HOME="+home, "KUBECACHEDIR="+filepath.Join(home, "cache"))
	return &kcKubectl{t: t, path: path, kubeconfig: kubeconfig, env: env}
}

func (k *kcKubectl) command(ctx context.Context, args ...string) *exec.Cmd {
	c := exec.CommandContext(ctx, k.path, append([]string{"--kubeconfig", k.kubeconfig}, args...)...)
	c.Env = k.env
	c.WaitDelay = 5 * time.Second
	return c
}

// run runs kubectl to completion.
func (k *kcKubectl) run(args ...string) (stdout, stderr string, err error) {
	ctx, cancel := context.WithTimeout(k.t.Context(), 60*time.Second)
	defer cancel()
	c := k.command(ctx, args...)
	var out, errOut bytes.Buffer
	c.Stdout, c.Stderr = &out, &errOut
	err = c.Run()
	return out.String(), errOut.String(), err
}

// ok runs kubectl and fails the test unless it succeeds.
func (k *kcKubectl) ok(args ...string) string {
	k.t.Helper()
	out, stderr, err := k.run(args...)
	if err != nil {
		k.t.Fatalf("kubectl %s: %v\n%s", strings.Join(args, " "), err, stderr)
	}
	return out
}

// kcObject is the part of a Widget the test looks at.
type kcObject struct {
	Metadata struct {
		Name            string `json:"name"`
		ResourceVersion string `json:"resourceVersion"`
	} `json:"metadata"`
	Spec struct {
		Size     string `json:"size"`
		Replicas int64  `json:"replicas"`
	} `json:"spec"`
}

type kcEvent struct {
	Type   string   `json:"type"`
	Object kcObject `json:"object"`
}

// kcWatch is a kubectl get -w running in the background; its output is
// decoded as it arrives. The test must call stop.
type kcWatch struct {
	cmd    *exec.Cmd
	cancel context.CancelFunc
	pw     *io.PipeWriter
	stderr bytes.Buffer
	events chan kcEvent // closed when the output ends
	seen   []kcEvent
}

func (k *kcKubectl) watch(args ...string) *kcWatch {
	k.t.Helper()
	ctx, cancel := context.WithCancel(k.t.Context())
	pr, pw := io.Pipe()
	w := &kcWatch{cmd: k.command(ctx, args...), cancel: cancel, pw: pw, events: make(chan kcEvent)}
	w.cmd.Stdout, w.cmd.Stderr = pw, &w.stderr
	if err := w.cmd.Start(); err != nil {
		cancel()
		k.t.Fatalf("kubectl %s: %v", strings.Join(args, " "), err)
	}
	go func() {
		defer close(w.events)
		dec := json.NewDecoder(pr)
		for {
			var ev kcEvent
			if err := dec.Decode(&ev); err != nil {
				pr.CloseWithError(err) // unblocks kubectl's writes
				return
			}
			select {
			case w.events <- ev:
			case <-ctx.Done():
				pr.CloseWithError(ctx.Err())
				return
			}
		}
	}()
	k.t.Cleanup(func() { w.shutdown() })
	return w
}

// next waits for the next event and checks its type and object.
func (w *kcWatch) next(t *testing.T, typ string, ok func(kcObject) bool) {
	t.Helper()
	select {
	case ev, open := <-w.events:
		if !open {
			t.Fatalf("kubectl get -w ended before a %s event; stderr:\n%s", typ, w.stderrText())
		}
		w.seen = append(w.seen, ev)
		if ev.Type != typ || !ok(ev.Object) {
			t.Fatalf("kubectl get -w event = %s %+v, want a matching %s", ev.Type, ev.Object, typ)
		}
	case <-time.After(20 * time.Second):
		t.Fatalf("kubectl get -w: no %s event within 20s; stderr:\n%s", typ, w.stderrText())
	}
}

// stop ends kubectl and returns every event seen, failing on extra ones.
func (w *kcWatch) stop(t *testing.T) []kcEvent {
	t.Helper()
	// Give late (unexpected) events a moment to show up.
	select {
	case ev, open := <-w.events:
		if open {
			t.Errorf("kubectl get -w: unexpected event %s %+v", ev.Type, ev.Object)
		}
	case <-time.After(300 * time.Millisecond):
	}
	w.shutdown()
	return w.seen
}

func (w *kcWatch) shutdown() {
	w.cancel()
	w.cmd.Wait()
	w.pw.Close()
	for range w.events {
	}
}

func (w *kcWatch) stderrText() string {
	w.cancel()
	w.cmd.Wait()
	return w.stderr.String()
}
