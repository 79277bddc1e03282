package recall

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"os"
	"path"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/memwatch/memwatch/confine"
	"github.com/memwatch/memwatch/control"
	"github.com/memwatch/memwatch/recall/query"
	"github.com/memwatch/memwatch/session"
)

// Root is one root to search, with the sources its layout makes searchable.
type Root struct {
	Root    *confine.Root
	Sources []Source
	// Name, when searching several roots, labels results (Result.Session).
	Name string
	// Store is the store the root belongs to (Result.Store).
	Store string
	// Host, on a central node, is the host the root is on (Result.Host).
	Host string
	// Shown is the root's path as results show and cite it, when it is
	// not Root.Path(): a central node's copy of a host's root is opened
	// where the copy is and cited where the host has it.
	Shown string
	// Listed, when set, are the root's files to search instead of what its
	// sources' globs match (a copy's files, as its manifest names them).
	Listed []Listed
	// Index, when set, is the index of this root's files instead of
	// Options.Index (a host's copy keeps its own).
	Index string
	// Recite, when set, turns the citation of one of this root's results
	// into the one to give, with its line, once the search is done (a
	// host's copy holds a log's generations one after the other: its
	// line is the host's generation and line); ok is false for a
	// citation that is not this root's.
	Recite func(citation string) (cite string, line int64, ok bool)
	// Project is the root's short name in results (Result.Project); ""
	// gives ProjectFunc's, else ProjectName of its path.
	Project string
	// ProjectFunc, when set, names the root's project when a result of it
	// is given (naming it may read directories: not for every root a
	// search covers).
	ProjectFunc func() string
	// Under, when set, keeps the search to the files under this directory
	// of the root (recall --dir ROOT/sessions/2026/11), held lines too.
	Under string
	// Records, when not nil, are the only held logs searched in this
	// root (a project's conversations of a database, DB#ID, and its
	// files gone from the root), the others left out.
	Records map[string]bool
}

// holdsHeld reports whether the held log rel is searched (Records).
func (r Root) holdsHeld(rel string) bool {
	return r.Records == nil || r.Records[rel]
}

// holds reports whether rel is one of the files r is searched for.
func (r Root) holds(rel string) bool {
	return r.Under == "" || strings.HasPrefix(filepath.ToSlash(rel), strings.TrimSuffix(filepath.ToSlash(r.Under), "/")+"/")
}

// Listed is one file of a Root's listing: relative to the root, searched
// as Sources[Source], cited as generation Gen of its log (0 or 1: none).
type Listed struct {
	Rel    string
	Source int
	Gen    int64
}

// project is the root's short name, as results give it.
func (r Root) project() string {
	if r.Project != "" {
		return r.Project
	}
	if r.ProjectFunc != nil {
		return r.ProjectFunc()
	}
	return ProjectName(r.shown())
}

// ProjectName is the short name results give a root: its directory's name,
// without the home directory an agent encodes into it (Claude Code's
// -home-alice-src-billing is src-billing) or a leading dot (.codex is
// codex); a session's directory named by an id (session-detail's
// --<cwd>--/<id>) is named by its project's.
func ProjectName(root string) string {
	base := filepath.Base(root)
	if parent := filepath.Base(filepath.Dir(root)); strings.HasPrefix(parent, "--") && strings.HasSuffix(parent, "--") && len(parent) > 4 {
		base = strings.Trim(parent, "-")
	}
	if enc, ok := strings.CutPrefix(base, "-"); ok && enc != "" {
		parts := strings.Split(enc, "-")
		switch {
		case (parts[0] == "home" || parts[0] == "Users") && len(parts) > 2:
			parts = parts[2:]
		case parts[0] == "root" && len(parts) > 1:
			parts = parts[1:]
		}
		return strings.Join(parts, "-")
	}
	if name := strings.TrimPrefix(base, "."); name != "" {
		return name
	}
	return base
}

// shown is the root's path as results show it.
func (r Root) shown() string {
	if r.Shown != "" {
		return r.Shown
	}
	return r.Root.Path()
}

// index is the directory of the root's index ("" for none).
func (r Root) index(o Options) string {
	if r.Index != "" {
		return r.Index
	}
	return o.Index
}

// Options tune a search.
type Options struct {
	Roots []Root
	// Labels limits the sources searched ("detail", "messages"); empty: all.
	Labels []string
	Limit  int // at most this many results; 0 means 5
	// Index, when set, is the directory of the daemon's index: files it
	// covers are searched only where they can match.
	Index string
	// Generation, when set, gives a log's live generation (from the spool)
	// so citations of rewritten logs name it (path@3#L10).
	Generation func(root *confine.Root, rel string) int64
	// MaxLine is the longest line searched whole (0: 1 MiB).
	MaxLine int
	// Sort is SortRelevance ("": the default) or SortNewest (rank.go).
	Sort string
	// NameRoots gives each result its root (and store) and cites its file
	// by its whole path, as with several roots, whatever their number
	// (recall --all, --store).
	NameRoots bool
	// Explain gives each ranked result its score and why.
	Explain bool
	// Workers is how many goroutines read a large log at once (0: one per
	// CPU, at most 4; 1 reads it in one). The results are the same.
	Workers int
	// Held, when set, gives the messages the spool holds that are not in
	// a live file (lines the agent trimmed or deleted since, conversations
	// kept in a database), newest first: they are searched after the
	// files, as messages, cited where they were captured.
	Held func(ctx context.Context, root *confine.Root, fn func(rel string, gen, line int64, raw []byte) error) error
	// Indexes keeps large indexes parsed between searches (the daemon's;
	// nil: each is read).
	Indexes *IndexCache
	// Segments, when set, is the listing of the term segments in Index
	// that the indexing keeps (the daemon's): a search then does not
	// list that directory.
	Segments *SegmentListing
	// Listings and Fresh, when both set, let a search use what an earlier
	// one listed of a root, unlisted: Fresh returns a number that moves
	// whenever anything changes under the root (false: list it), and
	// Listings keeps the listings made at those numbers.
	Listings *ListingCache
	Fresh    func(Root) (uint64, bool)
	// More, for a word or phrase (every line holding it), counts the
	// matching lines past Limit, up to this many (Stats.More): what a
	// person is told was left out. 0: the search stops at the limit.
	More int
}

