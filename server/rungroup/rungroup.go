// Package rungroup starts the parts of a server in a declared order and
// stops them in the reverse order, waiting for each: every goroutine it
// starts has it as its owner.
package rungroup

import (
	"context"
	"fmt"
)

// Component is one part of a group. Every field is optional.
type Component struct {
	// Name names the component in errors.
	Name string
	// Run runs in a goroutine of its own until its context ends; the
	// group waits for it to return when it stops the component.
	Run func(ctx context.Context)
	// Ready is called, with the group's context, once Run has started;
	// the next component starts when it returns. An error stops the
	// components started so far and is returned by Run.
	Ready func(ctx context.Context) error
	// Stop is called when the component is stopped, after Run returned.
	Stop func()
	// Detached: Run's context does not end with the group's, only when
	// the group stops the component; for what must outlive the others
	// (what they wait on, what records their end).
	Detached bool
}

// started is a component whose Run goroutine (if any) was started.
type started struct {
	c      Component
	cancel context.CancelFunc
	done   chan struct{}
}

// Run starts cs in order, waits until ctx ends, then stops them in the
// reverse order, each after the one started after it has returned. It
// returns the error of a failed Ready (then the components started before
// it are stopped at once, in reverse), else nil. Every goroutine it
// starts has returned when it returns.
func Run(ctx context.Context, cs ...Component) error {
	var up []started
	defer func() {
		for i := len(up) - 1; i >= 0; i-- {
			up[i].stop()
		}
	}()
	for _, c := range cs {
		s := started{c: c}
		if c.Run != nil {
			parent := ctx
			if c.Detached {
				parent = context.WithoutCancel(ctx)
			}
			var rctx context.Context
			rctx, s.cancel = context.WithCancel(parent)
			s.done = make(chan struct{})
			go func() { defer close(s.done); c.Run(rctx) }()
		}
		up = append(up, s)
		if c.Ready != nil {
			if err := c.Ready(ctx); err != nil {
				return fmt.Errorf("%s: %w", c.Name, err)
			}
		}
	}
	<-ctx.Done()
	return nil
}

func (s started) stop() {
	if s.cancel != nil {
		s.cancel()
		<-s.done
	}
	if s.c.Stop != nil {
		s.c.Stop()
	}
}
