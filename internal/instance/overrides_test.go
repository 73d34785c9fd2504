package instance_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/objwatch/objwatch/internal/instance"
	"github.com/objwatch/objwatch/server"
	"github.com/objwatch/objwatch/storage"
	"github.com/objwatch/objwatch/storage/etcd"
)

// etcdChildEnv makes the test binary an etcd member (runEtcdChild), so
// that a test can kill the member hard (SIGKILL) and start it again.
const etcdChildEnv = "OBJWATCH_TEST_ETCD_CHILD"

// runEtcdChild runs an embedded etcd at the client URL and data dir in
// the environment until killed.
func runEtcdChild() {
	url, dir, _ := strings.Cut(os.Getenv(etcdChildEnv), " ")
	e, err := etcd.StartEmbedded(context.Background(), etcd.EmbeddedConfig{Dir: dir, ClientURL: url, NoFsync: true})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	fmt.Println(e.Endpoint)
	select {}
}

// etcdChild is an etcd member in a child process.
type etcdChild struct {
	url, dir string
	cmd      *exec.Cmd
}

func startEtcdChild(t *testing.T, url, dir string) *etcdChild {
	t.Helper()
	c := &etcdChild{url: url, dir: dir, cmd: exec.Command(os.Args[0], "-test.run=^$")}
	c.cmd.Env = append(os.Environ(), etcdChildEnv+"="+url+" "+dir)
	c.cmd.Stderr = os.Stderr
	out, err := c.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := c.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil || strings.TrimSpace(line) != url {
		c.kill()
		t.Fatalf("etcd child: %q, %v", line, err)
	}
	return c
}

// kill stops the member hard and waits for the process.
func (c *etcdChild) kill() {
	c.cmd.Process.Kill()
	c.cmd.Wait()
}

func freeURL(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return "http://" + ln.Addr().String()
}

