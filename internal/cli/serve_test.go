package cli

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/objwatch/objwatch/internal/instance"
)

// serve prints one line telling the user how to use the kubeconfig it
// wrote, and returns cleanly when its context ends (as on Ctrl-C).
func TestServePrintsKubeconfigAndStops(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "data")
	cmd := newServeCommand()
	var out syncBuffer
	cmd.SetOut(&out)
	cmd.SetErr(&out)
	cmd.SetArgs([]string{"--data-dir", dir, "--listen", "127.0.0.1:0", "--compaction-interval", "0"})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- cmd.ExecuteContext(ctx) }()
	deadline := time.Now().Add(30 * time.Second)
	for !strings.Contains(out.String(), "export KUBECONFIG=") {
		if time.Now().After(deadline) {
			cancel()
			t.Fatalf("no usage line; output so far: %q", out.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	line := out.String()
	if lines := strings.Count(strings.TrimSpace(line), "\n") + 1; lines != 1 || !strings.Contains(line, "https://127.0.0.1:") || !strings.Contains(line, filepath.Join(dir, "kubeconfig")) {
		t.Fatalf("usage output = %q, want one line with the URL and %s", line, filepath.Join(dir, "kubeconfig"))
	}
	if _, err := os.Stat(filepath.Join(dir, "kubeconfig")); err != nil {
		t.Fatalf("kubeconfig: %v", err)
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("serve returned %v, want nil on shutdown", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatalf("serve did not stop after its context ended")
	}
}

// A bound on the watch caches' list encodings that is not a size, or
// negative, is refused before anything starts, naming the flag; so is a
// size given with the deprecated switch off.
func TestServeRefusesBadListEncodingSizes(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--watch-cache-list-encodings-max-size", "lots"}, "a size such as"},
		{[]string{"--watch-cache-list-encodings-max-size", "-1Mi"}, "a size such as"},
		{[]string{"--watch-cache-list-encodings-max-size", ""}, "a size such as"},
		{[]string{"--watch-cache-list-encodings=false", "--watch-cache-list-encodings-max-size", "1Gi"}, "give only the size"},
	} {
		cmd := newServeCommand()
		var out syncBuffer
		cmd.SetOut(&out)
		cmd.SetErr(&out)
		cmd.SetArgs(append([]string{"--data-dir", filepath.Join(t.TempDir(), "data"), "--listen", "127.0.0.1:0"}, c.args...))
		err := cmd.ExecuteContext(t.Context())
		if err == nil || !strings.Contains(err.Error(), "--watch-cache-list-encodings-max-size") || !strings.Contains(err.Error(), c.want) {
			t.Errorf("serve %v = %v, want an error naming the flag and %q", c.args, err, c.want)
		}
	}
}

// listEncodingsSize maps the flags to the server's configuration: a
// size is the bound; 0, or the deprecated switch off, keeps none.
func TestServeListEncodingSizes(t *testing.T) {
	for _, c := range []struct {
		on       bool
		size     string
		explicit bool
		max      int64
		none     bool
	}{
		{true, "1Gi", false, 1 << 30, false},
		{true, "512Mi", true, 512 << 20, false},
		{true, "1G", true, 1e9, false},
		{true, "0", true, -1, true},
		{false, "1Gi", false, -1, true},
		{false, "0", true, -1, true},
	} {
		var o instance.Options
		if err := listEncodingsSize(&o, c.on, c.size, c.explicit); err != nil {
			t.Fatalf("%+v: %v", c, err)
		}
		if o.Server.ListEncodingsMaxSize != c.max || (o.Server.ListEncodingsMaxSize < 0) != c.none {
			t.Errorf("%+v: max %d; want %d (none kept: %v)", c, o.Server.ListEncodingsMaxSize, c.max, c.none)
		}
	}
}

// Sizes of the history store's flags that are not sizes are refused
// before anything starts, naming the flag.
func TestServeRefusesBadHistorySizes(t *testing.T) {
	for _, args := range [][]string{
		{"--history-max-size", "lots"},
		{"--history-max-size", "0"},
		{"--history-value-cache", "-1Mi"},
		{"--history-value-cache", "big"},
	} {
		cmd := newServeCommand()
		var out syncBuffer
		cmd.SetOut(&out)
		cmd.SetErr(&out)
		cmd.SetArgs(append([]string{"--data-dir", filepath.Join(t.TempDir(), "data"), "--listen", "127.0.0.1:0"}, args...))
		err := cmd.ExecuteContext(t.Context())
		// "a size such as": the flag's own message, not cobra's for a
		// flag it does not know.
		if err == nil || !strings.Contains(err.Error(), args[0]) || !strings.Contains(err.Error(), "a size such as") {
			t.Errorf("serve %v = %v, want an error naming %s and what a size is", args, err, args[0])
		}
	}
}
