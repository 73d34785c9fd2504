package audit_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	auditv1 "k8s.io/apiserver/pkg/apis/audit/v1"

	owclient "github.com/objwatch/objwatch/client"
	"github.com/objwatch/objwatch/server"
	"github.com/objwatch/objwatch/server/audit"
	"github.com/objwatch/objwatch/testenv"
)

const crashChildEnv = "OBJWATCH_AUDIT_CRASH_LOG"

// TestAuditCrashChild is the server TestAuditSurvivesKill kills.
func TestAuditCrashChild(t *testing.T) {
	path := os.Getenv(crashChildEnv)
	if path == "" {
		t.Skip("the server process of TestAuditSurvivesKill")
	}
	env := testenv.Start(t, testenv.WithServerConfig(func(c *server.Config) {
		c.Verify = false
		c.Audit = audit.Config{Path: path}
	}))
	fmt.Printf("KUBECONFIG=%s\n", env.Kubeconfig)
	io.Copy(io.Discard, os.Stdin)
}

// TestAuditSurvivesKill: a server killed with SIGKILL during a burst of
// creates has a record of every create it acknowledged, and its log
// verifies (a record cut by the kill is dropped on reopening).
func TestAuditSurvivesKill(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a server process")
	}
	dir := t.TempDir()
	path := filepath.Join(dir, "audit.log")
	cmd := exec.Command(os.Args[0], "-test.run=^TestAuditCrashChild$")
	cmd.Env = append(os.Environ(), crashChildEnv+"="+path, "TMPDIR="+dir)
	stdin, _ := cmd.StdinPipe()
	stdout, _ := cmd.StdoutPipe()
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer stdin.Close()
	sc := bufio.NewScanner(stdout)
	kubeconfig := ""
	for sc.Scan() {
		if kc, ok := strings.CutPrefix(sc.Text(), "KUBECONFIG="); ok {
			kubeconfig = kc
			break
		}
	}
	go io.Copy(io.Discard, stdout)
	if kubeconfig == "" {
		cmd.Process.Kill()
		cmd.Wait()
		t.Fatal("the server process did not start")
	}
	cfg, err := owclient.FromKubeconfig(kubeconfig, "")
	if err != nil {
		t.Fatal(err)
	}
	rc, err := owclient.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer rc.CloseIdleConnections()
	c := owclient.Unstructured(rc, owclient.Resource{GVR: schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}, Namespaced: true, Kind: "ConfigMap"})

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var mu sync.Mutex
	var acked []string
	var wg sync.WaitGroup
	for w := range 16 {
		wg.Go(func() {
			for i := 0; ctx.Err() == nil; i++ {
				name := fmt.Sprintf("k-%d-%d", w, i)
				obj := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "v1", "kind": "ConfigMap",
					"metadata": map[string]any{"name": name, "namespace": "default"}, "data": map[string]any{"k": "v"}}}
				if _, err := c.Create(ctx, obj, metav1.CreateOptions{}); err != nil {
					return // the server is gone
				}
				mu.Lock()
				acked = append(acked, name)
				mu.Unlock()
			}
		})
	}
	time.Sleep(1500 * time.Millisecond)
	mu.Lock()
	n := len(acked)
	mu.Unlock()
	cmd.Process.Kill() // SIGKILL
	cmd.Wait()
	cancel()
	wg.Wait()
	if n == 0 {
		t.Fatal("no create was acknowledged before the kill")
	}
	recorded := map[string]bool{}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	// The last line may be cut by the kill: Scan stops there.
	if err := audit.Scan(f, audit.Filter{Verb: "create", Resource: "configmaps"}, func(ev *auditv1.Event, _ []byte) bool {
		if ev.ResponseStatus != nil && ev.ResponseStatus.Code == 201 {
			recorded[ev.ObjectRef.Name] = true
		}
		return true
	}); err != nil {
		t.Fatal(err)
	}
	missing := 0
	for _, name := range acked {
		if !recorded[name] {
			missing++
			if missing < 5 {
				t.Errorf("create of %s acknowledged, not in the audit log", name)
			}
		}
	}
	t.Logf("%d creates acknowledged, %d recorded, %d missing", len(acked), len(recorded), missing)
	// Reopening cuts a partial record; then the chain verifies.
	l, err := audit.New(audit.Config{Path: path})
	if err != nil {
		t.Fatal(err)
	}
	rctx, rcancel := context.WithCancel(context.Background())
	rcancel()
	l.Run(rctx)
	if _, err := audit.Verify([]string{path}, nil); err != nil {
		t.Errorf("Verify after the kill = %v", err)
	}
}
