//go:build !linux

package confine

import "os"

// Without renameat2, the rewrite falls back to a rename it checks afterwards.
func exchange(dirfd int, a, b string) error { return ErrExchangeUnsupported }

func renameNoReplace(fromfd int, a string, tofd int, b string) error { return ErrExchangeUnsupported }

func heldForWriting(f *os.File) (held, ok bool) { return false, false }
