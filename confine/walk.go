package confine

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
)

// A root is a directory, not a path.
//
// An agent owns the directories around its memory and can swap any of them
// for a symbolic link at any moment, a parent as well as the root itself.
// A path string resolved again later is a new question with a new answer,
// and the agent chooses it: /home/alice/proj/p1 leads into bob's tree once
// alice's proj is a link to /home/bob/proj. So memwatch resolves a root
// once, from the part of its path no agent can change (see trustedPrefix:
// directories only root or memwatch may change entries of), one component
// at a time, never following a symbolic link:
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

// String names the ID in messages: the path and the directory.
func (id ID) String() string {
	return fmt.Sprintf("%s (directory %d:%d, uid %d)", id.Path, id.Dev, id.Ino, id.UID)
}

// SameDir reports whether a and b are the same directory.
func (id ID) SameDir(b ID) bool { return id.Dev == b.Dev && id.Ino == b.Ino }

// route is how memwatch reaches a path: from base, a directory it may
// reach by its name as written, through names, none of which may be a
// symbolic link.
type route struct {
	base  string
	names []string
}

// routeTo is the route to p (absolute, clean): its trusted prefix (see
// trustedPrefix), then every other name, p's own last name always among
// them (a root that is a link is refused, whoever made it).
func routeTo(p string) (route, error) { return routeVia(p, nil) }

// routeVia is routeTo with the trusted prefixes a batch of opens found.
func routeVia(p string, pre *Prefixes) (route, error) {
	if p == "/" {
		return route{base: "/"}, nil
	}
	b, names, err := pre.trustedPrefix(filepath.Dir(p))
	if err != nil {
		return route{}, err
	}
	return route{base: b, names: append(names, filepath.Base(p))}, nil
}

// real is the route's path with no symbolic link in it.
func (rt route) real() string { return filepath.Join(append([]string{rt.base}, rt.names...)...) }

// trustedPrefix splits the directory d into the part memwatch may reach by
// its names as written and the names below it that must be walked without
// following a link. A name is trusted while nobody but root and memwatch's
// own user can change what it names: its directory is theirs and writable
// by nobody else, or sticky (as /tmp) with the entry theirs too. Where a
// trusted name is a link (an administrator's /home -> /data/home), it is
// followed and the names it leads to judged the same way. An agent owns
// its home: from there on, no link is followed, even in the part of a
// store's glob the administrator wrote (alice's ~/ws/ar in
// /home/alice/ws/ar/*.db is hers to swap). base holds no link; rest may be
// empty (d is trusted whole).
func trustedPrefix(d string) (base string, rest []string, err error) {
	me := uint32(os.Geteuid())
	ours := func(uid uint32) bool { return uid == 0 || uid == me }
	names := splitPath(d)
	cur := "/"
	var curSt syscall.Stat_t
	if err := syscall.Stat(cur, &curSt); err != nil {
		return "", nil, err
	}
	for hops, i := 0, 0; i < len(names); i++ {
		next := filepath.Join(cur, names[i])
		var st syscall.Stat_t
		if err := syscall.Lstat(next, &st); err != nil {
			return cur, names[i:], nil // the walk says what is missing
		}
		mode := curSt.Mode
		trusted := ours(curSt.Uid) && (mode&0o022 == 0 || mode&syscall.S_ISVTX != 0 && ours(st.Uid))
		if !trusted {
			return cur, names[i:], nil
		}
		switch st.Mode & syscall.S_IFMT {
		case syscall.S_IFLNK:
			if hops++; hops > 40 {
				return "", nil, fmt.Errorf("resolve %s: too many symbolic links", d)
			}
			dest, err := os.Readlink(next)
			if err != nil {
				return "", nil, err
			}
			if !filepath.IsAbs(dest) {
				dest = filepath.Join(cur, dest)
			}
			names = append(splitPath(filepath.Clean(dest)), names[i+1:]...)
			cur, i = "/", -1
			if err := syscall.Stat(cur, &curSt); err != nil {
				return "", nil, err
			}
		case syscall.S_IFDIR:
			cur, curSt = next, st
		default:
			return cur, names[i:], nil // not a directory: the walk says so
		}
	}
	return cur, nil, nil
}

// Prefixes keeps trustedPrefix's answers through a batch of opens: the
// roots one search opens are mostly the projects of one directory, whose
// part that only root and memwatch's own user can change need not be
// looked up again for each (the rest, an agent's to swap, still is, by
// what each open finds). A batch is short: a new one for each search.
// Safe for concurrent use; the zero value is ready, and nil keeps nothing.
type Prefixes struct {
	mu     sync.Mutex
	m      map[string]prefixAnswer
	bases  map[string]batchBase // by identity and path (openBase)
	old    []*os.Root           // bases replaced, closed with the batch
	closed bool
}

type prefixAnswer struct {
	base string
	rest []string
	err  error
}

func (p *Prefixes) trustedPrefix(d string) (string, []string, error) {
	if p == nil {
		return trustedPrefix(d)
	}
	p.mu.Lock()
	a, ok := p.m[d]
	p.mu.Unlock()
	if !ok {
		a.base, a.rest, a.err = trustedPrefix(d)
		p.mu.Lock()
		if p.m == nil {
			p.m = map[string]prefixAnswer{}
		}
		p.m[d] = a
		p.mu.Unlock()
	}
	return a.base, slices.Clone(a.rest), a.err
}

