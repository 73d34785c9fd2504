package audit

import (
	"errors"
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// errNoFallocate: the file system cannot allocate space ahead.
var errNoFallocate = errors.New("fallocate not supported")

// preallocate allocates n bytes of f from off without changing its size
// (fallocate(2) with FALLOC_FL_KEEP_SIZE): writes there then cannot fail
// for want of space.
func preallocate(f *os.File, off, n int64) error {
	for {
		err := unix.Fallocate(int(f.Fd()), unix.FALLOC_FL_KEEP_SIZE, off, n)
		switch {
		case err == unix.EINTR:
			continue
		case err == unix.EOPNOTSUPP || err == unix.ENOSYS:
			return errNoFallocate
		case err == unix.ENOSPC:
			return fmt.Errorf("%w: %d bytes past its end", errNoRoom, n)
		}
		return err
	}
}

// punch frees f's blocks from off for n bytes, its size unchanged.
func punch(f *os.File, off, n int64) error {
	return unix.Fallocate(int(f.Fd()), unix.FALLOC_FL_PUNCH_HOLE|unix.FALLOC_FL_KEEP_SIZE, off, n)
}

// freeSpace checks that f's file system has need bytes free for an
// unprivileged writer: the weaker guard where nothing can be allocated
// ahead.
func freeSpace(f *os.File, need int64) error {
	var st unix.Statfs_t
	if err := unix.Fstatfs(int(f.Fd()), &st); err != nil {
		return err
	}
	if free := int64(st.Bavail) * int64(st.Bsize); free < need {
		return fmt.Errorf("%w: %d bytes free, %d wanted", errNoRoom, free, need)
	}
	return nil
}
