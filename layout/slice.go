package layout

import (
	"context"
	"errors"
	"slices"
	"sync"
	"time"

	"github.com/memwatch/memwatch/confine"
	"github.com/memwatch/memwatch/control"
	"github.com/memwatch/memwatch/jobs"
)

// A root may hold a million session logs. An evaluation that went through
// all of them in one job would hold a job slot for many minutes (and run
// into job_timeout), while other users' roots wait. So a rule goes through
// a root's files in slices (EachFile): a slice ends after SliceBudget and
// the evaluation returns ErrMore, the daemon evaluates the root again
// after the work queued meanwhile, and the next slice goes on where the
// last stopped (a confine.Scan kept open between them), never listing the
// files again from the start.

// SliceBudget is how long one slice of an evaluation works at most.
const SliceBudget = 2 * time.Second

// ErrMore says an evaluation stopped at the end of its slice with more to
// go: the daemon evaluates the root again after the work queued meanwhile.
var ErrMore = errors.New("more to evaluate in the next slice")

// Scans keeps the scans of evaluations in progress, between their slices,
// and how far each is. Safe for concurrent use.
type Scans struct {
	mu sync.Mutex
	m  map[string]*confine.Scan
	// at is each pass's progress, by key; a pass that ended leaves it.
	at map[string]*Progress
	// changed is, by root path, what changed since its passes (see
	// Changed).
	changed map[string]*rootChanges
	files   int // the changed files kept, of every root
}

// An agent's write makes the daemon evaluate the root it wrote in, and an
// evaluation went through every file of the root: in a project of 1,000
// sessions, 8 ms of a write's 14 (a listing, a stat and a look-up each),
// growing with the project. The watcher says which files changed, and
// their capture is queued as they are written; an evaluation started by
// changes needs only those (Changed, EachFile). A pass through every file
// still comes at least every FullPassEvery, and whenever what changed is
// not known file by file (a root found or rescanned, a flood of changes, a
// capture dropped, too many files changed at once): it alone finds what no
// change said.

// FullPassEvery is how long an evaluation that follows changes may go
// through the changed files alone since a rule's last pass through all.
const FullPassEvery = time.Minute

// maxChanged bounds the files followed one by one in a root between
// passes, maxChangedAll in all roots (a root whose evaluations fail keeps
// its files); past them the next evaluation goes through every file.
const (
	maxChanged    = 4096
	maxChangedAll = 1 << 18
)

// rootChanges is what changed in a root: each file with the number of its
// last change, and the passes of each rule (by EachFile's key).
type rootChanges struct {
	seq   uint64
	files map[string]uint64
	// whole is seq when a change came that was not told file by file.
	whole  uint64
	passes map[string]*rulePass
}

// rulePass is where a rule's evaluation of a root stands: the changes up
// to seen went through it; full is when its last pass through every file
// ended, from is seq when the pass under way (running) began.
type rulePass struct {
	seen, from uint64
	full       time.Time
	running    bool
}

// needs reports whether the pass may still go through changed files: one
// under way, or one whose next evaluation may follow changes. Another
// (of a root's earlier identity, or a minute old) begins with a pass
// through every file and needs none kept for it.
func (p *rulePass) needs(now time.Time) bool {
	return p.running || !p.full.IsZero() && now.Sub(p.full) < FullPassEvery
}

type followKey struct{}

// FollowingChanges marks an evaluation started by the watcher's changes
// of files: EachFile may go through the files changed since instead of
// every one.
func FollowingChanges(ctx context.Context) context.Context {
	return context.WithValue(ctx, followKey{}, true)
}

func followsChanges(ctx context.Context) bool {
	ok, _ := ctx.Value(followKey{}).(bool)
	return ok
}

