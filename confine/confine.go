// Package confine is how memwatch touches the files of a store root.
//
// memwatch runs as root beside agents that own their directories and may be
// careless or hostile. A Root guarantees, for every operation made through
// it (and layouts make no other):
//   - nothing outside the root directory is read, created, changed or
//     removed: names are resolved by os.Root, one component at a time with
//     O_NOFOLLOW, and a symlink is followed only while it stays inside the
//     root; the leaf operations of the safe rewrite (exchange, link, unlink,
//     create) run on a directory descriptor with a single-component name, so
//     no path string is joined and resolved again between check and use;
//   - the root itself was a real directory when it was opened (a store root
//     that is a symlink, or that resolves outside the directory its glob
//     names, is refused) and the handle stays on that directory;
//   - memwatch reads only what the root's owner could read: a file the
//     owner has no read permission for (a root-only file that found its way
//     into the root) is refused, so no byte of it reaches the agent's files;
//   - what memwatch creates belongs to the root's owner: a new directory gets
//     the owner and the root directory's mode, a new file the owner and the
//     mode its caller derives from the file it replaces or preserves; owner
//     and mode are set with fchown/fchmod on the open descriptor, never by
//     path;
//   - bounded loads: ReadFile refuses a file over the root's MaxFileSize, and
//     opening never blocks on a FIFO or device an agent left in the root.
package confine

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
)

// DefaultMaxFileSize is the largest file a rule loads whole.
const DefaultMaxFileSize = 256 << 20

// Errors a caller may branch on. Each is wrapped with the path it concerns.
var (
	// ErrSymlinkRoot means the configured root is a symbolic link.
	ErrSymlinkRoot = errors.New("store root is a symbolic link; memwatch does not follow it")
	// ErrOutside means a path is, or resolves to, a place outside the root
	// (or a root outside the directory its glob names).
	ErrOutside = errors.New("path leads outside the store root")
	// ErrDenied means the root's owner has no permission for the file, so
	// memwatch, acting for the owner, does not touch it.
	ErrDenied = errors.New("the root's owner has no permission for it")
	// ErrTooLarge means a file is over the size memwatch loads.
	ErrTooLarge = errors.New("file is larger than memwatch loads")
	// ErrNotRegular means the path is not a regular file (a directory, FIFO, device or socket).
	ErrNotRegular = errors.New("not a regular file")
)

// Options tune Open.
type Options struct {
	// Within lists directories the root must resolve inside: the static
	// directories of the store's globs. Empty skips the check (roots named
	// on the command line).
	Within []string
	// Owner, when set, is the identity memwatch acts as instead of the root
	// directory's owner (a store's user: and group: keys).
	Owner *Identity
	// MaxFileSize bounds ReadFile; 0 means DefaultMaxFileSize.
	MaxFileSize int64
	// Prefixes, when set, keeps the trusted part of the paths walked
	// for the batch of opens it is given to (see Prefixes).
	Prefixes *Prefixes
}

// Root is an open store root. It is safe for concurrent use.
type Root struct {
	path    string // the root as configured: a directory, or a database file
	dir     string // the directory os is open on (path, or a file root's directory)
	leaf    string // a file root's name in dir; "" for a directory root
	os      *os.Root
	fileSt  *syscall.Stat_t
	owner   Identity
	dirMode fs.FileMode
	maxFile int64
	// chown is true when memwatch can give files away (it runs as root).
	chown bool
	// dev and ino identify the directory opened.
	dev, ino uint64
	// real is the directory's path with every link resolved (RealPath).
	real string
}

// ID identifies the root: its path, its directory as opened (a file
// root's: its directory's) and the user memwatch acts as in it. The
// journal, the spool and the versions record it, so undo, restore and
// every answer act only on the directory a change was captured in, even
// if another one takes its path since.
func (r *Root) ID() ID { return ID{Path: r.path, Dev: r.dev, Ino: r.ino, UID: r.owner.UID} }

