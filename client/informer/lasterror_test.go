package informer_test

import (
	"errors"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/objwatch/objwatch/client"
	"github.com/objwatch/objwatch/client/informer"
)

// TestLastError: an informer that cannot list says why, and names its
// resource.
func TestLastError(t *testing.T) {
	e := startEnv(t)
	missing := client.Resource{GVR: corev1.SchemeGroupVersion.WithResource("nothings"), Namespaced: true, Kind: "Nothing"}
	inf, err := informer.New(client.NewClient[CM](e.reader, missing), informer.Options[CM]{InitialBackoff: 10 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if got := inf.Resource(); got != missing {
		t.Errorf("Resource() = %v, want %v", got, missing)
	}
	if err := inf.LastError(); err != nil {
		t.Errorf("LastError() before Run = %v, want nil", err)
	}
	run(t, inf)
	deadline := time.Now().Add(10 * time.Second)
	for inf.LastError() == nil && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	if err := inf.LastError(); !errors.Is(err, client.ErrNotFound) || inf.HasSynced() {
		t.Errorf("LastError() = %v, HasSynced() = %v; want ErrNotFound, false", err, inf.HasSynced())
	}

	ok, err := informer.New(e.writer, informer.Options[CM]{})
	if err != nil {
		t.Fatal(err)
	}
	run(t, ok)
	if err := ok.WaitForSync(testContext(t, 10*time.Second)); err != nil {
		t.Fatal(err)
	}
	if err := ok.LastError(); err != nil {
		t.Errorf("LastError() of a synced informer = %v, want nil", err)
	}
}