// Events on an etcd cluster of their own (--etcd-servers-overrides):
// created, listed and watched through the server, stored on that cluster
// only, collected when their owner on the main cluster goes; losing that
// cluster refuses events requests with a 503 Status and fails
// /readyz/etcd-override-0 while configmaps keep working; once it is back,
// events recover and a watch resumes from its last resourceVersion.
func TestEtcdServersOverrides(t *testing.T) {
	eventsURL, eventsDir := freeURL(t), t.TempDir()
	child := startEtcdChild(t, eventsURL, eventsDir)
	defer func() { child.kill() }()

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	in, err := instance.Start(ctx, instance.Options{
		DataDir: t.TempDir(), Listen: "127.0.0.1:0", EtcdNoFsync: true, Log: slog.New(slog.NewTextHandler(io.Discard, nil)),
		EtcdOverrides: []instance.EtcdOverride{{Resource: schema.GroupResource{Resource: "events"}, Servers: []string{eventsURL}}},
		Server: server.Config{StorageProbeInterval: 100 * time.Millisecond, StorageUnhealthyAfter: 500 * time.Millisecond, GCLeaseDuration: -1,
			History: server.HistoryConfig{Dir: t.TempDir()}},
	})
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	defer in.Close()
	c := client(t, in)
	defer c.CloseIdleConnections()
	do := func(method, path, body string) (int, map[string]any) {
		t.Helper()
		req, _ := http.NewRequest(method, in.URL+path, strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		resp, err := c.Do(req)
		if err != nil {
			t.Fatalf("%s %s: %v", method, path, err)
		}
		defer resp.Body.Close()
		var m map[string]any
		b, _ := io.ReadAll(resp.Body)
		json.Unmarshal(b, &m)
		if m == nil {
			m = map[string]any{"text": string(b)}
		}
		return resp.StatusCode, m
	}
	must := func(want int, method, path, body string) map[string]any {
		t.Helper()
		code, m := do(method, path, body)
		if code != want {
			t.Fatalf("%s %s = %d %v, want %d", method, path, code, m, want)
		}
		return m
	}
	eventJSON := func(name, ownerUID string) string {
		owner := ""
		if ownerUID != "" {
			owner = fmt.Sprintf(`,"ownerReferences":[{"apiVersion":"v1","kind":"ConfigMap","name":"owner","uid":%q}]`, ownerUID)
		}
		return fmt.Sprintf(`{"apiVersion":"v1","kind":"Event","metadata":{"name":%q%s},"involvedObject":{"kind":"ConfigMap","name":"owner","namespace":"default"},"reason":"Test","message":"m","type":"Normal"}`, name, owner)
	}

	// A watch of events, started before anything is written.
	list := must(200, "GET", "/api/v1/namespaces/default/events", "")
	rv0 := list["metadata"].(map[string]any)["resourceVersion"].(string)
	w := openWatch(t, c, in.URL+"/api/v1/namespaces/default/events?watch=1&resourceVersion="+rv0)
	defer w.close()

	cm := must(201, "POST", "/api/v1/namespaces/default/configmaps", `{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"owner"}}`)
	uid := cm["metadata"].(map[string]any)["uid"].(string)
	ev := must(201, "POST", "/api/v1/namespaces/default/events", eventJSON("owned", uid))
	evRV := ev["metadata"].(map[string]any)["resourceVersion"].(string)
	if typ, name, _ := w.next(t); typ != "ADDED" || name != "owned" {
		t.Fatalf("watch: %s %s, want ADDED owned", typ, name)
	}
	if items := must(200, "GET", "/api/v1/namespaces/default/events", "")["items"].([]any); len(items) != 1 {
		t.Fatalf("list of events: %d items, want 1", len(items))
	}

	// The event is in the events cluster's keyspace only, the configmap
	// in the main one only; the event's resourceVersion is its cluster's.
	eventsStore := in.Overrides[0]
	evKV, err := eventsStore.Get(ctx, "/registry/core/events/default/owned")
	if err != nil {
		t.Fatalf("the event is not in the events etcd: %v", err)
	}
	if fmt.Sprint(evKV.ModRevision) != evRV {
		t.Errorf("the event's resourceVersion %s is not its etcd's revision %d", evRV, evKV.ModRevision)
	}
	if _, err := in.Store.Get(ctx, "/registry/core/events/default/owned"); !errors.Is(err, storage.ErrNotFound) {
		t.Errorf("the event is in the main etcd too: %v", err)
	}
	if _, err := in.Store.Get(ctx, "/registry/core/configmaps/default/owner"); err != nil {
		t.Errorf("the configmap is not in the main etcd: %v", err)
	}
	if _, err := eventsStore.Get(ctx, "/registry/core/configmaps/default/owner"); !errors.Is(err, storage.ErrNotFound) {
		t.Errorf("the configmap is in the events etcd: %v", err)
	}

	// The history store records the main cluster only: past reads of
	// events are refused, those of configmaps answered.
	now := time.Now().UTC().Format(time.RFC3339Nano)
	for _, path := range []string{"/api/v1/namespaces/default/events?asOf=" + now, "/apis/objwatch.io/v1/changes?resource=events&fromResourceVersion=1"} {
		if code, m := do("GET", path, ""); code != 400 || !strings.Contains(fmt.Sprint(m["message"]), "etcd cluster of their own") {
			t.Errorf("GET %s = %d %v, want 400 saying the history store does not record events", path, code, m)
		}
	}
	must(200, "GET", "/api/v1/namespaces/default/configmaps?asOf="+now, "")

	// The collector deletes the event once its owner, on the main
	// cluster, is gone.
	must(200, "DELETE", "/api/v1/namespaces/default/configmaps/owner", "")
	if typ, name, _ := w.next(t); typ != "DELETED" || name != "owned" {
		t.Fatalf("watch: %s %s, want the collector's DELETED owned", typ, name)
	}
	ev2 := must(201, "POST", "/api/v1/namespaces/default/events", eventJSON("before-loss", ""))
	if typ, _, rv := w.next(t); typ != "ADDED" || rv != ev2["metadata"].(map[string]any)["resourceVersion"] {
		t.Fatalf("watch: %s %s", typ, rv)
	}
	lastRV := ev2["metadata"].(map[string]any)["resourceVersion"].(string)

	// Kill the events cluster hard.
	child.kill()
	// (Requests sent before the server counts the cluster as lost wait
	// for it, up to their timeout, as with the main cluster.)
	waitFor(t, "the events cluster counted as lost", func() bool {
		code, _ := do("GET", "/readyz/etcd-override-0", "")
		return code == 503
	})
	if code, st := do("GET", "/api/v1/namespaces/default/events", ""); code != 503 || st["kind"] != "Status" {
		t.Errorf("list of events while their etcd is lost = %d %v, want a 503 Status", code, st)
	}
	code, st := do("POST", "/api/v1/namespaces/default/events", eventJSON("during-loss", ""))
	if code != 503 || st["kind"] != "Status" || !strings.Contains(fmt.Sprint(st["message"]), "unavailable") {
		t.Errorf("create of an event while its etcd is lost = %d %v, want a 503 Status", code, st)
	}
	w.waitEnd(t) // the open watch ends
	must(201, "POST", "/api/v1/namespaces/default/configmaps", `{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"during-loss"}}`)
	must(200, "GET", "/api/v1/namespaces/default/configmaps/during-loss", "")
	if code, m := do("GET", "/readyz/etcd-override-0", ""); code != 503 || !strings.Contains(fmt.Sprint(m["text"]), "events") {
		t.Errorf("/readyz/etcd-override-0 = %d %v, want 503 naming events", code, m)
	}
	must(200, "GET", "/readyz/etcd", "")

	// Back: events recover, a watch resumes from the last event seen.
	child = startEtcdChild(t, eventsURL, eventsDir)
	waitFor(t, "events served again", func() bool {
		code, _ := do("GET", "/api/v1/namespaces/default/events", "")
		return code == 200
	})
	w2 := openWatch(t, c, in.URL+"/api/v1/namespaces/default/events?watch=1&resourceVersion="+lastRV)
	defer w2.close()
	must(201, "POST", "/api/v1/namespaces/default/events", eventJSON("after-loss", ""))
	if typ, name, _ := w2.next(t); typ != "ADDED" || name != "after-loss" {
		t.Fatalf("resumed watch: %s %s, want ADDED after-loss", typ, name)
	}
	must(200, "GET", "/readyz/etcd-override-0", "")
}

func waitFor(t *testing.T, what string, f func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !f() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting: %s", what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// watchStream reads a watch's events.
type watchStream struct {
	resp   *http.Response
	events chan [3]string // type, name, resourceVersion
	done   chan struct{}
}

func openWatch(t *testing.T, c *http.Client, url string) *watchStream {
	t.Helper()
	resp, err := c.Get(url)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("watch %s: %v %v", url, err, resp)
	}
	w := &watchStream{resp: resp, events: make(chan [3]string, 100), done: make(chan struct{})}
	go func() {
		defer close(w.done)
		dec := json.NewDecoder(resp.Body)
		for {
			var ev struct {
				Type   string
				Object struct {
					Metadata struct{ Name, ResourceVersion string }
				}
			}
			if err := dec.Decode(&ev); err != nil {
				return
			}
			if ev.Type == "BOOKMARK" {
				continue
			}
			w.events <- [3]string{ev.Type, ev.Object.Metadata.Name, ev.Object.Metadata.ResourceVersion}
		}
	}()
	return w
}

func (w *watchStream) next(t *testing.T) (typ, name, rv string) {
	t.Helper()
	select {
	case e := <-w.events:
		return e[0], e[1], e[2]
	case <-time.After(30 * time.Second):
		t.Fatalf("no watch event in 30 s")
	}
	return
}

// waitEnd waits until the server ends the watch (after an ERROR event).
func (w *watchStream) waitEnd(t *testing.T) {
	t.Helper()
	select {
	case <-w.done:
	case <-time.After(30 * time.Second):
		t.Fatalf("the watch did not end")
	}
}

func (w *watchStream) close() {
	w.resp.Body.Close()
	<-w.done
}

// An override of a resource the server does not have is refused.
func TestEtcdServersOverridesUnknownResource(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_, err := instance.Start(ctx, instance.Options{
		DataDir: t.TempDir(), Listen: "127.0.0.1:0", EtcdNoFsync: true, Log: slog.New(slog.NewTextHandler(io.Discard, nil)),
		EtcdOverrides: []instance.EtcdOverride{{Resource: schema.GroupResource{Group: "example.com", Resource: "foos"}, Servers: []string{"http://127.0.0.1:1"}}},
	})
	if err == nil || !strings.Contains(err.Error(), `no resource "foos.example.com"`) {
		t.Fatalf("Start = %v, want an error naming foos.example.com", err)
	}
}
