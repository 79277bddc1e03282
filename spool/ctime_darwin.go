package spool

import "syscall"

// ctimeOf is a file's change time, in nanoseconds.
func ctimeOf(st *syscall.Stat_t) int64 { return st.Ctimespec.Nano() }

// mtimeOf is a file's modification time, in nanoseconds.
func mtimeOf(st *syscall.Stat_t) int64 { return st.Mtimespec.Nano() }
