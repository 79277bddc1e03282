package rewrite

import (
	"errors"

	"golang.org/x/sys/unix"
)

// exchange atomically swaps the two paths, so the old target is never
// unlinked before we have checked it. ok is false when the filesystem cannot
// exchange (then the caller falls back to rename).
func exchange(a, b string) (ok bool, err error) {
	err = unix.Renameat2(unix.AT_FDCWD, a, unix.AT_FDCWD, b, unix.RENAME_EXCHANGE)
	if errors.Is(err, unix.EINVAL) || errors.Is(err, unix.ENOSYS) || errors.Is(err, unix.EOPNOTSUPP) {
		return false, nil
	}
	return err == nil, err
}
