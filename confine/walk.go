package confine

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// A root is a directory, not a path.
//
// An agent owns the directories around its memory and can swap any of them
// for a symbolic link at any moment, a parent as well as the root itself.
// A path string resolved again later is a new question with a new answer,
// and the agent chooses it: /home/alice/proj/p1 leads into bob's tree once
// alice's proj is a link to /home/bob/proj. So memwatch resolves a root
// once, from the directory its glob names (the administrator's part, taken
// as written), one component at a time, never following a symbolic link:
// each component must be a real directory when listed (lstat), and the
// directory opened under that name must be the very one listed (device and
// inode), else the walk is refused. The result is an open directory and its
// ID (path, device, inode, owner); everything memwatch keeps of a root (the
// spool, the versions, the journal) is keyed by that ID, and a request that
// names a path is answered only from what was captured under the ID the
// same walk finds now.

// ErrSymlinkParent means a directory between the glob's fixed part and the
// root is a symbolic link: the root is refused like a symlinked root.
var ErrSymlinkParent = errors.New("a directory above the store root is a symbolic link; memwatch follows no symbolic link below the directory its glob names")

// ID identifies a root: its path, the directory found there when it was
// opened (device and inode) and the user memwatch acts as in it. A
// directory that takes the path later (an agent's swap, a rm -rf and a new
// clone) has another ID: what was captured from the old one is not served,
// restored or written under the new one.
type ID struct {
	Path string `json:"path"`
	Dev  uint64 `json:"dev"`
	Ino  uint64 `json:"ino"`
	UID  int    `json:"uid"`
}

// Key is the ID as the state databases key a root: its path, a NUL (which
// no path holds) and device:inode:uid.
func (id ID) Key() string {
	return id.Path + "\x00" + strconv.FormatUint(id.Dev, 10) + ":" + strconv.FormatUint(id.Ino, 10) + ":" + strconv.Itoa(id.UID)
}

// Unbound is the key of what was captured under this path and owner on
// another host (a state restored from the replica): no directory of this
// host has its device and inode, so the first directory found at the path
// with the same owner takes it (see Bindable).
func (id ID) Unbound() string {
	return id.Path + "\x000:0:" + strconv.Itoa(id.UID)
}

// Bindable lists the keys that what the spool and the versions hold under
// them may move to id's key when id's directory is first opened: the
// root's bare path (captured before roots had IDs) and its unbound key (a
// restored state), never the key of another directory.
func (id ID) Bindable() []string { return []string{id.Path, id.Unbound()} }

// ParseKey reads a key back; a bare path (a key written before roots had
// IDs) is an ID with only its path. ok is false for a malformed key.
func ParseKey(key string) (id ID, ok bool) {
	p, rest, found := strings.Cut(key, "\x00")
	id.Path = p
	if !found {
		return id, true
	}
	parts := strings.Split(rest, ":")
	if len(parts) != 3 {
		return id, false
	}
	var err1, err2, err3 error
	id.Dev, err1 = strconv.ParseUint(parts[0], 10, 64)
	id.Ino, err2 = strconv.ParseUint(parts[1], 10, 64)
	id.UID, err3 = strconv.Atoi(parts[2])
	return id, err1 == nil && err2 == nil && err3 == nil
}

// PathOfKey is the path a key names, for messages and listings.
func PathOfKey(key string) string {
	p, _, _ := strings.Cut(key, "\x00")
	return p
}

// String names the ID in messages: the path and the directory.
func (id ID) String() string {
	return fmt.Sprintf("%s (directory %d:%d, uid %d)", id.Path, id.Dev, id.Ino, id.UID)
}

// SameDir reports whether a and b are the same directory.
func (id ID) SameDir(b ID) bool { return id.Dev == b.Dev && id.Ino == b.Ino }

// base is the directory a walk to p starts from: the longest of within
// that holds p (lexically), or p's parent when within is empty (a root
// named on the command line: only its last component is checked). ok is
// false when within is given and none holds p.
func base(p string, within []string) (string, bool) {
	if len(within) == 0 {
		return filepath.Dir(p), true
	}
	best := ""
	for _, w := range within {
		w = filepath.Clean(w)
		if w != p && Within(w, p) && len(w) > len(best) {
			best = w
		}
	}
	return best, best != ""
}

// walkDir opens the directory p from base without following a symbolic
// link below base: see the package's note above. It runs with the calling
// thread's file-system identity (run it in actAs to have the kernel check
// an owner's search permission on every directory on the way). The caller
// closes the result.
func walkDir(base, p string) (*os.Root, *syscall.Stat_t, error) {
	rel, err := filepath.Rel(base, p)
	if err != nil || !filepath.IsLocal(rel) {
		return nil, nil, fmt.Errorf("open store root %s: %w (not below %s)", p, ErrOutside, base)
	}
	r, err := os.OpenRoot(base)
	if err != nil {
		return nil, nil, err
	}
	var names []string
	if rel != "." {
		names = strings.Split(rel, string(filepath.Separator))
	}
	for i, name := range names {
		last := i == len(names)-1
		at := filepath.Join(base, filepath.Join(names[:i+1]...))
		fi, err := r.Lstat(name)
		if err != nil {
			r.Close()
			return nil, nil, err
		}
		switch {
		case fi.Mode()&fs.ModeSymlink != 0 && last:
			r.Close()
			return nil, nil, fmt.Errorf("%s: %w", p, ErrSymlinkRoot)
		case fi.Mode()&fs.ModeSymlink != 0:
			r.Close()
			return nil, nil, fmt.Errorf("open store root %s: %s is a symbolic link: %w (name the directory it leads to in the store's glob instead)", p, at, ErrSymlinkParent)
		case !fi.IsDir():
			r.Close()
			return nil, nil, fmt.Errorf("open store root %s: %s is not a directory", p, at)
		}
		seen := fi.Sys().(*syscall.Stat_t)
		sub, err := r.OpenRoot(name)
		r.Close()
		if err != nil {
			return nil, nil, err
		}
		st, err := statRoot(sub)
		if err != nil {
			sub.Close()
			return nil, nil, err
		}
		if st.Dev != seen.Dev || st.Ino != seen.Ino {
			// Swapped between the lstat and the open: what was opened is
			// not the directory that was listed.
			sub.Close()
			err := ErrSymlinkParent
			if last {
				err = ErrSymlinkRoot
			}
			return nil, nil, fmt.Errorf("open store root %s: %s was replaced while memwatch opened it: %w", p, at, err)
		}
		r = sub
	}
	st, err := statRoot(r)
	if err != nil {
		r.Close()
		return nil, nil, err
	}
	return r, st, nil
}

func statRoot(r *os.Root) (*syscall.Stat_t, error) {
	fi, err := r.Stat(".")
	if err != nil {
		return nil, err
	}
	return fi.Sys().(*syscall.Stat_t), nil
}

// Stat finds the directory at p as Open would (from the directory of
// within that holds it, without following a symbolic link below it) and
// returns its ID, without acting as its owner: what discovery and the
// control API compare an opened root with.
func Stat(p string, within []string) (ID, error) {
	p = filepath.Clean(p)
	b, ok := base(p, within)
	if !ok {
		return ID{}, fmt.Errorf("%s: %w (%s)", p, ErrOutside, strings.Join(within, ", "))
	}
	r, st, err := walkDir(b, p)
	if err != nil {
		return ID{}, err
	}
	r.Close()
	return ID{Path: p, Dev: uint64(st.Dev), Ino: uint64(st.Ino), UID: int(st.Uid)}, nil
}
