package e2e_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/objwatch/objwatch/testenv"
)

// TestPythonWatchExtensions: the Python client reads /version's
// watchExtensions and watches with a field mask and delta events through
// its raw API (_preload_content=False), applying each patch to its copy
// (docs/WATCH-EXTENSIONS.md). It sees no event for a write outside the
// mask, and a delta event whose patched copy holds what the write
// returned.
func TestPythonWatchExtensions(t *testing.T) {
	py := pythonWithKubernetes(t)
	env := testenv.Start(t, testenv.WithBookmarkInterval(300*time.Millisecond))
	cs := typedClient(t, env)
	ctx := t.Context()
	const ns = "pyext"
	createNamespace(ctx, t, cs, ns)

	script, _ := filepath.Abs(filepath.Join("testdata", "python_watchext.py"))
	pctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(pctx, py, script, env.Kubeconfig, ns)
	stdout, _ := cmd.StdoutPipe()
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Wait()
	lines := make(chan string)
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			lines <- sc.Text()
		}
		io.Copy(io.Discard, stdout)
	}()
	expect := func(prefix string) string {
		t.Helper()
		select {
		case l, ok := <-lines:
			if !ok {
				cmd.Wait()
				t.Fatalf("the Python client ended before %s; stderr:\n%s", prefix, stderr.String())
			}
			if !strings.HasPrefix(l, prefix) {
				t.Fatalf("Python client: %q, want %s ...; stderr:\n%s", l, prefix, stderr.String())
			}
			return l
		case <-time.After(60 * time.Second):
			t.Fatalf("Python client: no %s within a minute; stderr:\n%s", prefix, stderr.String())
		}
		return ""
	}
	if ext := expect("EXTENSIONS"); !strings.Contains(ext, "fieldMask") || !strings.Contains(ext, "watchDeltas") {
		t.Fatalf("Python client: %s, want fieldMask and watchDeltas", ext)
	}
	expect("LISTED")
	expect("WATCHING")

	big := strings.Repeat("x", 2000) // a patch is smaller than the object
	c1 := createConfigMap(ctx, t, cs, ns, "c1", nil, map[string]string{"watched": "0", "other": big})
	c1.Data["other"] = big + "y" // outside the mask: no event
	c1, err := cs.CoreV1().ConfigMaps(ns).Update(ctx, c1, metav1.UpdateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	c1.Data["watched"] = "1"
	if c1, err = cs.CoreV1().ConfigMaps(ns).Update(ctx, c1, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	end := createConfigMap(ctx, t, cs, ns, "end", nil, nil)

	data := func(m map[string]string) string {
		b, _ := json.Marshal(m)
		var v any
		_ = json.Unmarshal(b, &v)
		// Python's json.dumps(sort_keys=True) separators.
		s, _ := json.Marshal(v)
		return strings.NewReplacer(`":"`, `": "`, `","`, `", "`).Replace(string(s))
	}
	expect("EVENT ADDED c1 ")
	want := fmt.Sprintf("EVENT MODIFIED c1 %s PATCH %s", c1.ResourceVersion, data(c1.Data))
	if got := expect("EVENT MODIFIED c1"); got != want {
		t.Errorf("Python delta event:\n got %.200s\nwant %.200s", got, want)
	}
	if got := expect("EVENT ADDED end"); got != fmt.Sprintf("EVENT ADDED end %s FULL null", end.ResourceVersion) {
		t.Errorf("Python: %s", got)
	}
	expect("DONE")
}