// Open opens the directory at path as a store root. path must be absolute.
// It is reached from the directory of o.Within that holds it without
// following a symbolic link (see walk.go), first as memwatch to learn its
// owner, then as that owner (the kernel checks the owner may search every
// directory on the way), and both walks must reach the same directory.
func Open(p string, o Options) (*Root, error) {
	if !filepath.IsAbs(p) {
		abs, err := filepath.Abs(p)
		if err != nil {
			return nil, fmt.Errorf("open store root %s: %w", p, err)
		}
		p = abs
	}
	p = filepath.Clean(p)
	if !inWithin(p, o.Within) {
		return nil, fmt.Errorf("open store root %s: %w (%s)", p, ErrOutside, strings.Join(o.Within, ", "))
	}
	b, err := routeVia(p, o.Prefixes)
	if err != nil {
		return nil, fmt.Errorf("open store root %s: %w", p, err)
	}
	var owner Identity
	var before *syscall.Stat_t
	if o.Owner != nil {
		owner = *o.Owner
	} else {
		r, st, err := walkFrom(b, p, o.Prefixes, "")
		if err != nil {
			return nil, openError(p, err, Identity{UID: os.Geteuid()})
		}
		owner = identityOf(int(st.Uid), int(st.Gid))
		if owner.UID == 0 || os.Geteuid() != 0 {
			// Acting as the owner changes nothing: this walk is the one.
			return newRoot(b, p, r, st, owner, o), nil
		}
		r.Close()
		before = st
	}
	var r *os.Root
	var st *syscall.Stat_t
	err = actAs(owner, func() (err error) { r, st, err = walkFrom(b, p, o.Prefixes, owner.key()); return err })
	if err != nil {
		return nil, openError(p, err, owner)
	}
	// Both walks must reach the one directory: an agent that swapped it
	// in between gets nothing.
	if before != nil && (st.Dev != before.Dev || st.Ino != before.Ino) {
		r.Close()
		return nil, fmt.Errorf("open store root %s: %w (it was replaced while being opened)", p, ErrSymlinkRoot)
	}
	return newRoot(b, p, r, st, owner, o), nil
}

func newRoot(rt route, p string, r *os.Root, st *syscall.Stat_t, owner Identity, o Options) *Root {
	root := &Root{path: p, dir: p, real: rt.real(), os: r, dirMode: fs.FileMode(st.Mode) & fs.ModePerm, maxFile: o.MaxFileSize, chown: os.Geteuid() == 0, owner: owner,
		dev: uint64(st.Dev), ino: uint64(st.Ino)}
	if root.maxFile <= 0 {
		root.maxFile = DefaultMaxFileSize
	}
	return root
}

// openError says why the walk to root p failed, naming who was refused.
func openError(p string, err error, owner Identity) error {
	switch {
	case errors.Is(err, ErrSymlinkRoot), errors.Is(err, ErrSymlinkParent), errors.Is(err, ErrOutside):
		return err
	case errors.Is(err, fs.ErrPermission):
		// Name who was refused: the owner when memwatch acted as the
		// owner (as root), else this process's own user.
		if who := os.Geteuid(); who != 0 && who != owner.UID {
			return fmt.Errorf("open store root %s: permission denied: uid %d (running this command) cannot reach it; it belongs to uid %d: run as that user or as root", p, who, owner.UID)
		}
		return fmt.Errorf("open store root %s: %w (uid %d cannot reach it)", p, ErrDenied, owner.UID)
	}
	return fmt.Errorf("open store root %s: %w", p, unwrapPath(err))
}

// as runs fn with the root owner's file-system identity (see
// owner_linux.go): every file operation of this package on the root goes
// through it, so the kernel decides what the owner may touch.
func (r *Root) as(fn func() error) error { return actAs(r.owner, fn) }

// Do runs fn with the root owner's file-system identity on the calling
// thread: every file the kernel opens for fn (an app's SQLite database and
// its -wal and -shm files, which the driver opens by path, when it wants)
// is opened as the owner would open it. fn must not touch memwatch's own
// state, which the owner cannot reach.
func (r *Root) Do(fn func() error) error { return r.as(fn) }