// Stats says how a search was answered (memwatch recall --explain).
type Stats = control.Stats

// unread notes a file left out of a search.
func unread(s *Stats, f file, err error) {
	s.Unread++
	if s.Why == "" {
		s.Why = fmt.Sprintf("%s: %v", f.root.Root.Join(f.rel), err)
	}
}

// ErrLimit stops a search once it has its results.
var errLimit = errors.New("limit reached")

// DefaultLimit is session-detail's default.
const DefaultLimit = 5

// file is one file to search.
type file struct {
	// root and src are the search's, shared by its files: a file is
	// copied into every list a search makes, and a home's 1,700 of them
	// with a root and a source each by value were a megabyte a request.
	root  *Root
	rel   string
	src   *Source
	mtime int64
	size  int64
	gen   int64
	// As listed: the index of a file whose change time has not moved is
	// used without opening the file (see fileIndex.ctime).
	dev, ino uint64
	ctime    int64
	// readable: the listing saw a file its root's owner may read, so its
	// index may answer for it unopened (else it is opened, and checked).
	readable bool
	// idxDir and idxPath, when set, are an index directory and the path
	// of the file's index there (kept with a listing: made once).
	idxDir, idxPath string
}

// indexIn is where f's index is kept under dir.
func (f *file) indexIn(dir string) string {
	if f.idxDir == dir && f.idxPath != "" {
		return f.idxPath
	}
	return indexPath(dir, f.root.Root.Path(), f.rel)
}

// Search runs q over the roots. Results come notes first (newest file
// first, lines in order), then logs (newest file first, newest line first).
func Search(ctx context.Context, q Query, o Options) ([]Result, Stats, error) {
	if o.Limit <= 0 {
		o.Limit = DefaultLimit
	}
	run := search
	if q.Kind != "" {
		run = searchKind
	}
	rs, st, err := run(ctx, q, o)
	recite(o.Roots, rs)
	return rs, st, err
}

// recite gives the results of roots with Recite their citations.
func recite(roots []Root, rs []Result) {
	by := map[string][]func(string) (string, int64, bool){} // by host
	for _, r := range roots {
		if r.Recite != nil {
			by[r.Host] = append(by[r.Host], r.Recite)
		}
	}
	if len(by) == 0 {
		return
	}
	try := func(host, c string) (string, int64, bool) {
		for _, fn := range by[host] {
			if nc, line, ok := fn(c); ok {
				return nc, line, true
			}
		}
		return c, 0, false
	}
	for i := range rs {
		r := &rs[i]
		if c, line, ok := try(r.Host, r.Citation); ok {
			r.Citation, r.LineNumber = c, line
		}
		for k, f := range r.Folded {
			if host, _, found := strings.Cut(f, ":"); found {
				r.Folded[k], _, _ = try(host, f)
			}
		}
	}
}

func search(ctx context.Context, q Query, o Options) ([]Result, Stats, error) {
	start := time.Now()
	if o.Limit <= 0 {
		o.Limit = DefaultLimit
	}
	if o.MaxLine <= 0 {
		o.MaxLine = 1 << 20
	}
	if o.Sort != SortNewest && q.Ranked() {
		rs, st, err := rankedSearch(ctx, q, o)
		if !errors.Is(err, errNoTerms) {
			return rs, st, err
		}
	}
	vs := &views{}
	defer vs.close()
	s := &searcher{q: q, o: o, ctx: ctx, views: vs}
	files, err := listFiles(o, vs, &s.stats)
	if err != nil {
		return nil, Stats{}, err
	}
	var rejected []int
	for i, f := range files {
		if i%prefilterWindow == 0 {
			rejected = s.rejectedByIndex(files[i:min(i+prefilterWindow, len(files))])
		}
		if err := ctx.Err(); err != nil {
			return s.results, s.stats, err
		}
		s.stats.Files++
		if rejected != nil && rejected[i%prefilterWindow] >= 0 {
			s.stats.Indexed++
			s.stats.Blocks += rejected[i%prefilterWindow]
			continue
		}
		var err error
		if f.src.Kind == Text {
			err = s.searchText(f)
		} else {
			err = s.searchLog(f)
		}
		if errors.Is(err, errLimit) {
			s.stats.StoppedEarly = true
			break
		}
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			if ctx.Err() != nil {
				return s.results, s.stats, ctx.Err()
			}
			unread(&s.stats, f, err)
		}
	}
	if !s.stats.StoppedEarly && o.Held != nil {
		if err := s.searchHeld(); errors.Is(err, errLimit) {
			s.stats.StoppedEarly = true
		} else if err != nil {
			return s.results, s.stats, err
		}
	}
	s.stats.Duration = time.Since(start)
	if s.results == nil {
		s.results = []Result{}
	}
	return s.results, s.stats, nil
}

// prefilterWindow is how many files ahead of the search the index is
// asked which cannot match: at most that many asked in vain when the
// limit is reached first.
const prefilterWindow = 256

