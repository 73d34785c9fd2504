package objects

import (
	"context"
	"errors"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/objwatch/objwatch/server/registry"
	"github.com/objwatch/objwatch/storage"
)

// maxConflictRetries bounds the attempts of one update or delete that
// lose conditional writes to other writers.
const maxConflictRetries = 100

// conflictRetry is the optimistic-concurrency loop of one update or
// delete: every attempt reads the object, decides, and writes conditionally
// on the revision it read. A conflicting write in etcd returns the key's
// current state with the conflict, and the next attempt starts from that
// state instead of reading again (as good as a quorum read: etcd read it
// in the write's transaction).
//
// The zero value starts the first attempt. A conflictRetry belongs to one
// write.
type conflictRetry struct {
	attempts  int // started
	conflicts int // lost conditional writes retried
	known     *storage.KeyValue
}

// next starts an attempt and returns etcd's state from the previous
// attempt's conflict, if it had one.
func (c *conflictRetry) next() *storage.KeyValue {
	c.attempts++
	k := c.known
	c.known = nil
	return k
}

// conflict reports whether err is a lost conditional write, keeping the
// state etcd returned with it for the next attempt.
func (c *conflictRetry) conflict(err error) bool {
	if !errors.Is(err, storage.ErrConflict) {
		return false
	}
	c.known = conflictCurrent(err)
	return true
}

// more reports whether another attempt is allowed after a conflict.
func (c *conflictRetry) more() bool {
	c.conflicts++
	return c.conflicts < maxConflictRetries
}

// first reports whether the attempt under way is the write's first.
func (c *conflictRetry) first() bool { return c.attempts == 1 }

// current is the state an attempt starts from: known (from a conflict),
// else a quorum read.
func (s *Service) current(ctx context.Context, res *registry.Resource, ns, name string, known *storage.KeyValue) (*unstructured.Unstructured, storage.KeyValue, error) {
	if known != nil {
		s.conflictReads.Add(1)
		return decodeCurrent(ctx, res, *known)
	}
	return s.etcd.get(ctx, res, ns, name)
}

// conflictCurrent returns the key's state a conflict error carries, or nil.
func conflictCurrent(err error) *storage.KeyValue {
	var ce *storage.ConflictError
	if errors.As(err, &ce) {
		return &ce.Current
	}
	return nil
}
