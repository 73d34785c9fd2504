//go:build !objwatch_debugfault

package objects

import "fmt"

// debugFault is never armed in this build: the test faults are compiled
// in only with -tags objwatch_debugfault (see debugfault.go).
type debugFault struct{}

func newDebugFault(name string) (*debugFault, error) {
	if name == "" {
		return nil, nil
	}
	return nil, fmt.Errorf("objects: debug fault %q: this objwatch is built without -tags %s", name, DebugFaultTag)
}

// wrap returns src: there is no fault to arm.
func (*debugFault) wrap(src Source, _ *Request, _ watchRequest) Source { return src }
