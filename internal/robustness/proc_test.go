package robustness

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
)

// TestPauseWaitsForStop: pause(true) returns only once the process no
// longer runs, so that a fault's probe sent right after it meets a
// stopped member; here a shell spinning on a CPU.
func TestPauseWaitsForStop(t *testing.T) {
	if _, err := os.Stat("/proc/self/stat"); err != nil {
		t.Skip("no /proc")
	}
	p := &process{name: "spin", path: "sh", args: []string{"-c", "while :; do :; done"}, logPath: filepath.Join(t.TempDir(), "log")}
	if err := p.start(); err != nil {
		t.Fatal(err)
	}
	defer p.kill()
	for i := range 20 {
		if err := p.pause(true); err != nil {
			t.Fatal(err)
		}
		if st, _ := procState(fmt.Sprintf("/proc/%d/stat", p.cmd.Process.Pid)); st != 'T' {
			t.Fatalf("round %d: state %q right after pause, want T", i, st)
		}
		if err := p.pause(false); err != nil {
			t.Fatal(err)
		}
	}
}