// OpenFile opens a store root that is a single file (an app's SQLite
// database): the Root is its directory, reached as Open reaches a
// directory and limited to what that directory holds, and Leaf names the
// file, which must be a regular file, not a symlink. memwatch acts as the
// file's owner. Drivers that open the file by path check with SameFile
// afterwards that they opened this one.
func OpenFile(p string, o Options) (*Root, error) {
	p = filepath.Clean(p)
	dir, leaf := filepath.Dir(p), filepath.Base(p)
	if !inWithin(p, o.Within) {
		return nil, fmt.Errorf("open store root %s: %w (%s)", p, ErrOutside, strings.Join(o.Within, ", "))
	}
	b, err := routeVia(dir, o.Prefixes)
	if err != nil {
		return nil, fmt.Errorf("open store root %s: %w", p, err)
	}
	look := func() (*os.Root, *syscall.Stat_t, *syscall.Stat_t, error) {
		r, dst, err := walkDir(b, dir)
		if err != nil {
			return nil, nil, nil, err
		}
		fi, err := r.Lstat(leaf)
		switch {
		case err != nil:
			r.Close()
			return nil, nil, nil, err
		case fi.Mode()&fs.ModeSymlink != 0:
			r.Close()
			return nil, nil, nil, fmt.Errorf("%s: %w", p, ErrSymlinkRoot)
		case !fi.Mode().IsRegular():
			r.Close()
			return nil, nil, nil, fmt.Errorf("open store root %s: %w", p, ErrNotRegular)
		}
		return r, dst, fi.Sys().(*syscall.Stat_t), nil
	}
	r, dst, fst, err := look()
	if err != nil {
		return nil, openError(p, err, Identity{UID: os.Geteuid()})
	}
	// The file's owner is who memwatch acts as, in its directory too.
	owner := identityOf(int(fst.Uid), int(fst.Gid))
	if o.Owner != nil {
		owner = *o.Owner
	}
	if owner.UID != 0 && os.Geteuid() == 0 {
		r.Close()
		var dst2, fst2 *syscall.Stat_t
		err := actAs(owner, func() (err error) { r, dst2, fst2, err = look(); return err })
		if err != nil {
			return nil, openError(p, err, owner)
		}
		if dst2.Dev != dst.Dev || dst2.Ino != dst.Ino || fst2.Dev != fst.Dev || fst2.Ino != fst.Ino {
			r.Close()
			return nil, fmt.Errorf("open store root %s: %w (it was replaced while being opened)", p, ErrSymlinkRoot)
		}
		dst, fst = dst2, fst2
	}
	root := newRoot(b, dir, r, dst, owner, Options{MaxFileSize: o.MaxFileSize})
	root.path, root.leaf, root.fileSt = p, leaf, fst
	return root, nil
}

// Leaf is a file root's file name in its directory ("" for a directory root).
func (r *Root) Leaf() string { return r.leaf }

// SameFile reports an error unless the file root's path still names the
// file that was checked when it was opened: a driver that opened it by path
// in between then opened that very file.
func (r *Root) SameFile() error {
	if r.fileSt == nil {
		return nil
	}
	var fi fs.FileInfo
	err := r.as(func() (err error) { fi, err = r.os.Lstat(r.leaf); return err })
	if err != nil {
		return wrap("lstat", r.leaf, err)
	}
	st := fi.Sys().(*syscall.Stat_t)
	if fi.Mode()&fs.ModeSymlink != 0 || st.Dev != r.fileSt.Dev || st.Ino != r.fileSt.Ino {
		return fmt.Errorf("%s was replaced while memwatch opened it: %w", r.path, ErrSymlinkRoot)
	}
	return nil
}

// Within reports whether p is dir or lies below it (both clean and absolute).
func Within(dir, p string) bool {
	if dir == string(filepath.Separator) {
		return strings.HasPrefix(p, dir)
	}
	return p == dir || strings.HasPrefix(p, dir+string(filepath.Separator))
}

// Close releases the root's descriptor.
func (r *Root) Close() error {
	if r.os == nil {
		return nil // Detached
	}
	return r.os.Close()
}

// Path is the root's absolute path, for messages and the journal.
func (r *Root) Path() string { return r.path }

// Join is the absolute path of rel, for messages only: never open it.
func (r *Root) Join(rel string) string { return filepath.Join(r.dir, rel) }

// Owner is the identity memwatch acts as in this root.
func (r *Root) Owner() Identity { return r.owner }

// DirMode is the root directory's permission bits; new directories get them.
func (r *Root) DirMode() fs.FileMode { return r.dirMode }

// FileMode is the mode of a new file that derives from nothing: the root
// directory's read and write bits, without execute.
func (r *Root) FileMode() fs.FileMode { return r.dirMode & 0o666 }

// MaxFileSize is the largest file ReadFile loads.
func (r *Root) MaxFileSize() int64 { return r.maxFile }

// FS is the root as an fs.FS (for fs.Glob and fs.WalkDir); it follows
// symlinks only inside the root and reads nothing the owner could not.
func (r *Root) FS() fs.FS { return rootFS{r} }

