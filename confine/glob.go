package confine

import (
	"fmt"
	"io/fs"
	"path"
	"path/filepath"
	"slices"
	"strings"
)

// Globs in policies are path.Match patterns, slash-separated and relative
// to a root, with one addition: {a,b} alternatives, because an agent's
// files move between versions (nanobot 0.3 keeps its sessions in
// workspace/sessions, later ones in sessions/<workspace>) and one store
// should find both. Alternatives do not nest.

// Alternatives expands the {a,b} groups of pattern into the patterns it
// stands for.
func Alternatives(pattern string) []string {
	open := strings.IndexByte(pattern, '{')
	if open < 0 {
		return []string{pattern}
	}
	end := strings.IndexByte(pattern[open:], '}')
	if end < 0 {
		return []string{pattern}
	}
	end += open
	var out []string
	for _, alt := range strings.Split(pattern[open+1:end], ",") {
		for _, rest := range Alternatives(pattern[end+1:]) {
			if len(out) > maxAlternatives {
				return out // CheckGlob refuses it
			}
			out = append(out, pattern[:open]+alt+rest)
		}
	}
	return out
}

// maxAlternatives bounds what one pattern expands to.
const maxAlternatives = 64

// CheckGlob reports a malformed pattern.
func CheckGlob(pattern string) error {
	if n := len(Alternatives(pattern)); n > maxAlternatives {
		return fmt.Errorf("glob %q: %d alternatives, more than %d", pattern, n, maxAlternatives)
	}
	for _, p := range Alternatives(filepath.ToSlash(pattern)) {
		if _, err := path.Match(p, ""); err != nil {
			return fmt.Errorf("glob %q: %w", pattern, err)
		}
		if strings.Contains(p, "[!") {
			// A shell's negation: here the class of ! and the rest, which
			// silently matches what was meant to be left out.
			return fmt.Errorf("glob %q: [!...] is no negation here (it is the class of ! and the rest); write [^...]", pattern)
		}
	}
	return nil
}

// Match reports whether the root-relative name rel matches pattern
// (alternatives included) and, when exclude is set, its base name does not
// match exclude.
func Match(pattern, exclude, rel string) bool {
	rel = filepath.ToSlash(rel)
	if exclude != "" && matchAny(exclude, path.Base(rel)) {
		return false
	}
	return matchAny(pattern, rel)
}

func matchAny(pattern, name string) bool {
	if CheckGlob(pattern) != nil {
		return false
	}
	for _, p := range Alternatives(filepath.ToSlash(pattern)) {
		if ok, _ := path.Match(p, name); ok {
			return true
		}
	}
	return false
}

// Glob returns the root-relative names matching pattern (path.Match
// syntax, slash-separated, with {a,b} alternatives), sorted.
func (r *Root) Glob(pattern string) ([]string, error) { return r.GlobExcept(pattern, "") }

// GlobExcept is Glob without the names whose base name matches exclude.
func (r *Root) GlobExcept(pattern, exclude string) ([]string, error) {
	if err := CheckGlob(pattern); err != nil {
		return nil, err
	}
	if r.os == nil {
		return nil, nil // Detached: no file here
	}
	var out []string
	for _, p := range Alternatives(filepath.ToSlash(pattern)) {
		ms, err := fs.Glob(r.FS(), p)
		if err != nil {
			return nil, err
		}
		for _, m := range ms {
			if exclude != "" && matchAny(exclude, path.Base(m)) {
				continue
			}
			out = append(out, filepath.FromSlash(m))
		}
	}
	slices.Sort(out)
	return slices.Compact(out), nil
}

// Listing is one pass of globs over a root: each directory is read once
// however many patterns look in it (a store's sources are a dozen
// patterns in a few directories, most of them absent), and what a match
// is (its lstat, made by the listing itself) comes with it, so a search
// over thousands of files lists and stats each once. It sees the root as
// it was when first read: make one per pass, not per daemon.
type Listing struct {
	r    *Root
	dirs map[string]listedDir
}

type listedDir struct {
	ents []fs.DirEntry // sorted by name
	err  error
}

// Listing starts a pass of globs over r.
func (r *Root) Listing() *Listing { return &Listing{r: r, dirs: map[string]listedDir{}} }

// Matched is a name a pattern matched, with what it is when the listing
// knows (nil: a literal pattern, not listed; Stat it).
type Matched struct {
	Rel  string
	Info fs.FileInfo
}

// GlobExcept is Root.GlobExcept with what each match is.
func (l *Listing) GlobExcept(pattern, exclude string) ([]Matched, error) {
	if err := CheckGlob(pattern); err != nil {
		return nil, err
	}
	if l.r.os == nil {
		return nil, nil
	}
	var out []Matched
	for _, p := range Alternatives(filepath.ToSlash(pattern)) {
		ms, err := fs.Glob(listingFS{l}, p)
		if err != nil {
			return nil, err
		}
		for _, m := range ms {
			if exclude != "" && matchAny(exclude, path.Base(m)) {
				continue
			}
			out = append(out, Matched{Rel: filepath.FromSlash(m), Info: l.info(m)})
		}
	}
	slices.SortFunc(out, func(a, b Matched) int { return strings.Compare(a.Rel, b.Rel) })
	return slices.CompactFunc(out, func(a, b Matched) bool { return a.Rel == b.Rel }), nil
}

// info is the lstat of name as its directory's listing read it.
func (l *Listing) info(name string) fs.FileInfo {
	d, ok := l.dirs[path.Dir(name)]
	if !ok {
		return nil
	}
	base := path.Base(name)
	i, found := slices.BinarySearchFunc(d.ents, base, func(e fs.DirEntry, n string) int { return strings.Compare(e.Name(), n) })
	if !found {
		return nil
	}
	fi, err := d.ents[i].Info()
	if err != nil {
		return nil
	}
	return fi
}

// listingFS is the root as fs.Glob reads it, each directory listed once.
type listingFS struct{ l *Listing }

func (f listingFS) Open(name string) (fs.File, error) { return rootFS{f.l.r}.Open(name) }

func (f listingFS) Stat(name string) (fs.FileInfo, error) { return rootFS{f.l.r}.Stat(name) }

func (f listingFS) ReadDir(name string) ([]fs.DirEntry, error) {
	d, ok := f.l.dirs[name]
	if !ok {
		d.ents, d.err = rootFS{f.l.r}.ReadDir(name)
		f.l.dirs[name] = d
	}
	return d.ents, d.err
}
