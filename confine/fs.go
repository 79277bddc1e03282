package confine

import (
	"errors"
	"io/fs"
	"os"
	"path"
	"slices"
	"strings"
)

// rootFS is a Root as an fs.FS: names are slash-separated and relative, a
// file is opened only if the owner may read it, a directory only if the
// owner may list it.
type rootFS struct{ r *Root }

func (f rootFS) name(op, name string) (string, error) {
	if !fs.ValidPath(name) {
		return "", &fs.PathError{Op: op, Path: name, Err: fs.ErrInvalid}
	}
	return name, nil
}

func (f rootFS) Open(name string) (fs.File, error) {
	name, err := f.name("open", name)
	if err != nil {
		return nil, err
	}
	var file *os.File
	if err := f.r.as(func() (err error) { file, err = f.r.os.OpenFile(name, openFlags, 0); return err }); err != nil {
		return nil, err
	}
	fi, err := file.Stat()
	if err != nil {
		file.Close()
		return nil, err
	}
	want := uint32(mayRead)
	if fi.IsDir() {
		want |= mayExec
	} else if !fi.Mode().IsRegular() {
		file.Close()
		return nil, &fs.PathError{Op: "open", Path: name, Err: ErrNotRegular}
	}
	if !f.r.owner.may(fi, want) {
		file.Close()
		return nil, &fs.PathError{Op: "open", Path: name, Err: ErrDenied}
	}
	return file, nil
}

func (f rootFS) Stat(name string) (fs.FileInfo, error) {
	name, err := f.name("stat", name)
	if err != nil {
		return nil, err
	}
	var fi fs.FileInfo
	err = f.r.as(func() (err error) { fi, err = f.r.os.Stat(name); return err })
	return fi, err
}

func (f rootFS) ReadDir(name string) ([]fs.DirEntry, error) {
	name, err := f.name("readdir", name)
	if err != nil {
		return nil, err
	}
	ents, err := f.r.ReadDir(name)
	var pe *fs.PathError
	if err != nil && !errors.As(err, &pe) {
		return nil, &fs.PathError{Op: "readdir", Path: name, Err: err}
	}
	return ents, err
}

func sortEntries(ents []fs.DirEntry) {
	slices.SortFunc(ents, func(a, b fs.DirEntry) int { return strings.Compare(a.Name(), b.Name()) })
}

// IsTemp reports whether a name is one of memwatch's temporary files.
func IsTemp(name string) bool { return strings.Contains(path.Base(name), TempMarker) }

// TempMarker is part of the name of every temporary file memwatch creates.
const TempMarker = ".memwatch-tmp-"

var _ = os.ErrNotExist
