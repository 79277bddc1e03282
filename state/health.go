package state

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
)

// What a state directory that cannot be written looks like, and how the
// daemon knows it can write there again.

// probeFree is the free space a probe wants before memwatch writes again.
const probeFree = 4 << 20

// WriteFailed reports whether err is a failed write of memwatch's
// state for want of space or a writable, working disk (not a refusal or a
// bug): ENOSPC, EDQUOT, EROFS, EIO, and SQLite's full, I/O error and
// read-only codes.
func WriteFailed(err error) bool {
	if err == nil {
		return false
	}
	for _, e := range []error{syscall.ENOSPC, syscall.EDQUOT, syscall.EROFS, syscall.EIO} {
		if errors.Is(err, e) {
			return true
		}
	}
	var coded interface{ Code() int }
	if errors.As(err, &coded) {
		switch coded.Code() & 0xff {
		case 13, 10, 8: // SQLITE_FULL, SQLITE_IOERR, SQLITE_READONLY
			return true
		}
	}
	return false
}

// ProbeDir reports whether memwatch may write dir again: room for it
// (probeFree, statfs) and a file written, synced and removed.
func ProbeDir(dir string) error {
	var fs syscall.Statfs_t
	if err := syscall.Statfs(dir, &fs); err != nil {
		return err
	}
	if free := int64(fs.Bavail) * int64(fs.Bsize); free < probeFree {
		return fmt.Errorf("%d bytes free", free)
	}
	p := filepath.Join(dir, ".memwatch-probe")
	f, err := os.OpenFile(p, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return err
	}
	defer os.Remove(p)
	_, err = f.Write(make([]byte, 64<<10))
	if serr := f.Sync(); err == nil {
		err = serr
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}
