package testenv

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/objwatch/objwatch/server"
)

// childEnv marks the test process StartProcess starts.
const childEnv = "OBJWATCH_TESTENV_PROCESS"

// ServeProcess is the body of a test function that StartProcess runs in a
// child process: there it starts a server with opts, tells the parent its
// kubeconfig and serves until the parent ends; in a normal test run it
// skips. Benchmarks use it to keep the server's allocations and CPU out of
// their own process:
//
//	func TestServer(t *testing.T) { testenv.ServeProcess(t, testenv.WithHistory(10*time.Second)) }
//
//	func BenchmarkX(b *testing.B) {
//		kubeconfig := testenv.StartProcess(b, "TestServer")
//		...
//	}
func ServeProcess(t *testing.T, opts ...Option) {
	if os.Getenv(childEnv) != t.Name() {
		t.Skip("a server process for a benchmark (testenv.StartProcess)")
	}
	// The server is measured: no checks (see Start).
	opts = append([]Option{WithServerConfig(func(c *server.Config) { c.Verify = false })}, opts...)
	e := Start(t, opts...)
	fmt.Printf("KUBECONFIG=%s\n", e.Kubeconfig)
	io.Copy(io.Discard, os.Stdin) // until the parent closes it
}

// StartProcess runs the test function test, which calls ServeProcess, in a
// child process of this test binary and returns the kubeconfig of its
// server. The child stops when tb ends.
func StartProcess(tb testing.TB, test string) string {
	tb.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^"+test+"$", "-test.v")
	cmd.Env = append(os.Environ(), childEnv+"="+test)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		tb.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		tb.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		stdin.Close()
		cmd.Wait()
	})
	sc := bufio.NewScanner(stdout)
	for sc.Scan() {
		if kc, ok := strings.CutPrefix(sc.Text(), "KUBECONFIG="); ok {
			go io.Copy(io.Discard, stdout) // the child's remaining output; ends with it
			return kc
		}
	}
	tb.Fatalf("server process %s ended: %v", test, sc.Err())
	return ""
}
