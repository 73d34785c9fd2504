package servertest

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/objwatch/objwatch/testenv"
)

// OaKubectl runs the real kubectl against env with its own HOME and cache.
type OaKubectl struct {
	T    *testing.T
	Path string
	Args []string
	Env  []string
	Dir  string
}

func NewOAKubectl(t *testing.T, env *testenv.Env) *OaKubectl {
	path, err := exec.LookPath("kubectl")
	if err != nil {
		t.Skip("kubectl not on PATH")
	}
	dir := t.TempDir()
	var vars []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "KUBECONFIG=") && !strings.HasPrefix(kv, "HOME=") && !strings.HasPrefix(kv, "KUBECACHEDIR=") {
			vars = append(vars, kv)
		}
	}
	vars = append(vars, "HOME="+dir)
	return &OaKubectl{
		T: t, Path: path, Dir: dir, Env: vars,
		Args: []string{"--kubeconfig", env.Kubeconfig, "--cache-dir", filepath.Join(dir, "cache")},
	}
}

func (k *OaKubectl) Run(args ...string) (stdout, stderr string, err error) {
	ctx, cancel := context.WithTimeout(k.T.Context(), 60*time.Second)
	defer cancel()
	c := exec.CommandContext(ctx, k.Path, append(append([]string(nil), k.Args...), args...)...)
	c.Env = k.Env
	var out, errOut bytes.Buffer
	c.Stdout, c.Stderr = &out, &errOut
	err = c.Run()
	return out.String(), errOut.String(), err
}

// ok runs kubectl, fails the test unless it succeeds with nothing on
// stderr (kubectl warns there when it cannot use OpenAPI), and returns
// stdout.
func (k *OaKubectl) Ok(args ...string) string {
	k.T.Helper()
	out, stderr, err := k.Run(args...)
	if err != nil || stderr != "" {
		k.T.Fatalf("kubectl %s: %v\nstdout: %s\nstderr: %s", strings.Join(args, " "), err, out, stderr)
	}
	return out
}

// file writes a manifest and returns its path.
func (k *OaKubectl) File(name, content string) string {
	k.T.Helper()
	p := filepath.Join(k.Dir, name)
	if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
		k.T.Fatal(err)
	}
	return p
}
