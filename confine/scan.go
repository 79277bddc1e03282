package confine

import (
	"errors"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
)

// A Scan walks a root's tree a batch of entries at a time and can be left
// and resumed later (by another job, after the root's handle is closed):
// it keeps open the directories it is in and reads each a batch at a time,
// so a root of a million session logs costs a bounded amount of memory and
// a bounded amount of work per call, never a listing of every file. It
// enters only real directories (opened with O_NOFOLLOW from the directory
// above, as the root's owner: the kernel checks search and read
// permission) and yields files as root-relative names, in directory order,
// for the caller to open through a Root as usual.
type Scan struct {
	owner   Identity
	stack   []*scanFrame
	descend func(rel string) bool
	match   func(rel string, d fs.DirEntry) bool
	// Errs counts directories that could not be read (gone, not the
	// owner's to read): passed over, as filepath.WalkDir would.
	Errs int
}

type scanFrame struct {
	f    *os.File
	rel  string
	ents []fs.DirEntry
	eof  bool
}

// scanBatch is how many entries a directory is read by at a time.
const scanBatch = 256

// Scan starts a scan of the directory dir of the root. descend says which
// directories (root-relative) to enter, match which entries to yield.
func (r *Root) Scan(dir string, descend func(rel string) bool, match func(rel string, d fs.DirEntry) bool) (*Scan, error) {
	dir, err := clean(dir)
	if err != nil {
		return nil, err
	}
	f, err := r.openScanDir(dir)
	if err != nil {
		return nil, wrap("open directory", dir, err)
	}
	rel := dir
	if rel == "." {
		rel = ""
	}
	return &Scan{owner: r.owner, stack: []*scanFrame{{f: f, rel: rel}}, descend: descend, match: match}, nil
}

