package recall

import (
	"os"

	"golang.org/x/sys/unix"
)

func memfd() (*os.File, error) {
	fd, err := unix.MemfdCreate("memwatch-gz", unix.MFD_CLOEXEC)
	if err != nil {
		return nil, err
	}
	return os.NewFile(uintptr(fd), "memwatch-gz"), nil
}
