package etcd

import (
	"context"

	"go.etcd.io/etcd/api/v3/mvccpb"
	"k8s.io/apiserver/pkg/storage/value"

	"github.com/objwatch/objwatch/storage"
)

// WithTransformers returns a Store on the same client and metrics whose
// values are kept at rest as t's transformers make them (see the package
// doc). s itself is unchanged: it still reads and writes values as they
// are stored, which is what a test looking for ciphertext wants. The
// result is safe for concurrent use; t is called concurrently.
func (s *Store) WithTransformers(t storage.Transformers) storage.Interface {
	c := *s
	c.transform = t
	return &c
}

// transformer is the transformer of key's value, nil for none.
func (s *Store) transformer(key string) value.Transformer {
	if s.transform == nil {
		return nil
	}
	return s.transform(key)
}

// fromStorage is k with its value transformed back from its form at rest,
// and whether that form is stale (see storage.KeyValue.Stale). Like
// Kubernetes, the etcd key is the authenticated data.
func (s *Store) fromStorage(ctx context.Context, k *mvccpb.KeyValue) (storage.KeyValue, error) {
	out := kv(k)
	t := s.transformer(out.Key)
	if t == nil {
		return out, nil
	}
	v, stale, err := t.TransformFromStorage(ctx, k.Value, value.DefaultContext(k.Key))
	if err != nil {
		return storage.KeyValue{}, &storage.TransformError{Key: out.Key, Revision: out.ModRevision, Err: err}
	}
	out.Value, out.Stale = v, stale
	return out, nil
}

// FromRest transforms value, key's value at rest written at rev, back
// (see storage.RestReader).
func (s *Store) FromRest(ctx context.Context, key string, rev int64, v []byte) ([]byte, error) {
	out, err := s.fromStorage(ctx, &mvccpb.KeyValue{Key: []byte(key), Value: v, ModRevision: rev})
	return out.Value, err
}

// toStorage is v as key stores it at rest.
func (s *Store) toStorage(ctx context.Context, key string, v []byte) (string, error) {
	t := s.transformer(key)
	if t == nil {
		return string(v), nil
	}
	b, err := t.TransformToStorage(ctx, v, value.DefaultContext(key))
	if err != nil {
		return "", &storage.TransformError{Key: key, Err: err}
	}
	return string(b), nil
}

// conflict is the ConflictError of a conditional write that found cur.
func (s *Store) conflict(ctx context.Context, op string, cur *mvccpb.KeyValue) error {
	c, err := s.fromStorage(ctx, cur)
	if err != nil {
		return err
	}
	return &storage.ConflictError{Op: op, Current: c}
}
