package storage

import (
	"context"
	"errors"
)

// ErrNoSpace: the store refused a write because its database reached its
// quota (etcd's NOSPACE alarm). Reads and watches go on; writes fail
// until the operator compacts, defragments and disarms the alarm. The
// text is etcd's, which Kubernetes passes to clients.
var ErrNoSpace = errors.New("etcdserver: mvcc: database space exceeded")

// Alarm is one alarm raised in the store's cluster: Kind is etcd's name
// for it (NOSPACE, CORRUPT), Member the member that raised it.
type Alarm struct {
	Member uint64
	Kind   string
}

// AlarmLister is implemented by stores that can report their cluster's
// alarms (storage/etcd). Safe for concurrent use.
type AlarmLister interface {
	Alarms(ctx context.Context) ([]Alarm, error)
}
