package robustness

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/objwatch/objwatch/server/registry"
)

var (
	configMapPrefix = registry.StoragePrefix("", "configmaps") + Namespace + "/"
	gcLeaseKey      = registry.StoragePrefix("coordination.k8s.io", "leases") + "kube-system/objwatch-garbage-collector"
)

// LeaseRecord is one write of the garbage collector's Lease.
type LeaseRecord struct {
	Rev    int64         `json:"rev"`
	At     time.Duration `json:"at"`
	Holder string        `json:"holder"`
}

// truth is etcd's own history of the harness's ConfigMaps (and of the
// collector's Lease), read by one uninterrupted etcd watch from before the
// first write: what every watch stream, list and answer is compared with.
// The harness compacts no further than it has read, so the history has
// no gap. Its methods are safe for concurrent use.
type truth struct {
	mu     sync.Mutex
	events []Event // ConfigMap events, in revision order
	leases []LeaseRecord
	rev    int64 // every revision up to rev has been read
	err    error
	done   chan struct{}
}

type storedObject struct {
	Metadata struct {
		Name string `json:"name"`
		UID  string `json:"uid"`
	} `json:"metadata"`
	Data map[string]string `json:"data"`
	Spec struct {
		HolderIdentity *string `json:"holderIdentity"`
	} `json:"spec"`
}

// watchTruth watches from revision from+1 until ctx ends.
func watchTruth(ctx context.Context, cli *clientv3.Client, from int64, since func() time.Duration) *truth {
	t := &truth{rev: from, done: make(chan struct{})}
	go func() { // owned by ctx: ends when it does (wait on t.done)
		defer close(t.done)
		// A member without a leader (quorum lost) ends the watch; it
		// starts again from the revision read so far, which the harness
		// has not compacted.
		for ctx.Err() == nil {
			wctx, cancel := context.WithCancel(ctx)
			wc := cli.Watch(clientv3.WithRequireLeader(wctx), registry.Root, clientv3.WithPrefix(), clientv3.WithPrevKV(),
				clientv3.WithRev(t.revision()+1), clientv3.WithProgressNotify())
			noLeader := false
			for resp := range wc {
				if err := resp.Err(); err != nil {
					if errors.Is(err, rpctypes.ErrNoLeader) {
						noLeader = true
						break
					}
					if resp.Canceled || resp.CompactRevision != 0 {
						cancel()
						t.fail(fmt.Errorf("truth watch: %w", err))
						return
					}
					continue
				}
				t.add(resp, since())
			}
			cancel()
			if !noLeader {
				break
			}
			sleep(ctx, 100*time.Millisecond)
		}
		if ctx.Err() == nil {
			t.fail(fmt.Errorf("truth watch ended"))
		}
	}()
	return t
}

func (t *truth) fail(err error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.err == nil {
		t.err = err
	}
}

func (t *truth) add(resp clientv3.WatchResponse, at time.Duration) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, ev := range resp.Events {
		key := string(ev.Kv.Key)
		var obj storedObject
		switch {
		case key == gcLeaseKey && ev.Type == clientv3.EventTypePut:
			if json.Unmarshal(ev.Kv.Value, &obj) == nil {
				h := ""
				if obj.Spec.HolderIdentity != nil {
					h = *obj.Spec.HolderIdentity
				}
				if n := len(t.leases); n == 0 || t.leases[n-1].Holder != h {
					t.leases = append(t.leases, LeaseRecord{Rev: ev.Kv.ModRevision, At: at, Holder: h})
				}
			}
		case strings.HasPrefix(key, configMapPrefix):
			e := Event{Key: strings.TrimPrefix(key, configMapPrefix), RV: ev.Kv.ModRevision, At: at}
			switch {
			case ev.Type == clientv3.EventTypeDelete:
				e.Type = "DELETED"
				if ev.PrevKv != nil && json.Unmarshal(ev.PrevKv.Value, &obj) == nil {
					e.UID, e.Value = obj.Metadata.UID, obj.Data["v"]
				}
			case ev.Kv.CreateRevision == ev.Kv.ModRevision:
				e.Type = "ADDED"
			default:
				e.Type = "MODIFIED"
			}
			if e.Type != "DELETED" && json.Unmarshal(ev.Kv.Value, &obj) == nil {
				e.UID, e.Value = obj.Metadata.UID, obj.Data["v"]
			}
			t.events = append(t.events, e)
		}
		t.rev = max(t.rev, ev.Kv.ModRevision)
	}
	t.rev = max(t.rev, resp.Header.Revision)
}

// revision is the revision the history is complete up to.
func (t *truth) revision() int64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.rev
}

// waitFor waits until the history is complete up to rev, asking etcd
// for progress notifications meanwhile.
func (t *truth) waitFor(ctx context.Context, cli *clientv3.Client, rev int64) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	for t.revision() < rev {
		t.mu.Lock()
		err := t.err
		t.mu.Unlock()
		if err != nil {
			return err
		}
		cli.RequestProgress(clientv3.WithRequireLeader(ctx)) // the same stream as the watch
		select {
		case <-ctx.Done():
			return fmt.Errorf("history stuck at %d, want %d", t.revision(), rev)
		case <-time.After(50 * time.Millisecond):
		}
	}
	return nil
}

// history returns the events and lease records read so far.
func (t *truth) history() ([]Event, []LeaseRecord, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	return append([]Event(nil), t.events...), append([]LeaseRecord(nil), t.leases...), t.err
}
