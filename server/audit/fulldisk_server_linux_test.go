package audit_test

import (
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/objwatch/objwatch/server"
	"github.com/objwatch/objwatch/server/audit"
	"github.com/objwatch/objwatch/server/servertest"
	"github.com/objwatch/objwatch/testenv"
)

// The audit log on a file system that fills up, as a user found it: 20 KB
// ConfigMaps created until one is refused. The refused one is refused
// before etcd has it (507, and not there afterwards); every create that
// was acknowledged has its record; once space returns, creates work again
// without a restart; and the log's chain verifies (no torn record).
func TestAuditLogOnAFullDisk(t *testing.T) {
	dir := audit.SmallFS(t, 4<<20)
	path := filepath.Join(dir, "audit.log")
	// A filler the test removes to give space back.
	if err := os.WriteFile(filepath.Join(dir, "filler"), make([]byte, 512<<10), 0o600); err != nil {
		t.Fatal(err)
	}
	env := testenv.Start(t, testenv.WithServerConfig(func(c *server.Config) {
		c.Audit = audit.Config{Path: path, CheckpointInterval: 50 * time.Millisecond, JournalSize: 256 << 10, Headroom: 256 << 10}
	}))
	a := servertest.NewAPI(t, env)
	value := strings.Repeat("x", 20_000)
	var created []string
	refused := ""
	for i := 0; i < 1000 && refused == ""; i++ {
		name := fmt.Sprintf("cm-%04d", i)
		r := a.JSON("POST", servertest.CMs, fmt.Sprintf(`{"metadata":{"name":%q},"data":{"v":%q}}`, name, value))
		switch r.Code {
		case http.StatusCreated:
			created = append(created, name)
		case http.StatusInsufficientStorage:
			refused = name
			if !strings.Contains(string(r.Body), "audit log") || !strings.Contains(string(r.Body), "nothing was written") {
				t.Errorf("the refusal says %s", r.Body)
			}
		default:
			t.Fatalf("create %s: %d %s", name, r.Code, r.Body)
		}
	}
	if refused == "" {
		t.Fatalf("%d creates of 20 KB on a 4 MiB file system, none refused", len(created))
	}
	if r := a.JSON("GET", servertest.CMs+"/"+refused, ""); r.Code != http.StatusNotFound {
		t.Errorf("the refused ConfigMap %s: GET %d, want 404 (it must not reach etcd)", refused, r.Code)
	}
	// Space returns: writes are accepted again, no restart.
	if err := os.Remove(filepath.Join(dir, "filler")); err != nil {
		t.Fatal(err)
	}
	servertest.MustCode(t, "create after space returned", a.JSON("POST", servertest.CMs, fmt.Sprintf(`{"metadata":{"name":"after"},"data":{"v":%q}}`, value[:1000])), http.StatusCreated)
	created = append(created, "after")

	evs := servertest.ReadEvents(t, path)
	for _, name := range created {
		if len(servertest.Completed(evs, "create", name)) != 1 {
			t.Errorf("acknowledged create of %s has no record", name)
		}
	}
	if _, err := audit.Verify([]string{path}, nil); err != nil {
		t.Errorf("verify: %v", err)
	}
	t.Logf("%d creates acknowledged, %s refused", len(created)-1, refused)
}
