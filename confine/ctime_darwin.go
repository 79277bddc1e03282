package confine

import "syscall"

// ChangeTime is a file's change time, in nanoseconds: what no write,
// truncation, rename over, chmod or utimes leaves as it was.
func ChangeTime(st *syscall.Stat_t) int64 { return st.Ctimespec.Nano() }