// openBase opens the directory base, which a route reaches by its names
// as written: for a batch (p not nil) and a walk that goes on below it
// (below), once per identity who (a batch's roots are mostly the
// projects of one directory; its open, fstat and close were a third of
// each root's), else for the caller alone. shared is the batch's open
// directory, which the caller does not close (Close does).
func (p *Prefixes) openBase(base, who string, below bool) (r, shared *os.Root, err error) {
	if p == nil || !below {
		r, err = os.OpenRoot(base)
		return r, nil, err
	}
	k := who + "\x00" + base
	p.mu.Lock()
	b, ok := p.bases[k]
	p.mu.Unlock()
	// The name still leads to the directory opened (one stat, by the
	// name, as this identity: the kernel checks its search permission on
	// the way again): root may have replaced it since.
	var now syscall.Stat_t
	if ok && syscall.Stat(base, &now) == nil && uint64(now.Dev) == b.dev && uint64(now.Ino) == b.ino {
		return b.r, b.r, nil
	}
	if r, err = os.OpenRoot(base); err != nil {
		return nil, nil, err
	}
	st, err := statRoot(r)
	if err != nil {
		r.Close()
		return nil, nil, err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return r, nil, nil // the batch is over: this walk's alone
	}
	if p.bases == nil {
		p.bases = map[string]batchBase{}
	}
	// One replaced (by this walk or another at once) stays open until
	// Close: a walk may be using it.
	p.old = append(p.old, p.bases[k].r)
	p.bases[k] = batchBase{r, uint64(st.Dev), uint64(st.Ino)}
	return r, r, nil
}

// batchBase is a batch's open base directory and what it is.
type batchBase struct {
	r        *os.Root
	dev, ino uint64
}

// Close closes the directories the batch opened (the roots it opened
// are their callers'). A batch closed keeps nothing more.
func (p *Prefixes) Close() {
	if p == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, b := range p.bases {
		b.r.Close()
	}
	for _, r := range p.old {
		if r != nil {
			r.Close()
		}
	}
	p.bases, p.old, p.closed = nil, nil, true
}

// splitPath is an absolute path's names.
func splitPath(p string) []string {
	var out []string
	for _, n := range strings.Split(p, string(filepath.Separator)) {
		if n != "" {
			out = append(out, n)
		}
	}
	return out
}

// inWithin reports whether p lies in one of within (lexically); an empty
// within holds everything (a root named on the command line).
func inWithin(p string, within []string) bool {
	if len(within) == 0 {
		return true
	}
	for _, w := range within {
		if Within(filepath.Clean(w), p) {
			return true
		}
	}
	return false
}

// walkDir opens the directory rt leads to, following no symbolic link
// among its names: see the package's note above. It runs with the calling
// thread's file-system identity (run it in actAs to have the kernel check
// an owner's search permission on every directory on the way). p names
// the destination in messages. The caller closes the result.
func walkDir(rt route, p string) (*os.Root, *syscall.Stat_t, error) {
	return walkFrom(rt, p, nil, "")
}

// walkFrom is walkDir with the base opened once for a batch of opens
// (pre's, for the identity named who: the kernel checked that identity's
// search permission on the way to it), or for this walk alone (nil pre).
func walkFrom(rt route, p string, pre *Prefixes, who string) (*os.Root, *syscall.Stat_t, error) {
	r, shared, err := pre.openBase(rt.base, who, len(rt.names) > 0)
	if err != nil {
		return nil, nil, err
	}
	// release closes r unless it is the batch's.
	release := func(r *os.Root) {
		if r != shared {
			r.Close()
		}
	}
	names := rt.names
	var st *syscall.Stat_t // what r is, once a name was opened
	for i, name := range names {
		last := i == len(names)-1
		at := filepath.Join(append([]string{rt.base}, names[:i+1]...)...)
		fi, err := r.Lstat(name)
		if err != nil {
			release(r)
			return nil, nil, err
		}
		switch {
		case fi.Mode()&fs.ModeSymlink != 0 && last:
			release(r)
			return nil, nil, fmt.Errorf("%s: %w", p, ErrSymlinkRoot)
		case fi.Mode()&fs.ModeSymlink != 0:
			release(r)
			return nil, nil, fmt.Errorf("open store root %s: %s is a symbolic link: %w (name the directory it leads to in the store's glob instead)", p, at, ErrSymlinkParent)
		case !fi.IsDir():
			release(r)
			return nil, nil, fmt.Errorf("open store root %s: %s is not a directory", p, at)
		}
		seen := fi.Sys().(*syscall.Stat_t)
		sub, err := r.OpenRoot(name)
		release(r)
		if err != nil {
			return nil, nil, err
		}
		st, err = statRoot(sub)
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
	if st == nil {
		if st, err = statRoot(r); err != nil {
			release(r)
			return nil, nil, err
		}
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

// Stat finds the directory at p as Open would (by its route, without
// following a link where an agent could have put one) and returns its ID,
// without acting as its owner: what discovery and init compare with.
func Stat(p string, within []string) (ID, error) {
	p = filepath.Clean(p)
	if !inWithin(p, within) {
		return ID{}, fmt.Errorf("%s: %w (%s)", p, ErrOutside, strings.Join(within, ", "))
	}
	rt, err := routeTo(p)
	if err != nil {
		return ID{}, err
	}
	r, st, err := walkDir(rt, p)
	if err != nil {
		return ID{}, err
	}
	r.Close()
	return ID{Path: p, Dev: uint64(st.Dev), Ino: uint64(st.Ino), UID: int(st.Uid)}, nil
}
