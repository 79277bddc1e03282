package confine

import (
	"os"
	"runtime"

	"golang.org/x/sys/unix"
)

func exchange(dirfd int, a, b string) error {
	err := unix.Renameat2(dirfd, a, dirfd, b, unix.RENAME_EXCHANGE)
	if err == unix.EINVAL || err == unix.ENOSYS || err == unix.EOPNOTSUPP {
		return ErrExchangeUnsupported
	}
	return err
}

func renameNoReplace(fromfd int, a string, tofd int, b string) error {
	err := unix.Renameat2(fromfd, a, tofd, b, unix.RENAME_NOREPLACE)
	if err == unix.EINVAL || err == unix.ENOSYS || err == unix.EOPNOTSUPP {
		return ErrExchangeUnsupported
	}
	return err
}

func heldForWriting(f *os.File) (held, ok bool) {
	fd := int(f.Fd())
	defer runtime.KeepAlive(f)
	_, err := unix.FcntlInt(uintptr(fd), unix.F_SETLEASE, unix.F_RDLCK)
	switch err {
	case nil:
		// Granted: nobody writes it. Give the lease back at once, so no
		// opener ever waits on memwatch.
		_, _ = unix.FcntlInt(uintptr(fd), unix.F_SETLEASE, unix.F_UNLCK)
		return false, true
	case unix.EAGAIN, unix.EBUSY:
		return true, true
	}
	return false, false
}
