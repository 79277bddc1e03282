package confine

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// Dir is an open directory inside a root. The safe rewrite's leaf
// operations run on it with single-component names: they act on that
// directory entry and nothing else, whatever an agent does to the path
// around it meanwhile.
type Dir struct {
	root *Root
	rel  string
	f    *os.File
	fd   int
}

// ErrExchangeUnsupported means the file system cannot exchange two names
// atomically (renameat2 RENAME_EXCHANGE).
var ErrExchangeUnsupported = errors.New("atomic exchange not supported here")

// Dir opens an existing directory of the root.
func (r *Root) Dir(rel string) (*Dir, error) {
	rel, err := clean(rel)
	if err != nil {
		return nil, err
	}
	var f *os.File
	if err := r.as(func() (err error) {
		f, err = r.os.OpenFile(rel, os.O_RDONLY|syscall.O_DIRECTORY|nonBlocking, 0)
		return err
	}); err != nil {
		return nil, wrap("open directory", rel, err)
	}
	return &Dir{root: r, rel: rel, f: f, fd: int(f.Fd())}, nil
}

// MkdirAll opens the directory rel, creating what is missing. A created
// directory belongs to the root's owner and gets the root directory's mode;
// it is created only where the owner may create it.
func (r *Root) MkdirAll(rel string) (*Dir, error) {
	rel, err := clean(rel)
	if err != nil {
		return nil, err
	}
	if d, err := r.Dir(rel); err == nil || !errors.Is(err, fs.ErrNotExist) {
		return d, err
	}
	d, err := r.Dir(".")
	if err != nil {
		return nil, err
	}
	for _, name := range strings.Split(rel, string(filepath.Separator)) {
		next, err := d.subdir(name)
		d.Close()
		if err != nil {
			return nil, err
		}
		d = next
	}
	d.rel = rel
	return d, nil
}

// subdir opens (creating it when missing) the directory name in d.
func (d *Dir) subdir(name string) (*Dir, error) {
	rel := filepath.Join(d.rel, name)
	// An existing entry, even an in-root symlink to a directory, is resolved
	// by the root: it may lead anywhere inside, never out.
	if next, err := d.root.Dir(rel); err == nil || !errors.Is(err, fs.ErrNotExist) {
		return next, err
	}
	fi, err := d.f.Stat()
	if err != nil {
		return nil, wrap("stat", d.rel, err)
	}
	if !d.root.owner.may(fi, mayWrite|mayExec) {
		return nil, fmt.Errorf("create directory %s: %w (uid %d cannot write %s)", rel, ErrDenied, d.root.owner.UID, d.rel)
	}
	err = d.root.as(func() error { return unix.Mkdirat(d.fd, name, 0o700) })
	if err != nil && !errors.Is(err, syscall.EEXIST) {
		return nil, fmt.Errorf("create directory %s: %w", rel, err)
	}
	created := err == nil
	var fd int
	err = d.root.as(func() (err error) {
		fd, err = unix.Openat(d.fd, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		return err
	})
	if err != nil {
		if !created {
			return d.root.Dir(rel) // an agent made it meanwhile (maybe as a symlink): resolve it in the root
		}
		return nil, fmt.Errorf("open directory %s: %w", rel, err)
	}
	f := os.NewFile(uintptr(fd), d.root.Join(rel))
	if created {
		// Give it to the owner only if it still is the empty directory we
		// made: memwatch never chowns something an agent put in its place.
		var st unix.Stat_t
		if err := unix.Fstat(fd, &st); err != nil {
			f.Close()
			return nil, fmt.Errorf("stat %s: %w", rel, err)
		}
		if int(st.Uid) == os.Geteuid() || int(st.Uid) == d.root.owner.UID {
			if err := d.root.own(f, d.root.dirMode, d.root.owner.UID, d.root.owner.GID); err != nil {
				f.Close()
				return nil, fmt.Errorf("create directory %s: %w", rel, err)
			}
		}
	}
	return &Dir{root: d.root, rel: rel, f: f, fd: fd}, nil
}

// own sets mode and owner on an open descriptor memwatch created, as the
// root's owner: what it creates is the owner's already, and an owner or
// group the owner could not give a file itself (another user's, a group it
// is not in) is left as it is (the kernel refuses it).
func (r *Root) own(f *os.File, mode fs.FileMode, uid, gid int) error {
	return r.as(func() error {
		if err := f.Chmod(mode); err != nil {
			return err
		}
		if !r.chown {
			return nil
		}
		fi, err := f.Stat()
		if err != nil {
			return err
		}
		if st, ok := fi.Sys().(*syscall.Stat_t); ok && int(st.Uid) == uid && int(st.Gid) == gid {
			return nil
		}
		if err := f.Chown(uid, gid); err != nil {
			if errors.Is(err, fs.ErrPermission) {
				return nil
			}
			return err
		}
		// chown clears set-id bits; set the mode again exactly.
		return f.Chmod(mode)
	})
}

// Own gives an open file memwatch created the given owner and mode.
func (d *Dir) Own(f *os.File, mode fs.FileMode, uid, gid int) error {
	return d.root.own(f, mode, uid, gid)
}

// Close releases the directory.
func (d *Dir) Close() error {
	if d == nil || d.f == nil {
		return nil
	}
	return d.f.Close()
}

// Rel is the root-relative path of name in this directory.
func (d *Dir) Rel(name string) string { return filepath.Join(d.rel, name) }

// Root is the root the directory belongs to.
func (d *Dir) Root() *Root { return d.root }

// Stat describes the owner permissions of the directory itself.
func (d *Dir) Stat() (fs.FileInfo, error) { return d.f.Stat() }

// MayCreate reports whether the owner may create and remove names here.
func (d *Dir) MayCreate() bool {
	fi, err := d.f.Stat()
	return err == nil && d.root.owner.may(fi, mayWrite|mayExec)
}

func leaf(name string) error {
	if name == "" || name == "." || name == ".." || strings.ContainsRune(name, '/') {
		return fmt.Errorf("%q: %w (not a single name)", name, ErrOutside)
	}
	return nil
}

// Open opens name in the directory without following a symlink there. A
// read-only open never blocks on a FIFO; anything but a regular file is
// refused, and so is a file the owner may not read (or, for a write, write).
func (d *Dir) Open(name string, flag int) (*os.File, error) {
	if err := leaf(name); err != nil {
		return nil, err
	}
	extra := unix.O_NOFOLLOW | unix.O_CLOEXEC | unix.O_NOCTTY
	if flag&(os.O_WRONLY|os.O_RDWR) == 0 {
		extra |= unix.O_NONBLOCK
	}
	var fd int
	err := d.root.as(func() (err error) { fd, err = unix.Openat(d.fd, name, flag|extra, 0); return err })
	if err != nil {
		switch err {
		case unix.ELOOP:
			return nil, fmt.Errorf("open %s: is a symbolic link: %w", d.Rel(name), ErrNotRegular)
		case unix.EACCES, unix.EPERM:
			return nil, fmt.Errorf("open %s: %w (the kernel refused uid %d: %v)", d.Rel(name), ErrDenied, d.root.owner.UID, err)
		}
		return nil, &fs.PathError{Op: "open", Path: d.Rel(name), Err: err}
	}
	f := os.NewFile(uintptr(fd), d.root.Join(d.Rel(name)))
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, err
	}
	if !fi.Mode().IsRegular() {
		f.Close()
		return nil, fmt.Errorf("open %s: %w", d.Rel(name), ErrNotRegular)
	}
	want := uint32(mayRead)
	if flag&(os.O_WRONLY|os.O_RDWR) != 0 {
		want = mayWrite
		if flag&os.O_RDWR != 0 {
			want |= mayRead
		}
	}
	if !d.root.owner.may(fi, want) {
		f.Close()
		return nil, fmt.Errorf("open %s: %w (as uid %d)", d.Rel(name), ErrDenied, d.root.owner.UID)
	}
	return f, nil
}

