package objects

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	apierrors "k8s.io/apimachinery/pkg/api/errors"

	"github.com/objwatch/objwatch/server/history"
	"github.com/objwatch/objwatch/storage"
	"github.com/objwatch/objwatch/storage/etcd/etcdtest"
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

// A watch from a compacted revision (replayed from the history store, then
// etcd's) or from a live one (etcd's, through the same watcher) ends
// between revisions: once it has sent an event marked More, the rest of
// that revision follows even when the watch's context ends, as a watch at
// its timeout does; a client resuming from the last resourceVersion it
// saw would otherwise miss the rest of a transaction.
func TestPastWatchEndsBetweenRevisions(t *testing.T) {
	st := etcdtest.Start(t)
	hs, err := history.Open(t.TempDir(), history.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer hs.Close()
	rctx, stopRecorder := context.WithCancel(context.Background())
	recorded := make(chan struct{})
	go func() {
		defer close(recorded)
		(&history.Recorder{Store: hs, Source: st}).Run(rctx)
	}()
	defer func() { stopRecorder(); <-recorded }()
	r := &storeReader{store: st, futureRVWait: 5 * time.Second, past: &pastReader{hs: hs, wait: 5 * time.Second}}

	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	const prefix, keys = "/registry/core/configmaps/ns/", 20
	txn := func(round int) int64 {
		t.Helper()
		var ops []clientv3.Op
		for i := range keys {
			ops = append(ops, clientv3.OpPut(fmt.Sprintf("%sk%02d", prefix, i), fmt.Sprintf(`{"round":%d}`, round)))
		}
		resp, err := st.Client().Txn(ctx).Then(ops...).Commit()
		if err != nil {
			t.Fatal(err)
		}
		return resp.Header.Revision
	}
	// watch watches from from, takes the events up to the first of rev
	// (marked More), ends the watch's context and counts what follows.
	watch := func(name string, from, rev int64) {
		t.Helper()
		wctx, end := context.WithCancel(ctx)
		defer end()
		w, err := r.watchFrom(wctx, prefix, from)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		defer w.Stop()
		for {
			ev, ok := <-w.Events()
			if !ok || ev.Type == storage.Error {
				t.Fatalf("%s: watch ended before rev %d: %+v", name, rev, ev)
			}
			if ev.Revision == rev {
				if !ev.More {
					t.Fatalf("%s: the first event of rev %d is not marked More", name, rev)
				}
				break
			}
		}
		end() // the watch's time is up
		n := 1
		for ev := range w.Events() {
			if ev.Revision == rev {
				n++
			}
		}
		if n != keys {
			t.Errorf("%s: %d of the %d events of rev %d before the watch ended", name, n, keys, rev)
		}
	}

	live := txn(1)
	watch("from etcd", live, live)

	past := txn(2)
	last := txn(3)
	if err := hs.WaitRecorded(ctx, last); err != nil {
		t.Fatal(err)
	}
	if err := st.Compact(ctx, last); err != nil {
		t.Fatal(err)
	}
	watch("from the history store", past, past)
}