// rejectedByIndex asks, for the logs among files, side by side, what
// searchLog asks first: is it indexed whole, unchanged since, with no
// block that can hold the query? Each such file gets its index's block
// count (to count as searchLog counts it), any other -1; nil when there
// is nothing to ask (no daemon's cache of indexes). A rare word over a
// home of thousands of sessions is that question for each, one after
// another.
func (s *searcher) rejectedByIndex(files []file) []int {
	if s.o.Indexes == nil || len(files) < 32 || len(s.q.Grams) == 0 {
		return nil
	}
	out := make([]int, len(files))
	// Files are taken by a counter, not handed over a channel: each
	// costs a few microseconds to ask, and a channel's hand-over as much.
	var next atomic.Int64
	var wg sync.WaitGroup
	for range min(runtime.GOMAXPROCS(0), 4) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ws := &searcher{q: s.q, o: s.o}
			for {
				i := int(next.Add(1) - 1)
				if i >= len(files) {
					return
				}
				out[i] = -1
				f := files[i]
				if f.src.Kind != Log {
					continue
				}
				idx, unchanged := ws.index(f)
				if idx != nil && unchanged && f.size == idx.end && !idx.mayHoldAny(s.q.Grams) {
					out[i] = len(idx.blocks)
				}
				idx.close()
			}
		}()
	}
	wg.Wait()
	return out
}

// views holds the directories a search reads, open: a file is then
// statted and opened with one system call each (see confine.View).
type views struct {
	m map[string]*confine.View
}

func (vs *views) get(r *confine.Root, dir string) (*confine.View, error) {
	key := r.Path() + "\x00" + dir
	if v, ok := vs.m[key]; ok {
		return v, nil
	}
	v, err := r.View(dir)
	if err != nil {
		return nil, err
	}
	if vs.m == nil {
		vs.m = map[string]*confine.View{}
	}
	vs.m[key] = v
	return v, nil
}

func (vs *views) stat(r *confine.Root, rel string) (fs.FileInfo, error) {
	v, err := vs.get(r, filepath.Dir(rel))
	if err != nil {
		return nil, err
	}
	return v.Stat(filepath.Base(rel))
}

func (vs *views) open(f file) (*os.File, fs.FileInfo, error) {
	v, err := vs.get(f.root.Root, filepath.Dir(f.rel))
	if err != nil {
		return nil, nil, err
	}
	fh, fi, err := v.OpenRead(filepath.Base(f.rel))
	if err != nil || !f.gz() {
		return fh, fi, err
	}
	defer fh.Close()
	return gunzipped(fh, fi, f.root.Root.MaxFileSize())
}

func (vs *views) close() {
	for _, v := range vs.m {
		v.Close()
	}
}

// listFiles lists what to search, in result order.
func listFiles(o Options, vs *views, st *Stats) ([]file, error) {
	want := map[string]bool{}
	for _, l := range o.Labels {
		want[l] = true
	}
	// Roots are listed side by side: a home's hundreds of project roots
	// are each a directory read and a stat per file, system calls that
	// take most of a search for a rare word. Each root's files come back
	// in its own slot, so what is listed, and in which order, is as one
	// root after another would list it.
	lists := make([]rootFiles, len(o.Roots))
	var mu sync.Mutex // vs: a file the listing did not stat
	var stat statFunc = func(r *confine.Root, rel string) (fs.FileInfo, error) {
		mu.Lock()
		defer mu.Unlock()
		return vs.stat(r, rel)
	}
	// A root whose kept listing holds is taken here: handing it to a
	// worker cost more than it takes.
	var misses []int
	for i, r := range o.Roots {
		if l, ok := keptRootFiles(o, r); ok {
			lists[i] = l
		} else {
			misses = append(misses, i)
		}
	}
	work := make(chan int)
	var wg sync.WaitGroup
	for range min(len(misses), runtime.GOMAXPROCS(0)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range work {
				lists[i] = cachedListRoot(o, o.Roots[i], want, stat)
			}
		}()
	}
	for _, i := range misses {
		work <- i
	}
	close(work)
	wg.Wait()
	// A root and a name are listed once: only a root listed twice (two
	// stores over one directory) needs its names checked against the
	// first listing's.
	n := 0
	for _, l := range lists {
		n += len(l.files)
	}
	files := make([]file, 0, n)   // grown by append, its copies were a tenth of a rare word's search
	listOf := make([]int32, 0, n) // the list each file came from
	var seen map[string]bool
	rootAt := map[string]int{}
	for i, l := range lists {
		for _, u := range l.unread {
			unread(st, u.f, u.err)
		}
		p := o.Roots[i].Root.Path()
		if _, twice := rootAt[p]; !twice {
			rootAt[p] = len(rootAt)
			files = append(files, l.files...)
			for range l.files {
				listOf = append(listOf, int32(i))
			}
			continue
		}
		if seen == nil {
			seen = map[string]bool{}
			for _, f := range files {
				seen[f.root.Root.Path()+"\x00"+f.rel] = true
			}
		}
		for _, f := range l.files {
			if key := p + "\x00" + f.rel; !seen[key] {
				seen[key] = true
				files = append(files, f)
				listOf = append(listOf, int32(i))
			}
		}
	}
	// Sorted by small keys, the files moved once: a sort of the files
	// themselves moved these large structs most of a rare word's search
	// over a home of thousands of sessions. The order is total.
	paths := slices.Sorted(maps.Keys(rootAt))
	for rank, p := range paths {
		rootAt[p] = rank
	}
	rankOf := make([]int, len(lists))
	for i := range lists {
		rankOf[i] = rootAt[o.Roots[i].Root.Path()]
	}
	type key struct {
		text  bool
		mtime int64
		root  int
		i     int
	}
	keys := make([]key, len(files))
	for i := range files {
		f := &files[i]
		keys[i] = key{f.src.Kind == Text, f.mtime, rankOf[listOf[i]], i}
	}
	slices.SortFunc(keys, func(a, b key) int {
		switch {
		case a.text != b.text:
			if a.text {
				return -1
			}
			return 1
		case a.mtime != b.mtime:
			return cmp.Compare(b.mtime, a.mtime)
		case a.root != b.root:
			return cmp.Compare(a.root, b.root)
		}
		return strings.Compare(files[a.i].rel, files[b.i].rel)
	})
	sorted := make([]file, len(files))
	for k, ky := range keys {
		sorted[k] = files[ky.i]
	}
	files = sorted
	return files, nil
}

