package e2e_test

import (
	"context"
	"fmt"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/objwatch/objwatch/server"
	"github.com/objwatch/objwatch/storage/etcd"
	"github.com/objwatch/objwatch/testenv"
)

// pythonWithKubernetes returns a Python interpreter that can import the
// kubernetes client: Debian's python3-kubernetes installs for
// /usr/bin/python3, which need not be the python3 first on PATH.
func pythonWithKubernetes(t *testing.T) string {
	t.Helper()
	candidates := []string{"/usr/bin/python3"}
	if p, err := exec.LookPath("python3"); err == nil {
		candidates = append(candidates, p)
	}
	for _, p := range candidates {
		if exec.Command(p, "-c", "import kubernetes").Run() == nil {
			return p
		}
	}
	t.Skip("no python3 with the kubernetes client (apt-get install python3-kubernetes): Python client test skipped")
	return ""
}

// TestPythonClient: the Python client lists, watches from the list's
// resourceVersion with bookmarks and sees the Go side's writes, and gets
// 410 watching from a compacted resourceVersion.
func TestPythonClient(t *testing.T) {
	py := pythonWithKubernetes(t)
	env := testenv.Start(t,
		testenv.WithBookmarkInterval(300*time.Millisecond),
		testenv.WithServerConfig(func(c *server.Config) { c.WatchCacheWindow = time.Second }))
	cs := typedClient(t, env)
	ctx := t.Context()
	const ns = "py"
	createNamespace(ctx, t, cs, ns)
	createConfigMap(ctx, t, cs, ns, "c0", nil, map[string]string{"n": "0"})

	py2 := startPython(ctx, t, py, "python_client.py", env.Kubeconfig, ns)
	stdin := py2.stdin
	// expect returns the next line's fields; the line must start with prefix.
	expect := func(prefix string) []string {
		t.Helper()
		return strings.Fields(py2.expect(prefix))
	}

	listed := expect("LISTED")
	if len(listed) != 3 || listed[2] != "c0" {
		t.Fatalf("Python list = %v, want c0", listed)
	}
	rv := listed[1]
	expect("WATCHING")
	c1 := createConfigMap(ctx, t, cs, ns, "c1", nil, map[string]string{"n": "1"})
	patched, err := cs.CoreV1().ConfigMaps(ns).Patch(ctx, "c1", types.MergePatchType, []byte(`{"data":{"n":"2"}}`), metav1.PatchOptions{})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		fmt.Sprintf(`EVENT ADDED c1 %s {"n": "1"}`, c1.ResourceVersion),
		fmt.Sprintf(`EVENT MODIFIED c1 %s {"n": "2"}`, patched.ResourceVersion),
	}
	var got []string
	bookmarks := 0
	for len(got) < len(want) || bookmarks == 0 {
		f := expect("")
		switch f[0] {
		case "BOOKMARK":
			bookmarks++
		case "EVENT":
			got = append(got, strings.Join(f, " "))
		default:
			t.Fatalf("Python watch: %v", f)
		}
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("Python watch events:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	expect("WATCHED")

	// Compact the history past the listed resourceVersion; the watch
	// cache forgets it within a second or so.
	cli, err := etcd.NewClient(etcd.ClientConfig{Endpoints: []string{env.EtcdEndpoint}})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	store, err := etcd.New(cli, prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	createConfigMap(ctx, t, cs, ns, "c2", nil, nil)
	cur, err := store.Revision(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := store.Compact(ctx, cur); err != nil {
		t.Fatal(err)
	}
	poll(ctx, t, "the watch cache to forget "+rv, func(ctx context.Context) (bool, error) {
		w, err := cs.CoreV1().ConfigMaps(ns).Watch(ctx, metav1.ListOptions{ResourceVersion: rv})
		if err != nil {
			return false, nil
		}
		defer w.Stop()
		ev := <-w.ResultChan()
		st, ok := ev.Object.(*metav1.Status)
		return ev.Type == "ERROR" && ok && st.Code == 410, nil
	})
	fmt.Fprintln(stdin, "GO")
	if gone := expect("GONE"); gone[1] != "410" {
		t.Errorf("Python watch from a compacted resourceVersion: %v, want ApiException 410", gone)
	}
	expect("DONE")
}
