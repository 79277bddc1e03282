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
	if sc == nil {
		var err error
		if sc, err = root.GlobScan(pattern, exclude); err != nil {
			return err
		}
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