// rootFiles is what one root's listing found.
type rootFiles struct {
	files  []file
	unread []struct {
		f   file
		err error
	}
	// srcOf is each file's source, its index in the root's Sources.
	srcOf []int
	// statted: a symlink was followed to what it names: not to be kept
	// (a file a literal pattern names is statted too, but in a directory
	// of the root, whose watches see it change).
	statted bool
}

// statFunc stats a file a listing did not describe.
type statFunc func(r *confine.Root, rel string) (fs.FileInfo, error)

// listRoot lists one root's files for o: the search's sources (labels in
// want, when any), or the files the root names (Listed).
func listRoot(o Options, r Root, want map[string]bool, stat statFunc) rootFiles {
	var out rootFiles
	rp := &r
	seen := map[string]bool{}
	// add lists rel, searched as src, unless listed already; fi is what
	// the root's listing read of it (nil: not listed).
	add := func(si int, rel string, gen int64, fi fs.FileInfo) {
		src := &rp.Sources[si]
		if seen[rel] || !r.holds(rel) {
			return
		}
		if fi == nil || !fi.Mode().IsRegular() {
			// Not listed, or a symlink: stat it as a search opens it.
			var err error
			out.statted = out.statted || fi != nil // a symlink
			if fi, err = stat(r.Root, rel); err != nil {
				return
			}
		}
		if !fi.Mode().IsRegular() || confine.IsTemp(rel) {
			return
		}
		seen[rel] = true
		f := file{root: rp, rel: rel, src: &rp.Sources[si], mtime: fi.ModTime().UnixNano(), size: fi.Size(), gen: max(gen, 1), readable: r.Root.Owner().MayRead(fi)}
		if st, ok := fi.Sys().(*syscall.Stat_t); ok {
			f.dev, f.ino, f.ctime = uint64(st.Dev), uint64(st.Ino), confine.ChangeTime(st)
		}
		if o.Generation != nil && src.Kind == Log && gen == 0 {
			if g := o.Generation(r.Root, rel); g > 0 {
				f.gen = g
			}
		}
		out.files = append(out.files, f)
		out.srcOf = append(out.srcOf, si)
	}
	if r.Listed != nil {
		for _, l := range r.Listed {
			if l.Source < 0 || l.Source >= len(r.Sources) {
				continue
			}
			if src := r.Sources[l.Source]; (len(want) == 0 || want[src.Label]) && src.Kind != Records {
				add(l.Source, l.Rel, l.Gen, nil)
			}
		}
		return out
	}
	// One listing of the root for all its sources: each directory read
	// once, each file's lstat read with it.
	listing := r.Root.Listing()
	for si, src := range r.Sources {
		if len(want) > 0 && !want[src.Label] {
			continue
		}
		if src.Kind == Records {
			continue // searched through Options.Held
		}
		ms, err := listing.GlobExcept(src.Glob, src.Exclude)
		if err != nil {
			// A root this caller cannot list is left out, not the search.
			out.unread = append(out.unread, struct {
				f   file
				err error
			}{file{root: rp, rel: src.Glob}, err})
			continue
		}
		for _, m := range ms {
			add(si, m.Rel, 0, m.Info)
		}
	}
	return out
}

// searcher is one search in progress.
type searcher struct {
	q       Query
	o       Options
	ctx     context.Context
	results []Result
	stats   Stats
	buf     []byte // reused read buffer
	views   *views
	indexes map[string]map[string]bool // the index files there are, by index, listed once
	idxBuf  []byte                     // the small index being read (readIndex's scratch)
	ids     map[string]bool            // messages found, by root, file and id
	sampled string                     // the file the anchor's rare byte was chosen from
	folds   map[string]foldAt          // results by the text they hold (fold.go)
}

// sample chooses the anchor byte to scan for from the data searched (its
// first 64 KiB): once per search, and again for each large file, where
// the choice matters.
func (s *searcher) sample(f file, data []byte) {
	key := f.root.Root.Path() + "\x00" + f.rel
	if s.sampled == key || s.sampled != "" && f.size < 4<<20 {
		return
	}
	s.sampled = key
	s.q.Rare = query.RareFor(s.q.Anchor, data[:min(len(data), 64<<10)])
}

// emit adds a matching line; it returns errLimit once the search is done.
// Past the limit it only counts matches, up to Options.More.
func (s *searcher) emit(f file, line int64, raw, text []byte, at int) error {
	if s.q.Only != "" && !holdsKind(text, s.q.Only) {
		return nil
	}
	if len(s.results) >= s.o.Limit {
		s.stats.More++
		if s.stats.More >= s.o.More {
			s.stats.MoreCapped = true
			return errLimit
		}
		return nil
	}
	cite := f.src.cite(f.rel)
	r := Result{Source: f.src.Label, LineNumber: line, Text: query.Snippet(text, at), Project: f.root.project(), Moved: f.src.Moved}
	if f.src.Kind != Text {
		r.Time = session.Decode(raw).Time
	}
	if r.Time.IsZero() && f.mtime > 0 {
		r.Time = time.Unix(0, f.mtime)
	}
	at2 := ""
	if f.src.Kind == Log && f.gen > 1 {
		at2 = "@" + strconv.FormatInt(f.gen, 10)
	}
	if len(s.o.Roots) > 1 || s.o.NameRoots {
		// Several roots: the citation names the file by its whole path, so
		// it stands alone (memwatch show takes it as printed).
		r.Session, r.Root, r.Store = f.root.Name, f.root.shown(), f.root.Store
		cite = path.Join(filepath.ToSlash(f.root.shown()), cite)
		if f.root.Host != "" {
			r.Host = f.root.Host
			cite = f.root.Host + ":" + cite
		}
	}
	if f.src.Kind == Text {
		r.FilePath = cite
	}
	r.Citation = fmt.Sprintf("%s%s#L%d", cite, at2, line)
	if s.fold(f, text, r) {
		return nil
	}
	s.results = append(s.results, r)
	if len(s.results) >= s.o.Limit && s.o.More <= 0 {
		return errLimit
	}
	return nil
}

