package e2e_test

import (
	"encoding/json"
	"fmt"
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

	expect := startPython(ctx, t, py, "python_watchext.py", env.Kubeconfig, ns).expect
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
