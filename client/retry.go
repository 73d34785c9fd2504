package client

import (
	"context"
	"errors"
	"math/rand/v2"
	"time"
)

// conflictRetries and conflictDelay are RetryOnConflict's policy, the same
// as client-go's DefaultRetry: 5 attempts about 10 ms apart.
const (
	conflictRetries = 5
	conflictDelay   = 10 * time.Millisecond
)

// RetryOnConflict calls fn until it returns something other than a
// conflict (errors.Is(err, ErrConflict)), up to 5 times, waiting about 10 ms
// between attempts. fn should re-read the object it updates each time. It
// returns fn's last error, or ctx's error if ctx ends while waiting.
//
//	err := client.RetryOnConflict(ctx, func() error {
//		cm, err := cms.Get(ctx, ns, name, metav1.GetOptions{})
//		if err != nil {
//			return err
//		}
//		cm.Data["k"] = "v"
//		_, err = cms.Update(ctx, cm, metav1.UpdateOptions{})
//		return err
//	})
func RetryOnConflict(ctx context.Context, fn func() error) error {
	var err error
	for i := range conflictRetries {
		if err = fn(); !errors.Is(err, ErrConflict) {
			return err
		}
		if i == conflictRetries-1 {
			break
		}
		d := conflictDelay + rand.N(conflictDelay/10+1)
		t := time.NewTimer(d)
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-t.C:
		}
	}
	return err
}
