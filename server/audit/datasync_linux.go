package audit

import (
	"os"

	"golang.org/x/sys/unix"
)

// datasync flushes f's data and the metadata needed to read it back
// (its size), not its timestamps: fdatasync(2).
func datasync(f *os.File) error {
	for {
		err := unix.Fdatasync(int(f.Fd()))
		if err != unix.EINTR {
			return err
		}
	}
}

// startWriteback asks the kernel to start writing f's dirty pages
// without waiting for them (sync_file_range(2), SYNC_FILE_RANGE_WRITE):
// it commits nothing, so a later fdatasync has less left to write. Best
// effort: an error only means the fdatasync does all the work.
func startWriteback(f *os.File) {
	_ = unix.SyncFileRange(int(f.Fd()), 0, 0, unix.SYNC_FILE_RANGE_WRITE)
}