// region is a run of complete lines of a file, read into memory. A line
// longer than MaxLine is held cut (its first MaxLine bytes, then a newline).
type region struct {
	data  []byte
	start int64 // file offset of data[0]
	next  int64 // file offset just after the region's last line
}

// check tests one line; a candidate line of a log is decoded first.
func (s *searcher) check(f file, raw []byte) ([]byte, int, bool) {
	if len(raw) > s.o.MaxLine {
		raw = raw[:s.o.MaxLine]
	}
	if f.src.Kind == Log && !s.q.RawCandidate(raw) {
		return nil, 0, false
	}
	text, id := searchTextID(f.src.Kind, raw)
	at, ok := s.q.Matches(text)
	if ok && id != "" {
		// One result per message: a message the agent wrote again (with
		// its tokens, a finished tool call) is found once, newest first.
		key := f.root.Root.Path() + "\x00" + f.rel + "\x00" + id
		if s.ids[key] {
			return nil, 0, false
		}
		if s.ids == nil {
			s.ids = map[string]bool{}
		}
		s.ids[key] = true
	}
	return text, at, ok
}

// forward searches the complete lines of a region in order; line is the
// number of its first line.
func (s *searcher) forward(f file, r region, line int64) error {
	data := r.data
	for pos := 0; pos < len(data); {
		i := pos // no ASCII anchor: every line
		if len(s.q.Anchor) > 0 {
			s.sample(f, data)
			j := query.IndexFoldAt(data[pos:], s.q.Anchor, s.q.Rare)
			if j < 0 {
				return nil
			}
			i = pos + j
		}
		ls := bytes.LastIndexByte(data[:i], '\n') + 1
		le := len(data)
		if j := bytes.IndexByte(data[i:], '\n'); j >= 0 {
			le = i + j
		}
		line += int64(bytes.Count(data[pos:ls], []byte{'\n'}))
		if text, at, ok := s.check(f, data[ls:le]); ok {
			if err := s.emit(f, line, data[ls:le], text, at); err != nil {
				return err
			}
		}
		pos = le + 1
		line++
	}
	return nil
}

// backward searches the complete lines of a region from its last line to
// its first; lineAt gives the number of the line starting at an offset
// in the region, from the count of newlines before it there.
func (s *searcher) backward(f file, r region, lineAt func(nlBefore int64) int64) error {
	if len(s.q.Anchor) > 0 {
		s.sample(f, r.data)
	}
	return s.checkBackward(f, r.data, candidates(r.data, s.q.Anchor, s.q.Rare, nil), lineAt)
}

// cand is a line of a region that holds the query's anchor: its start and
// end in the region and the count of newlines before it there.
type cand struct {
	ls, le int
	nl     int64
}

// candidates lists, in one forward pass, the lines of data holding the
// anchor (every line when there is none), appended to out. It reads only
// data and the query: the parallel scan runs it on several chunks at once.
func candidates(data, anchor []byte, rare int, out []cand) []cand {
	var nl int64
	counted := 0
	for pos := 0; pos < len(data); {
		i := pos
		if len(anchor) > 0 {
			j := query.IndexFoldAt(data[pos:], anchor, rare)
			if j < 0 {
				break
			}
			i = pos + j
		}
		ls := bytes.LastIndexByte(data[:i], '\n') + 1
		le := len(data)
		if j := bytes.IndexByte(data[i:], '\n'); j >= 0 {
			le = i + j
		}
		nl += int64(bytes.Count(data[counted:ls], []byte{'\n'}))
		counted = ls
		out = append(out, cand{ls, le, nl})
		pos = le + 1
	}
	return out
}

// checkBackward checks a region's candidate lines from the last.
func (s *searcher) checkBackward(f file, data []byte, cands []cand, lineAt func(nlBefore int64) int64) error {
	for k := len(cands) - 1; k >= 0; k-- {
		c := cands[k]
		if text, at, ok := s.check(f, data[c.ls:c.le]); ok {
			if err := s.emit(f, lineAt(c.nl), data[c.ls:c.le], text, at); err != nil {
				return err
			}
		}
	}
	return nil
}

// searchText reads a notes file from the top (through the index when it
// covers it).
func (s *searcher) searchText(f file) error {
	idx, unchanged := s.index(f)
	if unchanged && f.size == idx.end && !idx.mayHoldAny(s.q.Grams) {
		// Not written since it was indexed, and no block can match: a
		// search over hundreds of notes opens only those that may.
		s.counted(idx)
		idx.close()
		return nil
	}
	fh, fi, err := s.views.open(f)
	if err != nil {
		idx.close()
		return err
	}
	defer fh.Close()
	idx = s.usable(idx, fh, fi)
	defer idx.close()
	var end, line int64 = 0, 1
	if idx != nil {
		for _, b := range idx.blocks {
			if !b.mayHold(s.q.Grams) {
				continue
			}
			s.stats.BlocksRead++
			r, err := s.read(fh, b.off, b.size)
			if err != nil {
				return err
			}
			if err := s.forward(f, r, b.first); err != nil {
				return err
			}
		}
		end, line = idx.end, idx.lines+1
	}
	return s.readForward(f, fh, end, line)
}