// ReadFile reads name in the directory (see Open), up to the root's limit.
func (d *Dir) ReadFile(name string) ([]byte, fs.FileInfo, error) {
	f, err := d.Open(name, os.O_RDONLY)
	if err != nil {
		return nil, nil, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, nil, err
	}
	b, err := readAll(f, fi, d.root.maxFile, d.Rel(name))
	return b, fi, err
}

// Lstat describes the entry name without following it.
func (d *Dir) Lstat(name string) (*unix.Stat_t, error) {
	if err := leaf(name); err != nil {
		return nil, err
	}
	var st unix.Stat_t
	if err := d.root.as(func() error { return unix.Fstatat(d.fd, name, &st, unix.AT_SYMLINK_NOFOLLOW) }); err != nil {
		return nil, &fs.PathError{Op: "lstat", Path: d.Rel(name), Err: err}
	}
	return &st, nil
}

// CreateTemp creates a new empty file named after base with the temp
// marker and tag in its name, readable and writable only by memwatch until
// the caller gives it away with Own.
func (d *Dir) CreateTemp(base, tag string) (*os.File, string, error) {
	if !d.MayCreate() {
		return nil, "", fmt.Errorf("create a file in %s: %w (uid %d)", d.rel, ErrDenied, d.root.owner.UID)
	}
	var rnd [6]byte
	_, _ = rand.Read(rnd[:])
	if len(base) > 120 {
		base = base[:120]
	}
	name := "." + base + TempMarker + tag + hex.EncodeToString(rnd[:])
	var fd int
	err := d.root.as(func() (err error) {
		fd, err = unix.Openat(d.fd, name, unix.O_RDWR|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
		return err
	})
	if err != nil {
		return nil, "", &fs.PathError{Op: "create", Path: d.Rel(name), Err: err}
	}
	return os.NewFile(uintptr(fd), d.root.Join(d.Rel(name))), name, nil
}

// Link gives the file at name a second name in dir to, failing if that
// name exists: it never replaces anything.
func (d *Dir) Link(name string, to *Dir, newname string) error {
	if err := leaf(name); err != nil {
		return err
	}
	if err := leaf(newname); err != nil {
		return err
	}
	if err := d.root.as(func() error { return unix.Linkat(d.fd, name, to.fd, newname, 0) }); err != nil {
		return &os.LinkError{Op: "link", Old: d.Rel(name), New: to.Rel(newname), Err: err}
	}
	return nil
}

// Unlink removes the name (never a directory, never what a symlink points to).
func (d *Dir) Unlink(name string) error {
	if err := leaf(name); err != nil {
		return err
	}
	if err := d.root.as(func() error { return unix.Unlinkat(d.fd, name, 0) }); err != nil {
		return &fs.PathError{Op: "unlink", Path: d.Rel(name), Err: err}
	}
	return nil
}

// Sync makes the directory's entries durable.
func (d *Dir) Sync() error {
	if err := d.f.Sync(); err != nil {
		return fmt.Errorf("sync directory %s: %w", d.rel, err)
	}
	return nil
}

// Move renames name to newname in dir to without replacing anything there.
func (d *Dir) Move(name string, to *Dir, newname string) error {
	if err := leaf(name); err != nil {
		return err
	}
	if err := leaf(newname); err != nil {
		return err
	}
	err := d.root.as(func() error { return renameNoReplace(d.fd, name, to.fd, newname) })
	if errors.Is(err, ErrExchangeUnsupported) {
		// No RENAME_NOREPLACE: link, then unlink, which also never replaces.
		if err := d.Link(name, to, newname); err != nil {
			return err
		}
		return d.Unlink(name)
	}
	if err != nil {
		return &os.LinkError{Op: "rename", Old: d.Rel(name), New: to.Rel(newname), Err: err}
	}
	return nil
}

// Exchange atomically swaps the entries a and b of the directory; both
// files survive, under each other's names.
func (d *Dir) Exchange(a, b string) error {
	if err := leaf(a); err != nil {
		return err
	}
	if err := leaf(b); err != nil {
		return err
	}
	return d.root.as(func() error { return exchange(d.fd, a, b) })
}

// HeldForWriting reports whether another process has the file open for
// writing. It asks the kernel for a read lease on f (open read-only), which
// is granted only when nobody holds the file open for writing, and gives it
// back at once. ok is false when the kernel cannot say (no leases here, or
// the file is not the owner's: only a file's owner may take a lease on it).
func (r *Root) HeldForWriting(f *os.File) (held, ok bool) {
	r.as(func() error { held, ok = heldForWriting(f); return nil })
	return held, ok
}

// Replace renames a over b in the directory, replacing b. Only the
// fallback of the safe rewrite uses it, after giving b a second name.
func (d *Dir) Replace(a, b string) error {
	if err := leaf(a); err != nil {
		return err
	}
	if err := leaf(b); err != nil {
		return err
	}
	if err := d.root.as(func() error { return unix.Renameat(d.fd, a, d.fd, b) }); err != nil {
		return &os.LinkError{Op: "rename", Old: d.Rel(a), New: d.Rel(b), Err: err}
	}
	return nil
}

// DirNoLink opens an existing directory of the root one name at a time,
// following no symbolic link on the way (Dir lets os.Root resolve one
// inside the root): for a file an agent names, which its user may have
// made a link to anywhere it can reach.
func (r *Root) DirNoLink(rel string) (*Dir, error) {
	rel, err := clean(rel)
	if err != nil {
		return nil, err
	}
	d, err := r.Dir(".")
	if err != nil || rel == "." {
		return d, err
	}
	for _, name := range strings.Split(rel, string(filepath.Separator)) {
		var fd int
		err := r.as(func() (err error) {
			fd, err = unix.Openat(d.fd, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC|unix.O_NONBLOCK, 0)
			return err
		})
		next := filepath.Join(d.rel, name)
		d.Close()
		switch {
		case errors.Is(err, unix.ELOOP), errors.Is(err, unix.ENOTDIR):
			return nil, fmt.Errorf("open directory %s: %w (a symbolic link or not a directory)", next, ErrNotRegular)
		case err != nil:
			return nil, wrap("open directory", next, &fs.PathError{Op: "open", Path: next, Err: err})
		}
		d = &Dir{root: r, rel: next, f: os.NewFile(uintptr(fd), r.Join(next)), fd: fd}
	}
	return d, nil
}

// ReadAgentFile reads the file rel under dir that an agent keeps outside
// any store (Crush's projects.json, which init reads), as dir's owner:
// reached without a symbolic link, opened without blocking on a FIFO or
// device, refused unless a regular file the owner may read, and at most
// limit bytes (ErrTooLarge past it).
func ReadAgentFile(dir, rel string, limit int64) ([]byte, error) {
	root, err := Open(dir, Options{MaxFileSize: limit})
	if err != nil {
		return nil, err
	}
	defer root.Close()
	d, err := root.DirNoLink(filepath.Dir(rel))
	if err != nil {
		return nil, err
	}
	defer d.Close()
	b, _, err := d.ReadFile(filepath.Base(rel))
	return b, err
}
