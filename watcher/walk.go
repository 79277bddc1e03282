package watcher

import (
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
)

// walk is filepath.WalkDir without its cost in memory: a directory's
// entries are read a batch at a time and not sorted, so a directory of a
// million session logs is walked with a few hundred entries in memory,
// not a million. fn is called for dir itself, then for every entry below
// it, directories before what they hold; it returns filepath.SkipDir (for a
// directory: do not enter it) or filepath.SkipAll. A directory that cannot
// be read (vanished, not the owner's to list) is passed to fn with its
// error and skipped. Symbolic links are entries, never entered.
func walk(dir string, fn func(p string, d fs.DirEntry, err error) error) error {
	fi, err := os.Lstat(dir)
	if err != nil {
		return fn(dir, nil, err)
	}
	if err := fn(dir, fs.FileInfoToDirEntry(fi), nil); err != nil || !fi.IsDir() {
		if errors.Is(err, filepath.SkipDir) || errors.Is(err, filepath.SkipAll) {
			return nil
		}
		return err
	}
	type frame struct {
		f    *os.File
		path string
	}
	var stack []frame
	defer func() {
		for _, fr := range stack {
			fr.f.Close()
		}
	}()
	open := func(p string, d fs.DirEntry) error {
		// O_NONBLOCK: a FIFO swapped in for the directory listed is not
		// waited on (O_DIRECTORY refuses it), and os.OpenFile does not
		// toggle the descriptor's mode (four fcntl calls a directory).
		f, err := os.OpenFile(p, os.O_RDONLY|syscall.O_DIRECTORY|syscall.O_NONBLOCK, 0)
		if err != nil {
			if err := fn(p, d, err); errors.Is(err, filepath.SkipAll) {
				return err
			}
			return nil
		}
		stack = append(stack, frame{f, p})
		return nil
	}
	if err := open(dir, fs.FileInfoToDirEntry(fi)); err != nil {
		return nil
	}
	for len(stack) > 0 {
		top := stack[len(stack)-1]
		ents, rerr := top.f.ReadDir(256)
		if len(ents) == 0 || rerr != nil && !errors.Is(rerr, io.EOF) && len(ents) == 0 {
			top.f.Close()
			stack = stack[:len(stack)-1]
			continue
		}
		for _, d := range ents {
			p := filepath.Join(top.path, d.Name())
			err := fn(p, d, nil)
			switch {
			case errors.Is(err, filepath.SkipAll):
				return nil
			case errors.Is(err, filepath.SkipDir):
				continue
			case err != nil:
				return err
			}
			if d.IsDir() {
				if err := open(p, d); err != nil {
					return nil
				}
			}
		}
	}
	return nil
}
