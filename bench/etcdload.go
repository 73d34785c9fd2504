package bench

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"

	clientv3 "go.etcd.io/etcd/client/v3"
	"k8s.io/apimachinery/pkg/util/uuid"

	"github.com/objwatch/objwatch/storage/etcd"
)

// LoadDirect writes objects from..to-1 (named by scaleName) straight into
// etcd, for sizes that would take too long through the API: each value is
// a copy of what the server stored for object scaleName(0) (which must have
// been created through the API), with the name, uid and shard label
// replaced, under the key the server uses (prefix + name). Keys that exist
// are left alone. The server's watch of etcd sees the writes as creates.
// It writes batches of txnOps keys on o.Clients concurrent clients.
func LoadDirect(ctx context.Context, t *Target, endpoint, prefix string, o *Options, from, to int) ([]Result, error) {
	cli, err := etcd.NewClient(etcd.ClientConfig{Endpoints: []string{endpoint}})
	if err != nil {
		return nil, fmt.Errorf("direct load: %w", err)
	}
	defer cli.Close()
	first := scaleName(0)
	resp, err := cli.Get(ctx, prefix+first)
	if err != nil || len(resp.Kvs) == 0 {
		return nil, fmt.Errorf("direct load: template %s%s: %v", prefix, first, err)
	}
	tmpl := resp.Kvs[0].Value
	batches := (to - from + txnOps - 1) / txnOps
	all, elapsed, err := parallel(ctx, o.Clients, batches, func(b int) error {
		lo := from + b*txnOps
		if b%100 == 0 {
			o.progress("%s: direct load %d/%d", t.Name, lo, to)
		}
		var ops []clientv3.Op
		var conds []clientv3.Cmp
		for i := lo; i < min(lo+txnOps, to); i++ {
			key := prefix + scaleName(i)
			v, err := stamp(tmpl, first, scaleName(i), string(uuid.NewUUID()), rand.IntN(16))
			if err != nil {
				return err
			}
			conds = append(conds, clientv3.Compare(clientv3.CreateRevision(key), "=", 0))
			ops = append(ops, clientv3.OpPut(key, string(v)))
		}
		r, err := cli.Txn(ctx).If(conds...).Then(ops...).Commit()
		if err != nil {
			return err
		}
		if !r.Succeeded { // some exist: write the others one by one
			for j, op := range ops {
				if _, err := cli.Txn(ctx).If(conds[j]).Then(op).Commit(); err != nil {
					return err
				}
			}
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("direct load: %w", err)
	}
	return []Result{{t.Name, "direct etcd writes/s", float64(to-from) / elapsed.Seconds(), "objects/s"},
		{t.Name, "direct etcd txn p99", ms(all.pct(0.99)), "ms"}}, nil
}

// txnOps is the batch of LoadDirect: below etcd's default --max-txn-ops
// (128).
const txnOps = 100

// stamp copies a stored object, replacing its name (from, the JSON string
// value "name":from), metadata.uid and its shard label.
func stamp(tmpl []byte, from, name, uid string, shard int) ([]byte, error) {
	old := []byte(`"name":"` + from + `"`)
	v := bytes.Replace(tmpl, old, []byte(`"name":"`+name+`"`), 1)
	i := bytes.Index(v, []byte(`"uid":"`))
	if i < 0 || !bytes.Contains(tmpl, old) {
		return nil, fmt.Errorf("direct load: template has no name %q or no uid", from)
	}
	i += len(`"uid":"`)
	j := bytes.IndexByte(v[i:], '"')
	if j < 0 {
		return nil, fmt.Errorf("direct load: template's uid is not terminated")
	}
	out := append(append(append([]byte(nil), v[:i]...), uid...), v[i+j:]...)
	if k := bytes.Index(out, []byte(`"shard":"s`)); k >= 0 {
		k += len(`"shard":"s`)
		if e := bytes.IndexByte(out[k:], '"'); e >= 0 {
			out = append(append(append([]byte(nil), out[:k]...), fmt.Sprint(shard)...), out[k+e:]...)
		}
	}
	return out, nil
}
