package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/objwatch/objwatch/server/endpoints"
	"github.com/objwatch/objwatch/testenv"
)

// killedChildEnv holds the serve arguments of TestServeKilledChild.
const killedChildEnv = "OBJWATCH_TEST_KILLED_CHILD"

// TestServeKilledChild is the server TestHistoryStoreSurvivesKill starts
// (and kills) in a process of its own; it does nothing in a normal run.
func TestServeKilledChild(t *testing.T) {
	args := os.Getenv(killedChildEnv)
	if args == "" {
		t.Skip("run by TestHistoryStoreSurvivesKill")
	}
	os.Exit(Main(strings.Split(args, "\n")))
}

// A server killed with SIGKILL in the middle of a burst of writes, then
// started again on its data directory, has every acknowledged write in its
// history store, and exactly what etcd held, once etcd has compacted past
// them all: the store resumes from the last revision it recorded, and the
// compactor never went past what the store had synced.
func TestHistoryStoreSurvivesKill(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a server process twice")
	}
	ep := testenv.StartEtcd(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	dir := filepath.Join(t.TempDir(), "data")
	args := strings.Join([]string{"serve", "--data-dir", dir, "--listen", addr, "--etcd-servers", ep,
		"--compaction-interval", "200ms", "--exit-with-parent"}, "\n")
	var child *exec.Cmd
	start := func() {
		t.Helper()
		child = exec.Command(os.Args[0], "-test.run=^TestServeKilledChild$", "-test.count=1")
		child.Env = append(os.Environ(), killedChildEnv+"="+args)
		log, err := os.Create(filepath.Join(t.TempDir(), "serve.log"))
		if err != nil {
			t.Fatal(err)
		}
		child.Stdout, child.Stderr = log, log
		if err := child.Start(); err != nil {
			t.Fatal(err)
		}
		c := child
		t.Cleanup(func() { _ = c.Process.Kill(); _ = c.Wait(); log.Close() })
	}
	t.Logf("%v: start", time.Now().Format(time.StampMilli))
	start()
	cs := waitServing(t, filepath.Join(dir, "kubeconfig"))

	etcd, err := clientv3.New(clientv3.Config{Endpoints: []string{ep}, DialTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer etcd.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	const ns = "kill"
	if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// etcd's own account of every change in the namespace.
	now, err := etcd.Get(ctx, "kill-test-start")
	if err != nil {
		t.Fatal(err)
	}
	from := now.Header.Revision
	prefix := "/registry/core/configmaps/" + ns + "/"
	var truthMu sync.Mutex
	truth := map[string]bool{} // "rv name type"
	var seen int64             // the revision the watch has reached
	wch := etcd.Watch(ctx, prefix, clientv3.WithPrefix(), clientv3.WithRev(from+1))
	truthDone := make(chan struct{})
	go func() {
		defer close(truthDone)
		for resp := range wch {
			truthMu.Lock()
			seen = max(seen, resp.Header.Revision)
			for _, e := range resp.Events {
				typ := "MODIFIED"
				switch {
				case e.Type == clientv3.EventTypeDelete:
					typ = "DELETED"
				case e.IsCreate():
					typ = "ADDED"
				}
				truth[fmt.Sprintf("%d %s %s", e.Kv.ModRevision, strings.TrimPrefix(string(e.Kv.Key), prefix), typ)] = true
			}
			truthMu.Unlock()
		}
	}()

	// Writers: each creates its objects and updates them over and over;
	// what the server acknowledged is kept.
	type acked struct {
		name, value string
		rv          int64
	}
	var ackMu sync.Mutex
	var acks []acked
	var failed int
	wctx, stopWriters := context.WithCancel(ctx)
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Go(func() {
			cms := cs.CoreV1().ConfigMaps(ns)
			for i := 0; wctx.Err() == nil; i++ {
				name := fmt.Sprintf("w%d-%d", w, i%5)
				value := strconv.Itoa(i)
				cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name}, Data: map[string]string{"v": value}}
				got, err := cms.Update(wctx, cm, metav1.UpdateOptions{})
				if err != nil {
					got, err = cms.Create(wctx, cm, metav1.CreateOptions{})
				}
				ackMu.Lock()
				if err != nil {
					failed++
				} else {
					rv, _ := strconv.ParseInt(got.ResourceVersion, 10, 64)
					acks = append(acks, acked{name, value, rv})
				}
				ackMu.Unlock()
				if err != nil {
					time.Sleep(20 * time.Millisecond)
				}
			}
		})
	}
	count := func() int { ackMu.Lock(); defer ackMu.Unlock(); return len(acks) }
	for count() < 200 {
		time.Sleep(10 * time.Millisecond)
	}
	if err := child.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = child.Wait()
	killedAt := count()
	time.Sleep(300 * time.Millisecond)
	start()
	waitServing(t, filepath.Join(dir, "kubeconfig"))
	t.Logf("%v: restarted", time.Now().Format(time.StampMilli))
	for count() < killedAt+200 {
		time.Sleep(10 * time.Millisecond)
	}
	stopWriters()
	wg.Wait()
	t.Logf("%v: %d writes acknowledged (%d before the kill), %d failed", time.Now().Format(time.StampMilli), len(acks), killedAt, failed)
	if failed == 0 {
		t.Fatal("no write failed: the server was not killed during the burst")
	}

	// Every acknowledged write behind etcd's compaction: what the store
	// answers is all it has.
	var last int64
	for _, a := range acks {
		last = max(last, a.rv)
	}
	if _, err := etcd.Put(ctx, "kill-test-tick", ""); err != nil { // a revision after them to compact to
		t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		_, err := etcd.Get(ctx, "x", clientv3.WithRev(last))
		if err != nil && strings.Contains(err.Error(), "compacted") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("etcd not compacted past %d in 30 s: %v", last, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Logf("%v: compacted", time.Now().Format(time.StampMilli))
	cur, err := etcd.Get(ctx, "kill-test-end")
	if err != nil {
		t.Fatal(err)
	}
	for {
		truthMu.Lock()
		reached := seen >= cur.Header.Revision
		truthMu.Unlock()
		if reached {
			break
		}
		if err := etcd.RequestProgress(ctx); err != nil {
			t.Fatal(err)
		}
		time.Sleep(20 * time.Millisecond)
	}

	changes := map[string]bool{}
	var cont string
	for {
		req := cs.CoreV1().RESTClient().Get().AbsPath("/apis/objwatch.io/v1/changes").
			Param("namespace", ns).Param("resource", "configmaps").
			Param("fromResourceVersion", strconv.FormatInt(from, 10)).
			Param("toResourceVersion", strconv.FormatInt(cur.Header.Revision, 10)).Param("limit", "500")
		if cont != "" {
			req = req.Param("continue", cont)
		}
		body, err := req.DoRaw(ctx)
		if err != nil {
			t.Fatalf("changes: %v %s", err, body)
		}
		var l endpoints.ChangeList
		if err := json.Unmarshal(body, &l); err != nil {
			t.Fatal(err)
		}
		for _, it := range l.Items {
			changes[it.ResourceVersion+" "+it.Name+" "+it.Type] = true
		}
		if cont = l.Continue; cont == "" {
			break
		}
	}
	truthMu.Lock()
	defer truthMu.Unlock()
	t.Logf("etcd: %d changes from %d to %d; the store: %d", len(truth), from, cur.Header.Revision, len(changes))
	for k := range truth {
		if !changes[k] {
			t.Errorf("etcd's change %s is not in the history store", k)
		}
	}
	for k := range changes {
		if !truth[k] {
			t.Errorf("the history store has %s, which etcd never had", k)
		}
	}
	// Each acknowledged write, read back at its revision (compacted in
	// etcd: from the store), has the value the writer sent.
	for i, a := range acks {
		if i%7 != 0 && i != killedAt-1 && i != killedAt {
			continue // a sample, and the writes around the kill
		}
		var got corev1.ConfigMap
		err := cs.CoreV1().RESTClient().Get().Namespace(ns).Resource("configmaps").Name(a.name).
			Param("resourceVersion", strconv.FormatInt(a.rv, 10)).Param("resourceVersionMatch", "Exact").Do(ctx).Into(&got)
		if err == nil && got.Data["v"] != a.value {
			err = fmt.Errorf("data.v %q, want %q", got.Data["v"], a.value)
		}
		if err != nil {
			t.Errorf("%s at %d: %v", a.name, a.rv, err)
		}
	}
}

// waitServing waits until a server's kubeconfig exists and the server is
// ready, and returns a client-go clientset for it.
func waitServing(t *testing.T, kubeconfig string) *kubernetes.Clientset {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		if cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig); err == nil {
			cfg.Timeout, cfg.QPS, cfg.Burst = 5*time.Second, 1000, 1000
			cs, err := kubernetes.NewForConfig(cfg)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := cs.Discovery().RESTClient().Get().AbsPath("/readyz").DoRaw(context.Background()); err == nil {
				return cs
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("the server with %s not ready in 60 s", kubeconfig)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