// Changed counts the files rels of root (relative to it) as changed; with
// none, the root changed in ways not told file by file (the next
// evaluation goes through every file).
func (s *Scans) Changed(root string, rels ...string) {
	if s == nil {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	rc := s.rootChanges(root)
	rc.seq++
	kept := len(rc.files)
	defer func() { s.files += len(rc.files) - kept }()
	if len(rels) == 0 || kept+len(rels) > maxChanged || s.files+len(rels) > maxChangedAll {
		rc.whole = rc.seq
		clear(rc.files)
		return
	}
	if rc.files == nil {
		rc.files = map[string]uint64{}
	}
	for _, rel := range rels {
		rc.files[rel] = rc.seq
	}
}

// Followed reports where the evaluations of root stand against its
// changes: when a rule last went through every file (the latest of its
// rules'), how many changes were told, and how far the rule furthest
// behind went through them.
func (s *Scans) Followed(root string) (lastAll time.Time, told, through uint64) {
	s.withChanges(root, func(rc *rootChanges) {
		told, through = rc.seq, rc.seq
		for _, p := range rc.passes {
			if p.full.After(lastAll) {
				lastAll = p.full
			}
			through = min(through, p.seen)
		}
	})
	return lastAll, told, through
}

// withChanges calls fn with root's changes, s locked; not when none are
// kept.
func (s *Scans) withChanges(root string, fn func(rc *rootChanges)) {
	if s == nil {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if rc := s.changed[root]; rc != nil {
		fn(rc)
	}
}

// maxRoots bounds the roots whose changes are followed: past it they are
// all forgotten, each root's next evaluation a pass through every file.
const maxRoots = 1 << 16

func (s *Scans) rootChanges(root string) *rootChanges {
	if s.changed == nil || len(s.changed) >= maxRoots && s.changed[root] == nil {
		s.changed, s.files = map[string]*rootChanges{}, 0
	}
	rc := s.changed[root]
	if rc == nil {
		rc = &rootChanges{passes: map[string]*rulePass{}} // files made by Changed: most roots are never written
		s.changed[root] = rc
	}
	return rc
}

// changedSince returns the files of root changed since the last pass of
// key, sorted, and the change they go up to; ok is false when the
// evaluation must go through every file.
func (s *Scans) changedSince(root, key string, now time.Time) (rels []string, upto uint64, ok bool) {
	s.withChanges(root, func(rc *rootChanges) {
		p := rc.passes[key]
		if p == nil || p.full.IsZero() || now.Sub(p.full) >= FullPassEvery || rc.whole > p.seen {
			return
		}
		for rel, seq := range rc.files {
			if seq > p.seen {
				rels = append(rels, rel)
			}
		}
		slices.Sort(rels)
		upto, ok = rc.seq, true
	})
	return rels, upto, ok
}

// passBegins notes a pass of key through every file of root beginning.
func (s *Scans) passBegins(root, key string) {
	if s == nil {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	rc := s.rootChanges(root)
	p := rc.passes[key]
	if p == nil {
		p = &rulePass{}
		rc.passes[key] = p
	}
	p.from, p.running = rc.seq, true
}

// passed notes key's evaluation of root done: through the changes up to
// upto, or (full) through every file, since the changes its pass began
// after. The changes every rule that needs them went through are
// forgotten.
func (s *Scans) passed(root, key string, upto uint64, full bool, now time.Time) {
	s.withChanges(root, func(rc *rootChanges) {
		p := rc.passes[key]
		if p == nil {
			return
		}
		if full {
			p.seen, p.full, p.running = p.from, now, false
		} else {
			p.seen = max(p.seen, upto)
		}
		least := rc.seq
		for _, q := range rc.passes {
			if q.needs(now) {
				least = min(least, q.seen)
			}
		}
		for rel, seq := range rc.files {
			if seq <= least {
				delete(rc.files, rel)
				s.files--
			}
		}
	})
}

// Progress is how far a pass through a large root's files is (the
// status answer's type).
type Progress = control.Progress

// Progress lists the passes under way, oldest first.
func (s *Scans) Progress() []Progress {
	if s == nil {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []Progress
	for _, p := range s.at {
		q := *p
		if el := time.Since(q.Since).Seconds(); el > 0 {
			q.Rate = float64(q.Files) / el
		}
		if q.Total > q.Files && q.Rate > 0 {
			q.Left = time.Duration(float64(q.Total-q.Files) / q.Rate * float64(time.Second)).Round(time.Second)
		}
		out = append(out, q)
	}
	slices.SortFunc(out, func(a, b Progress) int { return a.Since.Compare(b.Since) })
	return out
}

func (s *Scans) progress(key string) *Progress {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.at[key]
}

func (s *Scans) setProgress(key string, p *Progress) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.at == nil {
		s.at = map[string]*Progress{}
	}
	if p == nil {
		delete(s.at, key)
		return
	}
	s.at[key] = p
}

func (s *Scans) add(p *Progress, files int) {
	s.mu.Lock()
	p.Files += int64(files)
	s.mu.Unlock()
}

// maxScans bounds the scans kept open (each holds a directory or a few).
const maxScans = 1024

func (s *Scans) take(key string) *confine.Scan {
	if s == nil {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	sc := s.m[key]
	delete(s.m, key)
	return sc
}

func (s *Scans) put(key string, sc *confine.Scan) {
	if s == nil {
		sc.Close()
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.m == nil {
		s.m = map[string]*confine.Scan{}
	}
	if len(s.m) >= maxScans {
		for k, old := range s.m { // one out: its evaluation starts over
			old.Close()
			delete(s.m, k)
			break
		}
	}
	s.m[key] = sc
}

// Close closes every scan kept.
func (s *Scans) Close() {
	if s == nil {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for k, sc := range s.m {
		sc.Close()
		delete(s.m, k)
	}
}

// EachFile calls fn for the files of root that pattern matches (except
// base names matching exclude), going on from where the last slice of
// this rule's evaluation stopped, for at most SliceBudget: then it keeps
// its place and returns ErrMore. It returns nil once it went through every
// file (the next call starts a new pass), or the first error of fn. A
// stopping daemon (jobs.Stopping) ends the slice at once.
func (e *Env) EachFile(ctx context.Context, root *confine.Root, rule, pattern, exclude string, fn func(rel string) error) error {
	key := root.ID().Key() + "\x00" + rule + "\x00" + pattern + "\x00" + exclude
	sc := e.Scans.take(key)
	var prog *Progress
	if e.Scans != nil {
		prog = e.Scans.progress(key)
	}
	if sc == nil && followsChanges(ctx) {
		if rels, upto, ok := e.Scans.changedSince(root.Path(), key, e.now()); ok {
			return e.eachChanged(root, key, pattern, exclude, rels, upto, fn)
		}
	}
	if sc == nil {
		var err error
		if sc, err = root.GlobScan(pattern, exclude); err != nil {
			return err
		}
		e.Scans.passBegins(root.Path(), key)
		prog = nil
	}
	start := time.Now()
	seen := 0
	for {
		rels, done := sc.Next(64)
		seen += len(rels)
		for _, rel := range rels {
			if err := fn(rel); err != nil {
				sc.Close()
				e.Scans.setProgress(key, nil)
				return err
			}
		}
		if prog != nil {
			e.Scans.add(prog, len(rels))
		}
		if done {
			sc.Close()
			if e.Scans != nil {
				e.Scans.setProgress(key, nil)
				e.Scans.passed(root.Path(), key, 0, true, e.now())
			}
			return nil
		}
		if ctx.Err() != nil || jobs.Stopping(ctx) || time.Since(start) >= SliceBudget {
			if e.Scans != nil && prog == nil {
				// A pass longer than a slice: how far it is, of how many
				// (counted once, by a scan that only reads names).
				prog = &Progress{Store: e.Store.Name, Root: root.Path(), Rule: rule, Since: start, Files: int64(seen)}
				prog.Total = countFiles(root, pattern, exclude)
				e.Scans.setProgress(key, prog)
			}
			e.Scans.put(key, sc)
			return ErrMore
		}
	}
}

// eachChanged is EachFile through the files changed since key's last
// pass: those pattern matches that are still files (a pass lists no file
// deleted or a directory; the spool's gone logs are looked for apart).
func (e *Env) eachChanged(root *confine.Root, key, pattern, exclude string, rels []string, upto uint64, fn func(rel string) error) error {
	for _, rel := range rels {
		if !confine.Match(pattern, exclude, rel) {
			continue
		}
		if fi, err := root.Lstat(rel); err != nil || fi.IsDir() {
			continue
		}
		if err := fn(rel); err != nil {
			return err
		}
	}
	e.Scans.passed(root.Path(), key, upto, false, e.now())
	return nil
}

func (e *Env) now() time.Time {
	if e.Now != nil {
		return e.Now()
	}
	return time.Now()
}

// countFiles is how many files pattern matches in root (0: unknown).
func countFiles(root *confine.Root, pattern, exclude string) int64 {
	sc, err := root.GlobScan(pattern, exclude)
	if err != nil {
		return 0
	}
	defer sc.Close()
	var n int64
	for {
		rels, done := sc.Next(4096)
		n += int64(len(rels))
		if done {
			return n
		}
	}
}
