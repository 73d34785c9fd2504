package kube_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/objwatch/objwatch/testenv"
)

// referenceEnv names the kubeconfig of a kube-apiserver v1.37.2 (admin,
// default admission plugins, no controllers): with it set,
// TestKindsParity records that server's answers into parityFile instead
// of comparing.
const referenceEnv = "OBJWATCH_REFERENCE_KUBECONFIG"

var parityFile = filepath.Join("testdata", "parity.json")

// answer is what a server said to one request, normalised: what must
// differ between two servers (uids, resourceVersions, the server's own
// timestamps) is replaced or left out.
type answer struct {
	Case     string         `json:"case"`
	Step     string         `json:"step"`
	Code     int            `json:"code"`
	Reason   string         `json:"reason,omitempty"`
	Message  string         `json:"message,omitempty"`
	Causes   []any          `json:"causes,omitempty"`
	Warnings []string       `json:"warnings,omitempty"`
	Object   map[string]any `json:"object,omitempty"`
	Names    []string       `json:"names,omitempty"`
}

// knownDifferences are the answers objwatch does not give as kube-apiserver
// does, with why.
var knownDifferences = map[string]string{}

func TestKindsParity(t *testing.T) {
	if path := os.Getenv(referenceEnv); path != "" {
		cfg, err := clientcmd.BuildConfigFromFlags("", path)
		if err != nil {
			t.Fatal(err)
		}
		c, err := rest.HTTPClientFor(cfg)
		if err != nil {
			t.Fatal(err)
		}
		got := runParity(t, c, cfg.Host)
		b, err := json.MarshalIndent(got, "", "  ")
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(parityFile, append(b, '\n'), 0o644); err != nil {
			t.Fatal(err)
		}
		t.Logf("recorded %d answers of %s into %s", len(got), cfg.Host, parityFile)
		return
	}
	b, err := os.ReadFile(parityFile)
	if err != nil {
		t.Fatal(err)
	}
	var want []answer
	if err := json.Unmarshal(b, &want); err != nil {
		t.Fatal(err)
	}
	env := testenv.Start(t)
	got := runParity(t, env.HTTPClient(), env.Config.Host)
	byKey := map[string]answer{}
	for _, a := range got {
		byKey[caseKey(a.Case, a.Step)] = a
	}
	ignore := map[string]map[string]string{}
	for _, c := range cases {
		ignore[c.name] = c.ignore
	}
	same := 0
	for _, w := range want {
		key := caseKey(w.Case, w.Step)
		g, ok := byKey[key]
		if !ok {
			t.Errorf("%s: no such step any more", key)
			continue
		}
		diffs := compareAnswers(w, g, ignoredFor(ignore[w.Case], w.Step))
		if len(diffs) == 0 {
			same++
			if why, ok := knownDifferences[key]; ok {
				t.Errorf("%s: listed as a known difference (%s) but the answers are the same now", key, why)
			}
			continue
		}
		if why, ok := knownDifferences[key]; ok {
			t.Logf("%s: known difference (%s):\n\t%s", key, why, strings.Join(diffs, "\n\t"))
			continue
		}
		t.Errorf("%s:\n\t%s", key, strings.Join(diffs, "\n\t"))
	}
	t.Logf("parity with kube-apiserver: %d of %d answers the same (%d cases)", same, len(want), len(cases))
}

// runParity creates the namespace and runs every case's steps against the
// server at host.
func runParity(t *testing.T, c *http.Client, host string) []answer {
	t.Helper()
	defer c.CloseIdleConnections()
	for _, s := range []step{
		{method: "POST", path: "/api/v1/namespaces", body: `{"apiVersion":"v1","kind":"Namespace","metadata":{"name":"` + parityNS + `"}}`},
		// kube-apiserver's ServiceAccount admission refuses pods in a
		// namespace without one (no controller creates it here).
		{method: "POST", path: nsPath("/api/v1", "serviceaccounts"), body: `{"apiVersion":"v1","kind":"ServiceAccount","metadata":{"name":"default"}}`},
	} {
		if a := do(t, c, host, s); a.Code != http.StatusCreated {
			t.Fatalf("setup %s %s: %d %s", s.method, s.path, a.Code, a.Message)
		}
	}
	var out []answer
	for _, kc := range cases {
		for _, s := range kc.steps() {
			a := do(t, c, host, s)
			a.Case, a.Step = kc.name, s.name
			out = append(out, a)
		}
	}
	return out
}

// do sends one request and normalises its answer.
func do(t *testing.T, c *http.Client, host string, s step) answer {
	t.Helper()
	var body io.Reader
	if s.body != "" {
		if !json.Valid([]byte(s.body)) {
			t.Fatalf("%s %s: body is not JSON: %s", s.method, s.path, s.body)
		}
		body = strings.NewReader(s.body)
	}
	req, err := http.NewRequest(s.method, host+s.path, body)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Accept", "application/json")
	switch s.method {
	case "PATCH":
		req.Header.Set("Content-Type", "application/merge-patch+json")
	case "POST", "PUT":
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", s.method, s.path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("%s %s: %v", s.method, s.path, err)
	}
	a := answer{Code: resp.StatusCode}
	for _, w := range resp.Header.Values("Warning") {
		a.Warnings = append(a.Warnings, warningText(w))
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		a.Message = "not JSON: " + strings.TrimSpace(string(b))
		return a
	}
	if m["kind"] == "Status" {
		a.Reason, _ = m["reason"].(string)
		a.Message, _ = m["message"].(string)
		a.Message = uidPattern.ReplaceAllString(a.Message, "<uid>")
		if d, ok := m["details"].(map[string]any); ok {
			a.Causes, _ = d["causes"].([]any)
		}
		if a.Code < 300 {
			a.Object = normalise(m)
		}
		return a
	}
	if s.names {
		items, _ := m["items"].([]any)
		a.Names = []string{}
		for _, it := range items {
			md, _ := it.(map[string]any)["metadata"].(map[string]any)
			n, _ := md["name"].(string)
			a.Names = append(a.Names, n)
		}
		sort.Strings(a.Names)
		return a
	}
	a.Object = normalise(m)
	return a
}

