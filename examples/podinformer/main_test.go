package main

import (
	"bytes"
	"context"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/objwatch/objwatch/client"
	"github.com/objwatch/objwatch/testenv"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// lockedBuffer is what Print writes to while the test reads it.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// TestNodeIndex runs the example against a testenv server: pods on two
// nodes and one not scheduled, then a pod deleted and one moved (deleted
// and created again on the other node, as a controller reschedules), and
// checks what the spec.nodeName index answers and what Print printed.
func TestNodeIndex(t *testing.T) {
	env := testenv.Start(t)
	cfg, err := client.FromKubeconfig(env.Kubeconfig, "")
	if err != nil {
		t.Fatal(err)
	}
	rc, err := client.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(rc.CloseIdleConnections)
	inf, err := NewInformer(rc, "")
	if err != nil {
		t.Fatal(err)
	}
	var out lockedBuffer
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- Print(ctx, inf, "", &out) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Print: %v", err)
		}
	})

	podsC := client.NewClient[*corev1.Pod](rc, pods)
	create := func(name, node string) {
		t.Helper()
		p := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"},
			Spec: corev1.PodSpec{
				NodeName:   node,
				Containers: []corev1.Container{{Name: "app", Image: "nginx"}},
			},
		}
		if _, err := podsC.Create(t.Context(), p, metav1.CreateOptions{}); err != nil {
			t.Fatalf("create %s on %q: %v", name, node, err)
		}
	}
	remove := func(name string) {
		t.Helper()
		// Grace period 0: no kubelet will confirm a graceful deletion.
		zero := int64(0)
		if err := podsC.Delete(t.Context(), "default", name, metav1.DeleteOptions{GracePeriodSeconds: &zero}); err != nil {
			t.Fatalf("delete %s: %v", name, err)
		}
	}
	// want waits until the index answers these pods for each node.
	want := func(byNode map[string][]string) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for {
			var diff []string
			for node, names := range byNode {
				got, err := PodsOn(inf, node)
				if err != nil {
					t.Fatal(err)
				}
				if !slices.Equal(got, names) {
					diff = append(diff, node+": got "+strings.Join(got, ",")+", want "+strings.Join(names, ","))
				}
			}
			if diff == nil {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("index after 10s: %v", diff)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}

	create("web-1", "node-a")
	create("web-2", "node-a")
	create("db-1", "node-b")
	create("pending", "")
	want(map[string][]string{
		"node-a": {"default/web-1", "default/web-2"},
		"node-b": {"default/db-1"},
		"":       {},
	})

	remove("web-1")
	want(map[string][]string{"node-a": {"default/web-2"}, "node-b": {"default/db-1"}})

	remove("web-2")
	create("web-2", "node-b")
	want(map[string][]string{"node-a": {}, "node-b": {"default/db-1", "default/web-2"}})

	// The index answers only from the informer's cache; the server's
	// field selector on spec.nodeName must agree with it.
	list, err := podsC.List(t.Context(), "", metav1.ListOptions{FieldSelector: "spec.nodeName=node-b"})
	if err != nil {
		t.Fatal(err)
	}
	var listed []string
	for _, p := range list.Items {
		listed = append(listed, p.Namespace+"/"+p.Name)
	}
	slices.Sort(listed)
	if !slices.Equal(listed, []string{"default/db-1", "default/web-2"}) {
		t.Errorf("field selector spec.nodeName=node-b lists %v", listed)
	}

	// Print's handler runs behind the index; wait for its last line.
	last := "+ default/web-2 on node-b; node-b has 2: [default/db-1 default/web-2]"
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(out.String(), last) && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	var events []string
	for _, l := range lines {
		verb, _, _ := strings.Cut(l, ";")
		events = append(events, verb)
	}
	wantEvents := []string{
		"+ default/web-1 on node-a",
		"+ default/web-2 on node-a",
		"+ default/db-1 on node-b",
		"- default/web-1 on node-a",
		"- default/web-2 on node-a",
		"+ default/web-2 on node-b",
	}
	if !slices.Equal(events, wantEvents) {
		t.Errorf("Print wrote\n%s\nwant these events in order: %q", out.String(), wantEvents)
	}
	if !strings.Contains(out.String(), last) {
		t.Errorf("Print wrote\n%s\nwant a last line %q", out.String(), last)
	}
}