// readForward searches a file from offset end (the start of line number
// line) to its end, in chunks of whole lines.
func (s *searcher) readForward(f file, fh *os.File, end, line int64) error {
	const chunk = 4 << 20
	for {
		// A small file is read in one go into a buffer its size (a little
		// more, in case it grew since it was listed).
		r, err := s.readLines(fh, end, min(chunk, max(f.size-end, 0)+4096))
		if err != nil || len(r.data) == 0 {
			return err
		}
		if err := s.forward(f, r, line); err != nil {
			return err
		}
		line += int64(bytes.Count(r.data, []byte{'\n'}))
		end = r.next
		if r.data[len(r.data)-1] != '\n' {
			return nil // the last line, without a newline
		}
	}
}

// searchLog reads a log from its end backwards (through the index when it
// covers it).
func (s *searcher) searchLog(f file) error {
	idx, unchanged := s.index(f)
	if idx != nil && unchanged && f.size == idx.end && !idx.mayHoldAny(s.q.Grams) {
		// Indexed whole and unchanged since: no block can hold the query,
		// and the file is not even opened (a home of thousands of logs
		// costs an index read each for a rare word).
		s.counted(idx)
		idx.close()
		return nil
	}
	fh, fi, err := s.views.open(f)
	if err != nil {
		idx.close()
		return err
	}
	defer fh.Close()
	size := fi.Size()
	idx = s.usable(idx, fh, fi)
	defer idx.close()
	if idx != nil {
		// The part written since the last complete block: its lines follow
		// the indexed ones.
		if size > idx.end {
			r, err := s.read(fh, idx.end, size-idx.end)
			if err != nil {
				return err
			}
			if err := s.backward(f, r, func(nl int64) int64 { return idx.lines + 1 + nl }); err != nil {
				return err
			}
		}
		for k := len(idx.blocks) - 1; k >= 0; k-- {
			b := idx.blocks[k]
			if !b.mayHold(s.q.Grams) {
				continue
			}
			s.stats.BlocksRead++
			r, err := s.read(fh, b.off, b.size)
			if err != nil {
				return err
			}
			if err := s.backward(f, r, func(nl int64) int64 { return b.first + nl }); err != nil {
				return err
			}
		}
		return nil
	}
	return s.scanBackward(f, fh, size)
}

// scanChunk is how much of a log the scan reads at a time: small enough
// that the bytes a read copies are still in the CPU's cache when they are
// counted and searched (256 KiB: 72 ms for 370 MiB here, 4 MiB: 85 ms).
const scanChunk = 256 << 10

// scanBackward searches a whole log from its end in chunks of whole
// lines. Line numbers are counted from the end and settled once the
// number of lines before the last chunk read is known. A log of several
// chunks is read and pre-scanned by several goroutines (see parallel).
func (s *searcher) scanBackward(f file, fh *os.File, size int64) error {
	end := size
	var nlAfter int64 // newlines at or after end
	var stopErr error
	// take searches one region, the one just before end.
	take := func(r region, regionNL int64, cands []cand) error {
		if err := s.ctx.Err(); err != nil {
			return err // the client left: a chunk at a time, the work stops
		}
		base := nlAfter + regionNL // newlines from the region's start to the file's end
		// A result's line number is 1 + newlines before it in the file =
		// 1 + N - (newlines from its start to the end); N comes later.
		// Until then it is held as -1 - (newlines from its start to the
		// end), below zero whatever the line.
		err := s.checkBackward(f, r.data, cands, func(nl int64) int64 { return -1 - (base - nl) })
		nlAfter = base
		end = r.start
		return err
	}
	if s.o.workers() > 1 && size > 4*scanChunk {
		// The anchor's rare byte, chosen from the log's last bytes (as the
		// sequential scan does from its first chunk) before the workers
		// read the query.
		if len(s.q.Anchor) > 0 {
			r, err := s.read(fh, max(0, size-64<<10), min(size, 64<<10))
			if err != nil {
				return err
			}
			s.sample(f, r.data)
		}
		stopErr = s.parallel(fh, size, take)
		if errors.Is(stopErr, errLongLine) {
			stopErr = nil // the sequential scan reads on from end
		}
	}
	for end > 0 && stopErr == nil {
		r, err := s.readLinesBack(fh, end, scanChunk)
		if err != nil {
			return err
		}
		if len(s.q.Anchor) > 0 {
			s.sample(f, r.data)
		}
		stopErr = take(r, int64(bytes.Count(r.data, []byte{'\n'})), candidates(r.data, s.q.Anchor, s.q.Rare, nil))
	}
	if stopErr != nil && !errors.Is(stopErr, errLimit) {
		return stopErr
	}
	// Newlines before where the scan stopped, counted without decoding.
	total := nlAfter
	if end > 0 {
		n, err := countNewlines(fh, end, s.o.workers())
		if err != nil {
			return err
		}
		total += n
	}
	// This file's results, and the copies folded into any result, carry
	// their line counted from the end (negative) until now.
	for i := range s.results {
		r := &s.results[i]
		if r.LineNumber < 0 {
			r.LineNumber = 2 + total + r.LineNumber
			r.Citation = fixCitation(r.Citation, r.LineNumber)
		}
		for k, c := range r.Folded {
			if neg, ok := citedLine(c); ok && neg < 0 {
				r.Folded[k] = fixCitation(c, 2+total+neg)
			}
		}
	}
	return stopErr
}

// workers is how many goroutines read a large log at once: the copy from
// the page cache and the byte scans are most of a search's cost, and they
// divide.
func (o Options) workers() int {
	if o.Workers > 0 {
		return o.Workers
	}
	return min(runtime.GOMAXPROCS(0), 4)
}

