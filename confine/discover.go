package confine

import (
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
)

// StaticDir is the longest leading part of a glob without pattern
// characters: the directory every match lies in, the administrator's part
// of the path (taken as written, symbolic links and all). A glob with no
// pattern characters is its own static part.
func StaticDir(g string) string {
	parts := strings.Split(filepath.Clean(g), string(filepath.Separator))
	i := 0
	for i < len(parts) && !strings.ContainsAny(parts[i], `*?[\`) {
		i++
	}
	if i == len(parts) {
		return filepath.Clean(g)
	}
	return string(filepath.Separator) + filepath.Join(parts[:i]...)
}

// GlobBase is the directory a store's roots are found from and walked
// from: the glob's static part, or for a glob without pattern characters
// (a root named outright) its parent.
func GlobBase(g string) string {
	d := StaticDir(g)
	if d == filepath.Clean(g) {
		d = filepath.Dir(d)
	}
	return d
}

// Refused is a match of a store's glob that memwatch does not take as a
// root, and why (ErrSymlinkRoot, ErrSymlinkParent).
type Refused struct {
	Path string
	Err  error
}

// GlobRoots expands a store's glob (filepath.Match syntax, absolute) the
// way roots are opened: from the part of GlobBase no agent can change
// (trustedPrefix), one component at a time, never following a symbolic
// link. It returns the real directories it matches
// (with files, the regular files) with their IDs (as Root.ID gives them,
// the owner's uid as the files say it), sorted by path, and the matches it refuses: a symbolic
// link where the root would be, or at a level above it. A directory that
// cannot be listed is passed over, as filepath.Glob does.
func GlobRoots(pattern string, files bool) (found []ID, refused []Refused) {
	pattern = filepath.Clean(pattern)
	g := GlobBase(pattern)
	rel, err := filepath.Rel(g, pattern)
	if err != nil || !filepath.IsLocal(rel) {
		return nil, nil
	}
	// From the part of the glob's fixed part no agent can change: below
	// it, its own names are walked as the pattern's, no link followed.
	b, fixed, err := trustedPrefix(g)
	if err != nil {
		return nil, nil
	}
	parts := append(fixed, strings.Split(rel, string(filepath.Separator))...)
	r, err := os.OpenRoot(b)
	if err != nil {
		return nil, nil
	}
	defer r.Close()
	var walk func(r *os.Root, dir string, i int)
	walk = func(r *os.Root, dir string, i int) {
		last := i == len(parts)-1
		for _, name := range candidates(r, parts[i]) {
			at := filepath.Join(dir, name)
			fi, err := r.Lstat(name)
			if err != nil {
				continue
			}
			st := fi.Sys().(*syscall.Stat_t)
			switch {
			case fi.Mode()&fs.ModeSymlink != 0 && last:
				refused = append(refused, Refused{Path: at, Err: ErrSymlinkRoot})
				continue
			case fi.Mode()&fs.ModeSymlink != 0:
				refused = append(refused, Refused{Path: at, Err: ErrSymlinkParent})
				continue
			case last && files:
				// A file root's ID is its directory's (as Root.ID), with
				// the file's owner.
				if dst, err := statRoot(r); err == nil && fi.Mode().IsRegular() {
					found = append(found, ID{Path: at, Dev: uint64(dst.Dev), Ino: uint64(dst.Ino), UID: int(st.Uid)})
				}
				continue
			case last:
				if fi.IsDir() {
					found = append(found, ID{Path: at, Dev: uint64(st.Dev), Ino: uint64(st.Ino), UID: int(st.Uid)})
				}
				continue
			case !fi.IsDir():
				continue
			}
			sub, err := r.OpenRoot(name)
			if err != nil {
				continue
			}
			if got, err := statRoot(sub); err != nil || got.Dev != st.Dev || got.Ino != st.Ino {
				sub.Close()
				refused = append(refused, Refused{Path: at, Err: ErrSymlinkParent}) // swapped meanwhile
				continue
			}
			walk(sub, at, i+1)
			sub.Close()
		}
	}
	walk(r, b, 0)
	slices.SortFunc(found, func(a, b ID) int { return strings.Compare(a.Path, b.Path) })
	return found, refused
}

// candidates lists the names in r that match one component of a glob: the
// name itself when it has no pattern characters, else the directory's
// entries that match, sorted.
func candidates(r *os.Root, pattern string) []string {
	if !strings.ContainsAny(pattern, `*?[\`) {
		return []string{pattern}
	}
	f, err := r.Open(".")
	if err != nil {
		return nil
	}
	defer f.Close()
	names, err := f.Readdirnames(-1)
	if err != nil && len(names) == 0 {
		return nil
	}
	var out []string
	for _, n := range names {
		if ok, _ := filepath.Match(pattern, n); ok {
			out = append(out, n)
		}
	}
	slices.Sort(out)
	return out
}
