package etcd

import (
	"context"
	"errors"
	"fmt"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"

	"github.com/objwatch/objwatch/storage"
)

// Alarms lists the alarms raised in the cluster (storage.AlarmLister).
func (s *Store) Alarms(ctx context.Context) ([]storage.Alarm, error) {
	resp, err := s.cli.AlarmList(ctx)
	if err != nil {
		return nil, fmt.Errorf("alarm list: %w", err)
	}
	out := make([]storage.Alarm, 0, len(resp.Alarms))
	for _, a := range resp.Alarms {
		out = append(out, storage.Alarm{Member: a.MemberID, Kind: a.Alarm.String()})
	}
	return out, nil
}

// noSpace reports whether err is etcd's refusal of a write for want of
// space (its NOSPACE alarm is raised).
func noSpace(err error) bool {
	return errors.Is(err, rpctypes.ErrNoSpace) || errors.Is(err, rpctypes.ErrGRPCNoSpace)
}

// writeErr is a failed write's error: storage.ErrNoSpace for etcd's
// refusal for want of space, else err as it is, each naming op and key.
func writeErr(op, key string, err error) error {
	if noSpace(err) {
		return fmt.Errorf("%s %s: %w", op, key, storage.ErrNoSpace)
	}
	return fmt.Errorf("%s %s: %w", op, key, err)
}