// openScanDir opens the directory dir of the root for reading its entries.
// A directory os.Root opens stats every entry it lists (its entries' Info
// cannot be looked up lazily by path), a system call a file per listing:
// the scan reads names and types only, so it lists a descriptor of its
// own, reopened from the one os.Root checked. Opened O_NONBLOCK, as every
// open here (nonBlocking).
func (r *Root) openScanDir(dir string) (*os.File, error) {
	var f *os.File
	if err := r.as(func() (err error) {
		f, err = r.os.OpenFile(dir, os.O_RDONLY|unix.O_DIRECTORY|nonBlocking, 0)
		return err
	}); err != nil {
		return nil, err
	}
	defer f.Close()
	var fd int
	if err := r.as(func() (err error) {
		fd, err = unix.Openat(int(f.Fd()), ".", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
		return err
	}); err != nil {
		return nil, &fs.PathError{Op: "open", Path: dir, Err: err}
	}
	return os.NewFile(uintptr(fd), dir), nil
}

// scanFrom starts a scan in the directory dirs (root-relative components,
// each entered as the scan enters directories: a real directory, opened
// with O_NOFOLLOW from the one above, as the owner). A component that is
// missing, not a directory or a link is an empty scan, as a scan from the
// top would have found nothing there.
func (r *Root) scanFrom(dirs []string, descend func(rel string) bool, match func(rel string, d fs.DirEntry) bool) (*Scan, error) {
	s, err := r.Scan(".", descend, match)
	if err != nil || len(dirs) == 0 {
		return s, err
	}
	top := s.stack[0]
	for _, d := range dirs {
		var fd int
		err := actAs(s.owner, func() (err error) {
			fd, err = unix.Openat(int(top.f.Fd()), d, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
			return err
		})
		top.f.Close()
		if err != nil {
			s.stack = nil
			if !errors.Is(err, unix.ENOENT) && !errors.Is(err, unix.ENOTDIR) && !errors.Is(err, unix.ELOOP) {
				s.Errs++ // not the owner's to read, as a scan from the top counts it
			}
			return s, nil
		}
		rel := filepath.Join(top.rel, d)
		top = &scanFrame{f: os.NewFile(uintptr(fd), rel), rel: rel}
		s.stack[0] = top
	}
	return s, nil
}

// literalDirs is the directories every alternative of a pattern starts
// with, its leading components without a wildcard (but its last, which
// names the files): where a scan for it starts.
func literalDirs(pats [][]string) []string {
	var out []string
	for i := 0; ; i++ {
		var c string
		for k, p := range pats {
			if i >= len(p)-1 || strings.ContainsAny(p[i], `*?[{\`) || p[i] == "." || p[i] == ".." || k > 0 && p[i] != c {
				return out
			}
			c = p[i]
		}
		if len(pats) == 0 {
			return out
		}
		out = append(out, c)
	}
}

// GlobScan is a Scan of the files pattern matches (path.Match syntax,
// slash-separated, with {a,b} alternatives, as Glob), leaving out those
// whose base name matches exclude.
func (r *Root) GlobScan(pattern, exclude string) (*Scan, error) {
	if err := CheckGlob(pattern); err != nil {
		return nil, err
	}
	var pats [][]string
	for _, p := range Alternatives(filepath.ToSlash(pattern)) {
		pats = append(pats, strings.Split(path.Clean(p), "/"))
	}
	// comps matches the first len(comps) components of some pattern; full
	// asks that it be the whole pattern.
	matches := func(rel string, full bool) bool {
		comps := strings.Split(filepath.ToSlash(rel), "/")
		for _, p := range pats {
			if len(comps) > len(p) || full && len(comps) != len(p) || !full && len(comps) == len(p) {
				continue
			}
			ok := true
			for i, c := range comps {
				if m, _ := path.Match(p[i], c); !m {
					ok = false
					break
				}
			}
			if ok {
				return true
			}
		}
		return false
	}
	// The scan starts where the pattern's literal directories lead (a
	// memory file's "memory/*.md" reads the memory directory, not every
	// session log beside it).
	return r.scanFrom(literalDirs(pats), func(rel string) bool { return matches(rel, false) }, func(rel string, d fs.DirEntry) bool {
		if d.IsDir() || !matches(rel, true) {
			return false
		}
		return exclude == "" || !matchAny(exclude, path.Base(filepath.ToSlash(rel)))
	})
}

// Next returns up to max more names the scan matches; done is true once
// the whole tree has been read (the scan is then closed).
func (s *Scan) Next(max int) (rels []string, done bool) {
	for len(rels) < max && len(s.stack) > 0 {
		top := s.stack[len(s.stack)-1]
		if len(top.ents) == 0 {
			if top.eof {
				top.f.Close()
				s.stack = s.stack[:len(s.stack)-1]
				continue
			}
			ents, err := top.f.ReadDir(scanBatch)
			top.ents = ents
			if err != nil {
				top.eof = true
				if !errors.Is(err, io.EOF) {
					s.Errs++
				}
			}
			continue
		}
		d := top.ents[0]
		top.ents = top.ents[1:]
		rel := d.Name()
		if top.rel != "" {
			rel = filepath.Join(top.rel, d.Name())
		}
		if d.IsDir() {
			if s.descend == nil || !s.descend(rel) {
				continue
			}
			var fd int
			err := actAs(s.owner, func() (err error) {
				fd, err = unix.Openat(int(top.f.Fd()), d.Name(), unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
				return err
			})
			if err != nil {
				s.Errs++ // gone, swapped for a link, or not the owner's to read
				continue
			}
			s.stack = append(s.stack, &scanFrame{f: os.NewFile(uintptr(fd), rel), rel: rel})
			continue
		}
		if s.match != nil && s.match(rel, d) {
			rels = append(rels, rel)
		}
	}
	return rels, len(s.stack) == 0
}

// Close releases the directories the scan holds open.
func (s *Scan) Close() {
	for _, f := range s.stack {
		f.f.Close()
	}
	s.stack = nil
}