// Rel turns an absolute path under the root into a root-relative one,
// lexically; a path outside is ErrOutside.
func (r *Root) Rel(abs string) (string, error) {
	if !filepath.IsAbs(abs) {
		return clean(abs)
	}
	rel, err := filepath.Rel(r.dir, filepath.Clean(abs))
	if err != nil || !filepath.IsLocal(rel) {
		if filepath.Clean(abs) == r.dir {
			return ".", nil
		}
		return "", fmt.Errorf("%s: %w (%s)", abs, ErrOutside, r.dir)
	}
	return rel, nil
}

// clean checks a root-relative name lexically: no absolute path, no "..".
func clean(rel string) (string, error) {
	if rel == "" || rel == "." {
		return ".", nil
	}
	if filepath.IsAbs(rel) || !filepath.IsLocal(rel) {
		return "", fmt.Errorf("%s: %w", rel, ErrOutside)
	}
	return filepath.Clean(rel), nil
}

// wrap turns os.Root's escape error into ErrOutside, keeping the rest.
func wrap(op, rel string, err error) error {
	if err == nil {
		return nil
	}
	if strings.Contains(err.Error(), "path escapes from parent") {
		return fmt.Errorf("%s %s: %w", op, rel, ErrOutside)
	}
	if errors.Is(err, fs.ErrPermission) {
		// The kernel refused the owner: a directory it cannot search, a
		// file it may not read or write.
		return fmt.Errorf("%s %s: %w (the kernel refused it: %v)", op, rel, ErrDenied, unwrapPath(err))
	}
	return fmt.Errorf("%s %s: %w", op, rel, unwrapPath(err))
}

// unwrapPath drops a PathError's own op and path (wrap says them).
func unwrapPath(err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}

// openFlags never block on a FIFO and never make a terminal ours.
const openFlags = os.O_RDONLY | nonBlocking | syscall.O_NOCTTY

// nonBlocking: every open of this package asks O_NONBLOCK, directories
// included. A regular file or a directory ignores it; a FIFO swapped in
// is not waited on; and Go's os.OpenFile, given a descriptor without it,
// puts it in non-blocking mode to offer it to the network poller (which
// refuses a file) and back: four fcntl calls an open. The 10,000
// directories' catch-up made 450,000 of them (a tenth of its system
// calls) before the opens of this package and recall's asked for it.
const nonBlocking = syscall.O_NONBLOCK

// OpenRead opens a regular file the owner may read, following symlinks only
// inside the root. The caller closes it.
func (r *Root) OpenRead(rel string) (*os.File, fs.FileInfo, error) {
	rel, err := clean(rel)
	if err != nil {
		return nil, nil, err
	}
	if r.os == nil {
		return nil, nil, wrap("open", rel, fs.ErrNotExist) // Detached: no file here
	}
	var f *os.File
	if err := r.as(func() (err error) { f, err = r.os.OpenFile(rel, openFlags, 0); return err }); err != nil {
		return nil, nil, wrap("open", rel, err)
	}
	return r.checkRead(f, rel)
}

// checkRead returns f when it is a regular file the owner may read, and
// closes it otherwise.
func (r *Root) checkRead(f *os.File, rel string) (*os.File, fs.FileInfo, error) {
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, nil, wrap("stat", rel, err)
	}
	if !fi.Mode().IsRegular() {
		f.Close()
		return nil, nil, fmt.Errorf("open %s: %w", rel, ErrNotRegular)
	}
	if !r.owner.may(fi, mayRead) {
		f.Close()
		return nil, nil, fmt.Errorf("open %s: %w (read, as uid %d)", rel, ErrDenied, r.owner.UID)
	}
	return f, fi, nil
}

// ReadFile reads a whole regular file the owner may read, up to MaxFileSize.
func (r *Root) ReadFile(rel string) ([]byte, error) {
	f, fi, err := r.OpenRead(rel)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return readAll(f, fi, r.maxFile, rel)
}

func readAll(f *os.File, fi fs.FileInfo, limit int64, rel string) ([]byte, error) {
	if fi.Size() > limit {
		return nil, fmt.Errorf("read %s: %w (%d bytes, limit %d)", rel, ErrTooLarge, fi.Size(), limit)
	}
	// The file may grow while it is read; never past the limit. Read into
	// a buffer of its size: growing one by doubling copies it over and
	// over.
	b := make([]byte, 0, min(fi.Size(), limit)+512)
	for {
		n, err := f.Read(b[len(b):cap(b)])
		b = b[:len(b)+n]
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, wrap("read", rel, err)
		}
		if int64(len(b)) > limit {
			break
		}
		if len(b) == cap(b) {
			b = append(b, 0)[:len(b)]
		}
	}
	if int64(len(b)) > limit {
		return nil, fmt.Errorf("read %s: %w (over %d bytes)", rel, ErrTooLarge, limit)
	}
	return b, nil
}

