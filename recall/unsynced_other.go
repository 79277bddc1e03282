//go:build !linux

package recall

// syncFiles makes the files' data durable, one fsync each.
func syncFiles(_ string, paths []string) error { return syncEach(paths) }
