//go:build !linux

package audit

import (
	"errors"
	"os"
)

// errNoFallocate: nothing is allocated ahead on this system.
var errNoFallocate = errors.New("fallocate not supported")

func preallocate(*os.File, int64, int64) error { return errNoFallocate }

func punch(*os.File, int64, int64) error { return nil }

// freeSpace cannot tell here: writes are admitted, and a record that
// then fails is taken back whole (Log.write).
func freeSpace(*os.File, int64) error { return nil }
