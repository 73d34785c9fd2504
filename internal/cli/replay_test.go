package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/objwatch/objwatch/client/recording"
	"github.com/objwatch/objwatch/testenv"
)

// writeRecording writes a recording of ConfigMaps in namespace ns: a
// create at 0 s, an update at 1 s and a delete at 1.5 s.
func writeRecording(t *testing.T, ns string) string {
	t.Helper()
	var buf bytes.Buffer
	w, err := recording.NewWriter(&buf, recording.Header{Resources: []string{"v1/configmaps"}}, recording.Options{})
	if err != nil {
		t.Fatal(err)
	}
	cm := func(name, v string) []byte {
		out, _ := json.Marshal(&corev1.ConfigMap{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "ConfigMap"},
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, ResourceVersion: v, UID: "u1"}, Data: map[string]string{"v": v}})
		return out
	}
	for _, it := range []recording.Item{
		{Kind: recording.Added, At: 1, Resource: "v1/configmaps", Object: cm("x", "1")},
		{Kind: recording.Modified, At: time.Second, Resource: "v1/configmaps", Object: cm("x", "2")},
		{Kind: recording.Deleted, At: 1500 * time.Millisecond, Resource: "v1/configmaps", Object: cm("x", "2")},
	} {
		if err := w.Write(it); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(t.TempDir(), "x.rec")
	if err := os.WriteFile(file, buf.Bytes(), 0o600); err != nil {
		t.Fatal(err)
	}
	return file
}

// TestReplaySpeedAndStep replays a small recording at twice the recorded
// speed (the spacing halves: at least 0.75 s for 1.5 s recorded), and step
// by step, where each write waits for a line of input.
func TestReplaySpeedAndStep(t *testing.T) {
	env := testenv.Start(t)
	ctx := context.Background()
	file := writeRecording(t, "speed")
	start := time.Now()
	out, _, err := runRecCmd(ctx, (&replayCmd{}).command(), nil, nil, "replay", file, "--kubeconfig", env.Kubeconfig, "--speed", "2")
	if err != nil {
		t.Fatalf("replay: %v\n%s", err, out)
	}
	if d := time.Since(start); d < 750*time.Millisecond || d > 10*time.Second {
		t.Errorf("--speed 2 of 1.5 s took %v, want about 0.75 s", d)
	}
	if !strings.Contains(out.String(), "# 1 creates, 1 updates, 1 deletes") {
		t.Errorf("output:\n%s", out)
	}

	// Step: one Enter, then the input ends: one write, then an error.
	file = writeRecording(t, "step")
	out, _, err = runRecCmd(ctx, (&replayCmd{}).command(), strings.NewReader("\n"), nil, "replay", file, "--kubeconfig", env.Kubeconfig, "--step")
	if err == nil || !strings.Contains(err.Error(), "end of input") {
		t.Errorf("replay --step with one Enter: %v", err)
	}
	for _, want := range []string{"next: line 2 ADDED v1/configmaps", "line 2 create v1/configmaps step/x", "next: line 3 MODIFIED", "# 1 creates, 0 updates, 0 deletes"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("--step output lacks %q:\n%s", want, out)
		}
	}

	// Secrets are refused unless asked for.
	_, _, err = runRecCmd(ctx, (&recordCmd{}).command(), nil, nil, "record", "secrets", "--kubeconfig", env.Kubeconfig, "-o", filepath.Join(t.TempDir(), "s.rec"))
	if err == nil || !strings.Contains(err.Error(), "--include-secrets") {
		t.Errorf("record secrets: %v", err)
	}
}

// TestReplayRefusesBadRecordings: replay checks the whole file before
// writing anything, and names the line of the first problem.
func TestReplayRefusesBadRecordings(t *testing.T) {
	good, err := os.ReadFile(writeRecording(t, "bad"))
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	for name, c := range map[string]struct {
		data []byte
		want string
	}{
		"truncated": {good[:len(good)-30], "truncated"},
		"not gzip":  {[]byte("hello\n"), "line 1: not a gzip-compressed recording"},
	} {
		file := filepath.Join(dir, name)
		if err := os.WriteFile(file, c.data, 0o600); err != nil {
			t.Fatal(err)
		}
		_, _, err := runRecCmd(context.Background(), (&replayCmd{}).command(), nil, nil, "replay", file, "--kubeconfig", "/nonexistent")
		if err == nil || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), "line ") {
			t.Errorf("%s: %v, want an error naming the line and %q", name, err, c.want)
		}
	}
}