// errLongLine stops the parallel scan at a line too long for its chunks;
// the sequential scan goes on from there.
var errLongLine = errors.New("a line longer than a scan chunk")

// parallel searches the log before end (a line start, or the file's end)
// backwards with Options.Workers goroutines: each reads a chunk of about
// scanChunk bytes (one pread, the data still in the CPU's cache for the
// byte scans), counts its newlines and finds its candidate lines, and take
// searches the chunks one at a time, newest first. So the results, their
// order and where the search stops at the limit are the sequential
// scan's, and only take touches the searcher.
//
// Chunk k holds the lines that start in [end-(k+1)*scanChunk,
// end-k*scanChunk): each worker finds them itself, from the newline before
// its range and the one that ends its last line, so no chunk waits for
// another. A line that runs more than maxTail past its range stops the
// parallel scan with errLongLine (the sequential one reads it). At most
// 2*workers+2 chunks are held at once: a worker takes a buffer before it
// takes a chunk, so the chunk take waits for always has one.
func (s *searcher) parallel(fh *os.File, end int64, take func(r region, regionNL int64, cands []cand) error) error {
	const maxTail = 64 << 10
	type chunk struct {
		r     region
		nl    int64
		cands []cand
		buf   []byte
		err   error
	}
	workers := s.o.workers()
	n := int((end + scanChunk - 1) / scanChunk)
	out := make([]chan chunk, n)
	jobs := make(chan int, n)
	for k := range n {
		out[k] = make(chan chunk, 1)
		jobs <- k
	}
	close(jobs)
	pool := make(chan []byte, 2*workers+2)
	for range cap(pool) {
		pool <- nil // allocated by the worker that first takes it
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	anchor, rare := s.q.Anchor, s.q.Rare
	// read reads chunk k into buf: the lines starting in its range.
	read := func(k int, buf []byte) chunk {
		lo, hi := max(0, end-int64(k+1)*scanChunk), end-int64(k)*scanChunk
		from := max(0, lo-1) // the byte before the range says whether a line starts at lo
		want := hi - from + 4096
		if int64(cap(buf)) < want {
			buf = make([]byte, want, hi-from+maxTail)
		}
		data := buf[:want]
		m, err := fh.ReadAt(data, from)
		eof := errors.Is(err, io.EOF) || from+int64(m) >= end
		if err != nil && !errors.Is(err, io.EOF) {
			return chunk{buf: buf, err: err}
		}
		data = data[:min(int64(m), end-from)]
		// The end of the last line starting before hi.
		last := -1
		for {
			if i := bytes.IndexByte(data[min(int64(len(data)), hi-1-from):], '\n'); i >= 0 {
				last = int(hi-1-from) + i
				break
			}
			if eof {
				break
			}
			if int64(len(data)) >= hi-from+maxTail {
				return chunk{buf: buf, err: errLongLine}
			}
			more := min(int64(cap(buf))-int64(len(data)), 16<<10)
			next := buf[len(data) : int64(len(data))+more]
			m, err := fh.ReadAt(next, from+int64(len(data)))
			if err != nil && !errors.Is(err, io.EOF) {
				return chunk{buf: buf, err: err}
			}
			eof = errors.Is(err, io.EOF) || from+int64(len(data)+m) >= end
			data = buf[:min(int64(len(data)+m), end-from)]
		}
		stop := len(data)
		if last >= 0 {
			stop = last + 1
		}
		start := 0
		if lo > 0 {
			start = stop
			if i := bytes.IndexByte(data[:stop], '\n'); i >= 0 {
				start = i + 1
			}
		}
		r := region{data: data[start:stop], start: from + int64(start), next: from + int64(stop)}
		return chunk{r: r, buf: buf, nl: int64(bytes.Count(r.data, []byte{'\n'})), cands: candidates(r.data, anchor, rare, nil)}
	}
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				var buf []byte
				select {
				case <-stop:
					return
				case buf = <-pool:
				}
				k, ok := <-jobs
				if !ok {
					return
				}
				out[k] <- read(k, buf)
			}
		}()
	}
	defer func() {
		close(stop)
		wg.Wait()
	}()
	for k := range n {
		c := <-out[k]
		if c.err != nil {
			return c.err
		}
		s.stats.BytesRead += int64(len(c.r.data))
		err := take(c.r, c.nl, c.cands)
		pool <- c.buf
		if err != nil {
			return err
		}
	}
	return nil
}

// fixCitation replaces the line number at the end of a citation.
// citedLine is the line a citation names (the number after its last #L).
func citedLine(c string) (int64, bool) {
	i := strings.LastIndex(c, "#L")
	if i < 0 {
		return 0, false
	}
	n, err := strconv.ParseInt(c[i+2:], 10, 64)
	return n, err == nil
}

func fixCitation(c string, line int64) string {
	if i := bytes.LastIndex([]byte(c), []byte("#L")); i >= 0 {
		return c[:i] + "#L" + strconv.FormatInt(line, 10)
	}
	return c
}

// countNewlines counts the newlines in the first n bytes of a file, in
// parts at once when it is large.
func countNewlines(fh *os.File, n int64, parts int) (int64, error) {
	workers := int64(parts)
	if workers < 2 || n < 4*scanChunk {
		return countRange(fh, 0, n)
	}
	counts := make([]int64, workers)
	errs := make([]error, workers)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			counts[w], errs[w] = countRange(fh, n*w/workers, n*(w+1)/workers)
		}()
	}
	wg.Wait()
	var total int64
	for w := range workers {
		if errs[w] != nil {
			return 0, errs[w]
		}
		total += counts[w]
	}
	return total, nil
}

