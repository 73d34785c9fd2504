package main

import (
	"bytes"
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/objwatch/objwatch/client"
	"github.com/objwatch/objwatch/testenv"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// lines is what Run writes to while the test reads it.
type lines struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lines) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lines) get() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return strings.Split(strings.TrimSuffix(b.buf.String(), "\n"), "\n")
}

// TestFirstHour runs the program against a testenv server as a user
// would: a labelled ConfigMap is mirrored; a `kubectl patch` of data.mode
// prints that one change, for the original and for its mirror; a
// label-only update prints nothing; removing the label removes the
// mirror.
func TestFirstHour(t *testing.T) {
	env := testenv.Start(t)
	var out lines
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- Run(ctx, env.Config.ClientConfig(), "default", &out) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run() = %v", err)
		}
	})

	rc, err := client.New(env.Config.ClientConfig())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(rc.CloseIdleConnections)
	cms := client.NewClient[CM](rc, configMaps)
	_, err = cms.Create(ctx, &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "settings", Labels: map[string]string{"mirror": "true"}},
		Data:       map[string]string{"mode": "fast"},
	}, metav1.CreateOptions{FieldManager: "kubectl-create"})
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the mirror", func() bool {
		m, err := cms.Get(ctx, "default", "settings-mirror", metav1.GetOptions{})
		return err == nil && m.Data["mode"] == "fast" && len(m.OwnerReferences) == 1 && m.OwnerReferences[0].Name == "settings"
	})

	// What `kubectl patch cm settings -p '{"data":{"mode":"safe"}}'` sends.
	patch := func(body string) {
		t.Helper()
		if _, err := cms.Patch(ctx, "default", "settings", types.StrategicMergePatchType, []byte(body),
			metav1.PatchOptions{FieldManager: "kubectl-patch"}); err != nil {
			t.Fatal(err)
		}
	}
	patch(`{"data":{"mode":"safe"}}`)
	patch(`{"metadata":{"labels":{"team":"web"}}}`) // label-only: not printed
	patch(`{"data":{"size":"2"}}`)
	want := []string{
		"default/settings data.mode: fast -> safe",
		"default/settings data.size: <nil> -> 2",
		"default/settings-mirror data.mode: fast -> safe",
		"default/settings-mirror data.size: <nil> -> 2",
	}
	waitFor(t, "four lines", func() bool { return len(out.get()) >= len(want) })

	patch(`{"metadata":{"labels":{"mirror":null}}}`) // label-only: not printed; the mirror goes
	waitFor(t, "the mirror's deletion", func() bool {
		_, err := cms.Get(ctx, "default", "settings-mirror", metav1.GetOptions{})
		return errors.Is(err, client.ErrNotFound)
	})
	got := out.get()
	slices.Sort(got)
	if !slices.Equal(got, want) {
		t.Errorf("printed:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

func waitFor(t *testing.T, what string, ok func() bool) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for !ok() {
		if time.Now().After(deadline) {
			t.Fatalf("no %s after 15 s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
