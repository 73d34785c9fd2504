package objects

import (
	"context"
	"errors"
	"net/http"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"

	"github.com/objwatch/objwatch/server/history"
)

// A past read of a revision the history store has not recorded within
// the wait is a 504 Timeout naming both revisions, not a 500.
func TestPastReadOfUnrecordedRevisionTimesOut(t *testing.T) {
	hs, err := history.Open(t.TempDir(), history.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer hs.Close()
	p := &pastReader{hs: hs, wait: 50 * time.Millisecond}
	err = pastError(p.recorded(context.Background(), 100))
	var st apierrors.APIStatus
	if !errors.As(err, &st) || st.Status().Code != http.StatusGatewayTimeout || !apierrors.IsTimeout(err) {
		t.Fatalf("read of an unrecorded revision: %v, want 504 Timeout", err)
	}
	if msg := err.Error(); msg != "Timeout: the history store has not recorded revision 100 yet (it is at 0)" {
		t.Errorf("message %q", msg)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := p.recorded(ctx, 100); apierrors.IsTimeout(err) {
		t.Errorf("a read whose request ended: %v, want the context's error, not a Timeout", err)
	}
}
