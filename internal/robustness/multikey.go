package robustness

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"slices"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"k8s.io/apimachinery/pkg/util/uuid"
)

// txnKeys are the ConfigMaps the transaction writer writes: outside the
// model's keys (k0..), so that porcupine never sees them.
var txnKeys = []string{"m0", "m1", "m2", "m3", "m4", "m5", "m6", "m7"}

// TxnPut is one object a transaction wrote (or deleted: Delete).
type TxnPut struct {
	Key    string `json:"key"`
	Value  string `json:"value,omitempty"`
	UID    string `json:"uid"`
	Delete bool   `json:"delete,omitempty"`
}

// Txn is one multi-key transaction written straight to etcd, as another
// etcd writer (or objwatch's own DeletePrefix) would: 2–5 ConfigMaps put
// or deleted in one revision. Rev is the revision etcd answered (0: the
// transaction failed, its comparison did not hold, or its outcome is
// unknown; etcd's history says whether it happened).
type Txn struct {
	Call   time.Duration `json:"call"`
	Return time.Duration `json:"return"`
	Ops    []TxnPut      `json:"ops"`
	Rev    int64         `json:"rev"`
	Err    string        `json:"err,omitempty"`
}

// txnWriter writes multi-key revisions of the harness's ConfigMaps
// directly to etcd every 100–300 ms. Each transaction is conditional on
// the ModRevision of every key it touches, read just before, so that it
// keeps the uid and creationTimestamp of an object it overwrites, as an
// update through the API server does. It is used by one goroutine.
type txnWriter struct {
	cli   *clientv3.Client
	rng   *rand.Rand
	since func() time.Duration
	n     int

	txns []Txn
}

func (w *txnWriter) run(ctx context.Context) {
	for ctx.Err() == nil {
		sleep(ctx, 100*time.Millisecond+time.Duration(w.rng.IntN(200))*time.Millisecond)
		if ctx.Err() != nil {
			return
		}
		w.step(ctx)
	}
}

// storedConfigMap is a ConfigMap as the server stores it: no
// resourceVersion (etcd's ModRevision is the object's).
func storedConfigMap(name, uid, created, value string) ([]byte, error) {
	return json.Marshal(map[string]any{
		"apiVersion": "v1", "kind": "ConfigMap",
		"metadata": map[string]any{"name": name, "namespace": Namespace, "uid": uid, "creationTimestamp": created},
		"data":     map[string]string{"v": value},
	})
}

func (w *txnWriter) step(ctx context.Context) {
	rctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	cur, err := w.cli.Get(rctx, configMapPrefix+"m", clientv3.WithPrefix())
	if err != nil {
		return
	}
	type stored struct {
		rev     int64
		uid     string
		created string
	}
	present := map[string]stored{}
	for _, kv := range cur.Kvs {
		var o struct {
			Metadata struct {
				UID     string `json:"uid"`
				Created string `json:"creationTimestamp"`
			} `json:"metadata"`
		}
		if json.Unmarshal(kv.Value, &o) != nil {
			continue
		}
		present[string(kv.Key[len(configMapPrefix):])] = stored{kv.ModRevision, o.Metadata.UID, o.Metadata.Created}
	}
	n := 2 + w.rng.IntN(4)
	keys := slices.Clone(txnKeys)
	w.rng.Shuffle(len(keys), func(i, j int) { keys[i], keys[j] = keys[j], keys[i] })
	var ops []TxnPut
	if w.rng.IntN(4) == 0 && len(present) >= 2 {
		// Delete some of the present ones, as a DeletePrefix does.
		for _, k := range keys {
			if s, ok := present[k]; ok && len(ops) < n {
				ops = append(ops, TxnPut{Key: k, UID: s.uid, Delete: true})
			}
		}
	} else {
		for _, k := range keys[:n] {
			w.n++
			p := TxnPut{Key: k, Value: fmt.Sprintf("t-%d", w.n), UID: present[k].uid}
			if p.UID == "" {
				p.UID = string(uuid.NewUUID())
			}
			ops = append(ops, p)
		}
	}
	var cmps []clientv3.Cmp
	var thens []clientv3.Op
	for _, p := range ops {
		key := configMapPrefix + p.Key
		cmps = append(cmps, clientv3.Compare(clientv3.ModRevision(key), "=", present[p.Key].rev))
		if p.Delete {
			thens = append(thens, clientv3.OpDelete(key))
			continue
		}
		created := present[p.Key].created
		if created == "" {
			created = time.Now().UTC().Truncate(time.Second).Format(time.RFC3339)
		}
		b, err := storedConfigMap(p.Key, p.UID, created, p.Value)
		if err != nil {
			panic(err) // a map of strings always encodes
		}
		thens = append(thens, clientv3.OpPut(key, string(b)))
	}
	t := Txn{Call: w.since(), Ops: ops}
	resp, err := w.cli.Txn(rctx).If(cmps...).Then(thens...).Commit()
	t.Return = w.since()
	switch {
	case err != nil:
		t.Err = err.Error()
	case !resp.Succeeded:
		t.Err = "comparison failed"
	default:
		t.Rev = resp.Header.Revision
	}
	w.txns = append(w.txns, t)
}
