package main

import (
	"bufio"
	"context"
	"errors"
	"io"
	"slices"
	"strings"
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

// TestFirstHour runs the program against a testenv server as a user
// would: a labelled ConfigMap is mirrored; a `kubectl patch` of data.mode
// prints that one change, for the original and for its mirror; a
// label-only update prints nothing; removing the label removes the
// mirror.
func TestFirstHour(t *testing.T) {
	env := testenv.Start(t)
	ctx, cancel := context.WithCancel(t.Context())
	pr, pw := io.Pipe()
	done := make(chan error, 1)
	go func() {
		done <- Run(ctx, env.Config.ClientConfig(), "default", pw)
		pw.Close()
	}()
	printed := make(chan string, 100) // closed once Run returned
	go func() {
		defer close(printed)
		for s := bufio.NewScanner(pr); s.Scan(); {
			printed <- s.Text()
		}
	}()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run() = %v", err)
		}
		for range printed {
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
	var got []string
	readUntil := func(lines ...string) { // every one of lines is printed
		t.Helper()
		for slices.ContainsFunc(lines, func(l string) bool { return !slices.Contains(got, l) }) {
			select {
			case l := <-printed:
				got = append(got, l)
			case <-time.After(15 * time.Second):
				t.Fatalf("printed %q, then nothing for 15 s; want %q", got, lines)
			}
		}
	}
	readUntil(want...)

	patch(`{"metadata":{"labels":{"mirror":null}}}`) // label-only: not printed; the mirror goes
	waitFor(t, "the mirror's deletion", func() bool {
		_, err := cms.Get(ctx, "default", "settings-mirror", metav1.GetOptions{})
		return errors.Is(err, client.ErrNotFound)
	})
	// Handlers see changes in order: once the next data change is printed,
	// the label-only updates before it were not.
	patch(`{"data":{"end":"1"}}`)
	want = append(want, "default/settings data.end: <nil> -> 1")
	readUntil(want[len(want)-1])
	slices.Sort(got)
	slices.Sort(want)
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