// Stat follows symlinks inside the root.
func (r *Root) Stat(rel string) (fs.FileInfo, error) {
	rel, err := clean(rel)
	if err != nil {
		return nil, err
	}
	var fi fs.FileInfo
	err = r.as(func() (err error) { fi, err = r.os.Stat(rel); return err })
	return fi, wrap("stat", rel, err)
}

// Lstat does not follow a final symlink.
func (r *Root) Lstat(rel string) (fs.FileInfo, error) {
	rel, err := clean(rel)
	if err != nil {
		return nil, err
	}
	var fi fs.FileInfo
	err = r.as(func() (err error) { fi, err = r.os.Lstat(rel); return err })
	return fi, wrap("lstat", rel, err)
}

// ReadDir lists a directory the owner may read, sorted by name.
func (r *Root) ReadDir(rel string) ([]fs.DirEntry, error) {
	rel, err := clean(rel)
	if err != nil {
		return nil, err
	}
	var f *os.File
	if err := r.as(func() (err error) { f, err = r.os.OpenFile(rel, openFlags|syscall.O_DIRECTORY, 0); return err }); err != nil {
		return nil, wrap("open", rel, err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, wrap("stat", rel, err)
	}
	if !r.owner.may(fi, mayRead|mayExec) {
		return nil, fmt.Errorf("list %s: %w", rel, ErrDenied)
	}
	ents, err := f.ReadDir(-1)
	if err != nil {
		return nil, wrap("list", rel, err)
	}
	sortEntries(ents)
	return ents, nil
}

// WalkDir walks the tree at rel without following symlinked directories.
func (r *Root) WalkDir(rel string, fn fs.WalkDirFunc) error {
	rel, err := clean(rel)
	if err != nil {
		return err
	}
	return fs.WalkDir(r.FS(), filepath.ToSlash(rel), func(p string, d fs.DirEntry, err error) error {
		return fn(filepath.FromSlash(p), d, err)
	})
}

// Resolve follows symlinks in rel, inside the root, and returns the
// root-relative path of what it names (which need not exist yet, as long
// as its directory does). The safe rewrite works on the resolved name, so
// an agent's in-root symlink keeps pointing at the rewritten file.
func (r *Root) Resolve(rel string) (string, error) {
	rel, err := clean(rel)
	if err != nil {
		return "", err
	}
	for hops := 0; hops < 40; hops++ {
		fi, err := r.Lstat(rel)
		if errors.Is(err, fs.ErrNotExist) {
			return rel, nil
		}
		if err != nil {
			return "", wrap("resolve", rel, err)
		}
		if fi.Mode()&fs.ModeSymlink == 0 {
			return rel, nil
		}
		var dest string
		err = r.as(func() (err error) { dest, err = r.os.Readlink(rel); return err })
		if err != nil {
			return "", wrap("readlink", rel, err)
		}
		if filepath.IsAbs(dest) {
			d, err := r.Rel(dest)
			if err != nil {
				return "", fmt.Errorf("resolve %s: %w", rel, err)
			}
			rel = d
			continue
		}
		next := filepath.Join(filepath.Dir(rel), dest)
		if !filepath.IsLocal(next) {
			return "", fmt.Errorf("resolve %s: %w (it points to %s)", rel, ErrOutside, dest)
		}
		rel = filepath.Clean(next)
	}
	return "", fmt.Errorf("resolve %s: too many symbolic links", rel)
}

// Remove removes a file, not following a final symlink.
func (r *Root) Remove(rel string) error {
	rel, err := clean(rel)
	if err != nil {
		return err
	}
	if rel == "." {
		return fmt.Errorf("remove: refusing to remove the store root")
	}
	return wrap("remove", rel, r.as(func() error { return r.os.Remove(rel) }))
}

// AsOwnerOf runs fn with the file-system identity of the owner of dir (or
// of id, a store's user:, when set): what the watcher walks and watches in
// a root, it walks as the agent could.
func AsOwnerOf(dir string, id *Identity, fn func() error) error {
	if id != nil {
		return actAs(*id, fn)
	}
	fi, err := os.Lstat(dir)
	if err != nil {
		return err
	}
	st := fi.Sys().(*syscall.Stat_t)
	return actAs(identityOf(int(st.Uid), int(st.Gid)), fn)
}