// warningText is the text of a Warning header ("299 - \"text\"").
func warningText(h string) string {
	h = strings.TrimPrefix(h, "299 - ")
	if len(h) >= 2 && h[0] == '"' && h[len(h)-1] == '"' {
		h = strings.ReplaceAll(h[1:len(h)-1], `\"`, `"`)
	}
	return h
}

var uidPattern = regexp.MustCompile(`[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}`)

// normalise leaves out of an object what two servers set differently:
// uid (and the labels and selectors that name it), resourceVersion,
// managedFields and the times the server sets itself.
func normalise(m map[string]any) map[string]any {
	if md, ok := m["metadata"].(map[string]any); ok {
		for _, k := range []string{"uid", "resourceVersion", "creationTimestamp", "managedFields"} {
			delete(md, k)
		}
		if len(md) == 0 {
			delete(m, "metadata")
		}
	}
	return normaliseValue(m).(map[string]any)
}

func normaliseValue(v any) any {
	switch v := v.(type) {
	case map[string]any:
		for k, e := range v {
			v[k] = normaliseValue(e)
		}
	case []any:
		for i, e := range v {
			v[i] = normaliseValue(e)
		}
	case string:
		if _, err := time.Parse(time.RFC3339, v); err == nil && v != sentTime {
			return "<time>"
		}
		return uidPattern.ReplaceAllString(v, "<uid>")
	}
	return v
}

// ignoredFor returns the paths of a case's ignore list that apply to step:
// "path" or "step|path".
func ignoredFor(ignore map[string]string, step string) map[string]string {
	out := map[string]string{}
	for k, why := range ignore {
		if s, p, ok := strings.Cut(k, "|"); ok {
			if s == step {
				out[p] = why
			}
			continue
		}
		out[k] = why
	}
	return out
}

// compareAnswers lists how got differs from want, not comparing the object
// paths in ignore.
func compareAnswers(want, got answer, ignore map[string]string) []string {
	var d []string
	if want.Code != got.Code {
		d = append(d, fmt.Sprintf("code: kube %d, objwatch %d", want.Code, got.Code))
	}
	if want.Reason != got.Reason {
		d = append(d, fmt.Sprintf("reason: kube %q, objwatch %q", want.Reason, got.Reason))
	}
	if want.Message != got.Message {
		d = append(d, fmt.Sprintf("message:\n\t\tkube     %q\n\t\tobjwatch %q", want.Message, got.Message))
	}
	if !reflect.DeepEqual(want.Causes, got.Causes) {
		d = append(d, fmt.Sprintf("causes: kube %s, objwatch %s", compact(want.Causes), compact(got.Causes)))
	}
	if (len(want.Warnings) > 0 || len(got.Warnings) > 0) && !reflect.DeepEqual(want.Warnings, got.Warnings) {
		d = append(d, fmt.Sprintf("warnings: kube %q, objwatch %q", want.Warnings, got.Warnings))
	}
	if (len(want.Names) > 0 || len(got.Names) > 0) && !reflect.DeepEqual(want.Names, got.Names) {
		d = append(d, fmt.Sprintf("names: kube %q, objwatch %q", want.Names, got.Names))
	}
	return append(d, diffValues("", want.Object, got.Object, ignore)...)
}

// diffValues lists the paths at which two decoded JSON values differ,
// want being kube-apiserver's and got objwatch's.
func diffValues(path string, want, got any, ignore map[string]string) []string {
	return diffNamed(path, want, got, ignore, "kube", "objwatch")
}

// diffNamed lists the paths at which two decoded JSON values differ,
// naming them wantName and gotName.
func diffNamed(path string, want, got any, ignore map[string]string, wantName, gotName string) []string {
	if _, ok := ignore[path]; ok {
		return nil
	}
	wm, wok := want.(map[string]any)
	gm, gok := got.(map[string]any)
	if wok && gok {
		keys := map[string]bool{}
		for k := range wm {
			keys[k] = true
		}
		for k := range gm {
			keys[k] = true
		}
		var d []string
		for _, k := range sortedKeys(keys) {
			p := k
			if path != "" {
				p = path + "." + k
			}
			d = append(d, diffNamed(p, wm[k], gm[k], ignore, wantName, gotName)...)
		}
		return d
	}
	if reflect.DeepEqual(want, got) {
		return nil
	}
	return []string{fmt.Sprintf("%s: %s %s, %s %s", path, wantName, compact(want), gotName, compact(got))}
}

func sortedKeys(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

func compact(v any) string {
	if v == nil {
		return "(none)"
	}
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(v)
	return strings.TrimSpace(b.String())
}
