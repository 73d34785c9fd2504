package robustness

import (
	"fmt"
	"net/http"

	"github.com/anishathalye/porcupine"
)

// This file is the register that porcupine checks single-ConfigMap reads
// and writes against (docs/ARCHITECTURE.md, "Guarantees"); test/e2e's
// linearizability test and the robustness harness share it.
//
// The register knows resourceVersions only from answers: they are etcd
// revisions, so every write must answer with a version greater than every
// version it follows, and a no-op update keeps the version. A write without
// a definite answer (cancelled, connection error, 5xx) may or may not have
// happened: give it Return math.MaxInt64 and Output{} (Code 0), so the
// checker can place it anywhere after its call, including after
// everything else, where it changes nothing.

// Kind is an operation on one ConfigMap.
type Kind uint8

const (
	OpGet Kind = iota
	OpList
	OpCreate
	OpUpdate
	OpDelete
)

func (k Kind) String() string {
	return [...]string{"get", "list", "create", "update", "delete"}[k]
}

// Input is an operation's request: an OpList of several ConfigMaps is
// recorded as one operation per key, each with the list's call and return.
type Input struct {
	Kind  Kind
	Key   string
	Value string // create, update
	RV    int64  // update: the resourceVersion precondition; 0 for none
}

// Output is an operation's answer.
type Output struct {
	Code  int // HTTP status; 0: no definite answer
	Value string
	RV    int64
	UID   string
}

// state is one object as far as the answers so far pin it down.
type state struct {
	exists bool
	value  string
	// rv is the object's resourceVersion when known is set; otherwise,
	// and always for an absent object, every later version exceeds it.
	rv    int64
	known bool
	uid   string // "" when not known
}

// fits reports whether an answer about the existing object s agrees with it.
func (s state) fits(o Output) bool {
	if s.uid != "" && s.uid != o.UID {
		return false
	}
	if s.known {
		return o.RV == s.rv
	}
	return o.RV > s.rv
}

func step(st, input, output any) (bool, any) {
	s, in, out := st.(state), input.(Input), output.(Output)
	if out.Code == 0 {
		return true, mayApply(s, in)
	}
	pinned := state{exists: true, value: out.Value, rv: out.RV, known: true, uid: out.UID}
	switch in.Kind {
	case OpGet, OpList:
		switch out.Code {
		case http.StatusNotFound:
			return !s.exists, s
		case http.StatusOK:
			return s.exists && out.Value == s.value && s.fits(out), pinned
		}
	case OpCreate:
		switch out.Code {
		case http.StatusConflict:
			return s.exists, s
		case http.StatusCreated:
			return !s.exists && out.Value == in.Value && out.RV > s.rv, pinned
		}
	case OpUpdate:
		if !s.exists {
			return out.Code == http.StatusNotFound, s
		}
		if in.RV != 0 {
			if out.Code == http.StatusConflict {
				return !s.known || s.rv != in.RV, s
			}
			if s.known && s.rv != in.RV || !s.known && in.RV <= s.rv {
				return false, s
			}
			s.rv, s.known = in.RV, true
		}
		if out.Code != http.StatusOK || out.Value != in.Value || s.uid != "" && s.uid != out.UID {
			return false, s
		}
		if in.Value == s.value {
			return s.fits(out), pinned // a no-op keeps the resourceVersion
		}
		return out.RV > s.rv, pinned
	case OpDelete:
		switch out.Code {
		case http.StatusNotFound:
			return !s.exists, s
		case http.StatusOK:
			return s.exists && (s.uid == "" || s.uid == out.UID), state{rv: s.rv}
		}
	}
	return false, s
}

// mayApply is the state after a write without an answer, placed where
// it takes effect if it can; the checker places it after everything else
// when it never took effect.
func mayApply(s state, in Input) state {
	switch in.Kind {
	case OpCreate:
		if !s.exists {
			return state{exists: true, value: in.Value, rv: s.rv}
		}
	case OpUpdate:
		if !s.exists || in.Value == s.value {
			return s
		}
		if in.RV != 0 {
			if s.known && s.rv != in.RV || !s.known && in.RV <= s.rv {
				return s
			}
			s.rv = in.RV
		}
		return state{exists: true, value: in.Value, rv: s.rv, uid: s.uid}
	case OpDelete:
		if s.exists {
			return state{rv: s.rv}
		}
	}
	return s
}

// Model is the per-ConfigMap register: operations are partitioned by
// Input.Key, and each key starts absent. Its Metadata, if any, is printed
// in the visualization (the server the operation went to).
var Model = porcupine.Model{
	Partition: func(history []porcupine.Operation) [][]porcupine.Operation {
		byKey := map[string][]porcupine.Operation{}
		var keys []string
		for _, op := range history {
			k := op.Input.(Input).Key
			if _, ok := byKey[k]; !ok {
				keys = append(keys, k)
			}
			byKey[k] = append(byKey[k], op)
		}
		out := make([][]porcupine.Operation, 0, len(keys))
		for _, k := range keys {
			out = append(out, byKey[k])
		}
		return out
	},
	Init: func() any { return state{} },
	Step: step,
	DescribeOperation: func(input, output any) string {
		in, out := input.(Input), output.(Output)
		call := fmt.Sprintf("%s %s", in.Kind, in.Key)
		switch {
		case in.Kind == OpUpdate && in.RV != 0:
			call += fmt.Sprintf(" = %s if rv %d", in.Value, in.RV)
		case in.Kind == OpCreate || in.Kind == OpUpdate:
			call += " = " + in.Value
		}
		switch out.Code {
		case 0:
			return call + " -> no answer"
		case http.StatusOK, http.StatusCreated:
			if in.Kind == OpDelete {
				return fmt.Sprintf("%s -> %d uid %.8s", call, out.Code, out.UID)
			}
			return fmt.Sprintf("%s -> %d %s rv %d uid %.8s", call, out.Code, out.Value, out.RV, out.UID)
		}
		return fmt.Sprintf("%s -> %d", call, out.Code)
	},
	DescribeState: func(st any) string {
		s := st.(state)
		switch {
		case !s.exists:
			return fmt.Sprintf("absent, next rv > %d", s.rv)
		case s.known:
			return fmt.Sprintf("%s rv %d uid %.8s", s.value, s.rv, s.uid)
		}
		return fmt.Sprintf("%s rv > %d uid %.8s", s.value, s.rv, s.uid)
	},
	DescribeOperationMetadata: func(info any) string {
		if info == nil {
			return ""
		}
		return fmt.Sprint(info)
	},
}
