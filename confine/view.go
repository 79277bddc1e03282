package confine

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
)

// View is one directory of a root opened for statting and reading many of
// its files: each costs a single-name system call on the directory's
// descriptor instead of a walk from the root. A name that is a symlink is
// resolved by the root, as Root.Stat and Root.OpenRead do.
type View struct {
	root *Root
	rel  string
	os   *os.Root
}

// View opens the directory rel of the root.
func (r *Root) View(rel string) (*View, error) {
	rel, err := clean(rel)
	if err != nil {
		return nil, err
	}
	if r.os == nil {
		return nil, fmt.Errorf("open %s: %w (a root of another host)", r.Join(rel), fs.ErrNotExist)
	}
	var sub *os.Root
	err = r.as(func() (err error) { sub, err = r.os.OpenRoot(rel); return err })
	if err != nil {
		return nil, wrap("open directory", rel, err)
	}
	return &View{root: r, rel: rel, os: sub}, nil
}

// Close closes the directory.
func (v *View) Close() error { return v.os.Close() }

func (v *View) name(name string) (string, error) {
	if name == "" || name == "." || name == ".." || filepath.Base(name) != name {
		return "", &fs.PathError{Op: "open", Path: name, Err: fs.ErrInvalid}
	}
	return name, nil
}

// Stat stats the entry name of the directory, following a symlink inside
// the root.
func (v *View) Stat(name string) (fs.FileInfo, error) {
	name, err := v.name(name)
	if err != nil {
		return nil, err
	}
	var fi fs.FileInfo
	err = v.root.as(func() (err error) { fi, err = v.os.Lstat(name); return err })
	if err == nil && fi.Mode()&fs.ModeSymlink != 0 {
		return v.root.Stat(filepath.Join(v.rel, name))
	}
	return fi, wrap("stat", filepath.Join(v.rel, name), err)
}

// OpenRead opens the entry name as Root.OpenRead would.
func (v *View) OpenRead(name string) (*os.File, fs.FileInfo, error) {
	name, err := v.name(name)
	if err != nil {
		return nil, nil, err
	}
	rel := filepath.Join(v.rel, name)
	var f *os.File
	err = v.root.as(func() (err error) { f, err = v.os.OpenFile(name, openFlags|syscall.O_NOFOLLOW, 0); return err })
	if errors.Is(err, syscall.ELOOP) {
		return v.root.OpenRead(rel)
	}
	if err != nil {
		return nil, nil, wrap("open", rel, err)
	}
	return v.root.checkRead(f, rel)
}
