//go:build !linux

package rewrite

import "strconv"

// Holder is a process that has a file open for writing.
type Holder struct {
	PID     int
	Command string
}

func (h Holder) String() string { return "pid " + strconv.Itoa(h.PID) + " (" + h.Command + ")" }

func writers(dev, ino uint64) []Holder { return nil }
