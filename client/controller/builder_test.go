package controller_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/objwatch/objwatch/client/controller"
)

func nop(context.Context, controller.Request) (controller.Result, error) {
	return controller.Result{}, nil
}

// TestBuilderErrors: every mistake is reported, once, by Complete.
func TestBuilderErrors(t *testing.T) {
	_, err := controller.NewBuilder("b").For(nil).Owns(nil).Watches(nil).Complete(nil)
	if err == nil {
		t.Fatal("Complete() = nil, want errors")
	}
	for _, want := range []string{"For: nil source", "Owns: nil source", "Watches: nil source", "For is required", "nil reconciler"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("Complete() = %v, want it to say %q", err, want)
		}
	}
}

func TestDuplicateName(t *testing.T) {
	reg := prometheus.NewPedanticRegistry()
	c, err := controller.New[string]("dup", controller.Func[string](func(context.Context, string) (controller.Result, error) {
		return controller.Result{}, nil
	}), controller.Options{Metrics: reg})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Queue().ShutDown()
	if _, err := controller.New("dup", controller.Func[controller.Request](nop), controller.Options{Metrics: reg}); !errors.Is(err, controller.ErrDuplicateName) {
		t.Errorf("New with a duplicate name = %v, want ErrDuplicateName", err)
	}
}

// TestTerminalError: TerminalError wraps, and is told apart by errors.Is.
func TestTerminalError(t *testing.T) {
	base := errors.New("bad spec")
	err := controller.TerminalError(base)
	if !errors.Is(err, controller.ErrTerminal) || !errors.Is(err, base) {
		t.Errorf("TerminalError(%v): Is ErrTerminal %v, Is base %v; want both", base, errors.Is(err, controller.ErrTerminal), errors.Is(err, base))
	}
	if errors.Is(base, controller.ErrTerminal) {
		t.Error("a plain error is terminal")
	}
}
