package robustness

import (
	"math"
	"net/http"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
)

// TestModel checks the register on small histories, so a
// model that accepts everything cannot hide behind a passing
// TestLinearizability.
func TestModel(t *testing.T) {
	// op is one operation of client 0 from call to ret; ret < 0: no answer.
	type op struct {
		call, ret int64
		in        Input
		out       Output
	}
	create := func(call, ret int64, v string, rv int64) op {
		return op{call, ret, Input{Kind: OpCreate, Key: "k", Value: v}, Output{Code: http.StatusCreated, Value: v, RV: rv, UID: "u"}}
	}
	get := func(call, ret int64, v string, rv int64) op {
		out := Output{Code: http.StatusOK, Value: v, RV: rv, UID: "u"}
		if rv == 0 {
			out = Output{Code: http.StatusNotFound}
		}
		return op{call, ret, Input{Kind: OpGet, Key: "k"}, out}
	}
	update := func(call, ret int64, v string, pre, rv int64) op {
		return op{call, ret, Input{Kind: OpUpdate, Key: "k", Value: v, RV: pre}, Output{Code: http.StatusOK, Value: v, RV: rv, UID: "u"}}
	}
	lost := func(o op) op { o.ret, o.out = -1, Output{}; return o }
	for _, tc := range []struct {
		name string
		ops  []op
		want porcupine.CheckResult
	}{
		{"read your write", []op{create(0, 1, "x", 5), get(2, 3, "x", 5)}, porcupine.Ok},
		{"stale read", []op{create(0, 1, "x", 5), update(2, 3, "y", 0, 6), get(4, 5, "x", 5)}, porcupine.Illegal},
		{"read before create", []op{create(0, 1, "x", 5), get(2, 3, "", 0)}, porcupine.Illegal},
		{"concurrent read", []op{create(0, 3, "x", 5), get(1, 2, "", 0), get(4, 5, "x", 5)}, porcupine.Ok},
		{"no-op update keeps rv", []op{create(0, 1, "x", 5), update(2, 3, "x", 0, 5)}, porcupine.Ok},
		{"no-op update with new rv", []op{create(0, 1, "x", 5), update(2, 3, "x", 0, 6)}, porcupine.Illegal},
		{"update with old rv", []op{create(0, 1, "x", 5), update(2, 3, "y", 0, 4)}, porcupine.Illegal},
		{"precondition met", []op{create(0, 1, "x", 5), update(2, 3, "y", 5, 7)}, porcupine.Ok},
		{"precondition not met", []op{create(0, 1, "x", 5), update(2, 3, "y", 4, 7)}, porcupine.Illegal},
		{"unanswered create happened", []op{lost(create(0, 0, "x", 0)), get(2, 3, "x", 9), update(4, 5, "y", 9, 10)}, porcupine.Ok},
		{"unanswered create did not happen", []op{lost(create(0, 0, "x", 0)), get(2, 3, "", 0)}, porcupine.Ok},
		{"unanswered create took effect once", []op{lost(create(0, 0, "x", 0)), get(2, 3, "x", 9), get(4, 5, "", 0)}, porcupine.Illegal},
		{"unanswered update seen, then undone", []op{create(0, 1, "x", 5), lost(update(2, 0, "y", 5, 0)), get(4, 5, "y", 8), get(6, 7, "x", 5)}, porcupine.Illegal},
		{"unanswered update with a failed precondition", []op{create(0, 1, "x", 5), update(2, 3, "z", 5, 6), lost(update(4, 0, "y", 5, 0)), get(6, 7, "y", 8)}, porcupine.Illegal},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var history []porcupine.Operation
			for _, o := range tc.ops {
				if o.ret < 0 {
					o.ret = math.MaxInt64
				}
				history = append(history, porcupine.Operation{Input: o.in, Output: o.out, Call: o.call, Return: o.ret})
			}
			if got := porcupine.CheckOperationsTimeout(Model, history, time.Second); got != tc.want {
				t.Errorf("CheckOperations(%s) = %s, want %s", tc.name, got, tc.want)
			}
		})
	}
}
