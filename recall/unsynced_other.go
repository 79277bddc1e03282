//go:build !linux

package recall

import (
	"errors"
	"io/fs"
	"os"
)

// syncFiles makes the files' data durable, one fsync each.
func syncFiles(_ string, paths []string) error { return syncEach(paths) }

// syncEach fsyncs each file (where there is no syncfs).
func syncEach(paths []string) error {
	for _, p := range paths {
		f, err := os.Open(p)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return err
		}
		err = f.Sync()
		f.Close()
		if err != nil {
			return err
		}
	}
	return nil
}