// countRange counts the newlines in the bytes [from, to) of a file.
func countRange(fh *os.File, from, to int64) (int64, error) {
	buf := make([]byte, min(1<<20, max(to-from, 0)))
	var total int64
	for off := from; off < to; {
		k, err := fh.ReadAt(buf[:min(int64(len(buf)), to-off)], off)
		total += int64(bytes.Count(buf[:k], []byte{'\n'}))
		off += int64(k)
		if err != nil && !errors.Is(err, io.EOF) {
			return total, err
		}
		if k == 0 {
			break
		}
	}
	return total, nil
}

// read reads n bytes at off into the reused buffer.
func (s *searcher) read(fh *os.File, off, n int64) (region, error) {
	if int64(cap(s.buf)) < n {
		s.buf = make([]byte, n)
	}
	b := s.buf[:n]
	k, err := fh.ReadAt(b, off)
	s.stats.BytesRead += int64(k)
	if err != nil && !errors.Is(err, io.EOF) {
		return region{}, err
	}
	return region{data: b[:k], start: off, next: off + int64(k)}, nil
}

// readLines reads whole lines from off, about n bytes; a line longer than
// that is searched in its start and its rest skipped, so nothing bigger
// than a chunk is ever held. At the end of the file the last line may lack its newline.
func (s *searcher) readLines(fh *os.File, off, n int64) (region, error) {
	r, err := s.read(fh, off, n)
	if err != nil || len(r.data) == 0 {
		return r, err
	}
	if int64(len(r.data)) < n {
		return r, nil // the end of the file
	}
	if i := bytes.LastIndexByte(r.data, '\n'); i >= 0 {
		r.data = r.data[:i+1]
		r.next = off + int64(i) + 1
		return r, nil
	}
	// A line longer than the chunk: search its start, skip its rest.
	nl, err := nextNewline(fh, off+int64(len(r.data)))
	if err != nil {
		return r, err
	}
	cut := append(r.data[:min(len(r.data), s.o.MaxLine):min(len(r.data), s.o.MaxLine)], '\n')
	return region{data: cut, start: off, next: nl + 1}, nil
}

// readLinesBack reads whole lines ending at end (a line start, or the end
// of the file), about n bytes, in the same way.
func (s *searcher) readLinesBack(fh *os.File, end, n int64) (region, error) {
	off := max(0, end-n)
	r, err := s.read(fh, off, end-off)
	if err != nil || off == 0 {
		return r, err
	}
	if i := bytes.IndexByte(r.data, '\n'); i >= 0 && i < len(r.data)-1 {
		return region{data: r.data[i+1:], start: off + int64(i) + 1, next: end}, nil
	}
	// No line starts in the chunk: a line longer than it. Find its start
	// without holding it, then search its first MaxLine bytes.
	ls, err := prevNewline(fh, off)
	if err != nil {
		return r, err
	}
	head, err := s.read(fh, ls, min(end-ls, int64(s.o.MaxLine)))
	if err != nil {
		return r, err
	}
	data := head.data
	if i := bytes.IndexByte(data, '\n'); i >= 0 {
		data = data[:i+1]
	} else {
		data = append(data[:len(data):len(data)], '\n')
	}
	return region{data: data, start: ls, next: end}, nil
}

// nextNewline returns the offset of the first newline at or after off
// (the file's size when there is none).
func nextNewline(fh *os.File, off int64) (int64, error) {
	buf := make([]byte, 1<<20)
	for {
		k, err := fh.ReadAt(buf, off)
		if i := bytes.IndexByte(buf[:k], '\n'); i >= 0 {
			return off + int64(i), nil
		}
		off += int64(k)
		if errors.Is(err, io.EOF) || k == 0 {
			return off, nil
		}
		if err != nil {
			return off, err
		}
	}
}

// prevNewline returns the start of the line holding offset off.
func prevNewline(fh *os.File, off int64) (int64, error) {
	buf := make([]byte, 1<<20)
	for off > 0 {
		from := max(0, off-int64(len(buf)))
		k, err := fh.ReadAt(buf[:off-from], from)
		if err != nil && !errors.Is(err, io.EOF) {
			return 0, err
		}
		if i := bytes.LastIndexByte(buf[:k], '\n'); i >= 0 {
			return from + int64(i) + 1, nil
		}
		off = from
	}
	return 0, nil
}

// searchHeld searches the messages the spool holds beyond the live files,
// of the logs (and databases) the roots' sources name.
func (s *searcher) searchHeld() error {
	want := map[string]bool{}
	for _, l := range s.o.Labels {
		want[l] = true
	}
	for ri := range s.o.Roots {
		r := &s.o.Roots[ri]
		var srcs []Source
		for _, src := range r.Sources {
			if (src.Kind == Log || src.Kind == Records) && (len(want) == 0 || want[src.Label]) {
				srcs = append(srcs, src)
			}
		}
		if len(srcs) == 0 {
			continue
		}
		// What a held line is searched as: a log of its source's label.
		held := make([]Source, len(srcs))
		for i, src := range srcs {
			held[i] = Source{Kind: Log, Label: src.Label, Strip: src.Strip}
		}
		err := s.o.Held(s.ctx, r.Root, func(rel string, gen, line int64, raw []byte) error {
			name, _, _ := strings.Cut(rel, "#") // a database's conversation: DB#ID
			i := slices.IndexFunc(srcs, func(src Source) bool { return src.holds(name) })
			if i < 0 || !r.holds(name) || !r.holdsHeld(rel) {
				return nil
			}
			f := file{root: r, rel: rel, src: &held[i], gen: gen}
			s.stats.BytesRead += int64(len(raw))
			if text, at, ok := s.check(f, raw); ok {
				return s.emit(f, line, raw, text, at)
			}
			return nil
		})
		if err != nil {
			return err
		}
	}
	return nil
}
