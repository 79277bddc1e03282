//go:build !linux

package recall

import "syscall"

// mmapFlags map an index (see mmap_linux.go).
const mmapFlags = syscall.MAP_SHARED
