package background

import (
	"sort"
	"sync"
)

// Passes makes sure a root's evaluation sees every change made while it
// went through the root's files.
//
// An evaluation of a large root is a pass in slices (layout.EachFile),
// each slice a job, the next queued behind the work meanwhile. A change
// that comes while a slice is queued merges into it (the engine runs one
// evaluation per root), and the pass goes on from where it was: a file
// made behind its place in a directory is not in it. Neither is a log
// whose capture on write was dropped, when a flood of writes filled the
// background queue: 200,000 logs written in seconds leave thousands
// captured by nothing but the next pass. So every change, and every
// dropped capture, counts; a pass that ends with changes it did not begin
// with is followed by another at once, and a root whose dropped captures
// no complete pass has covered yet is "not captured yet" (status, and the
// catch-up is not over). Safe for concurrent use: the watcher's goroutine
// counts changes, the background's drops, the jobs begin and end passes.
type Passes struct {
	mu sync.Mutex
	// gen counts a root's changes and dropped captures; from is gen when
	// its pass now running began (inPass: a pass is in slices).
	gen, from map[string]uint64
	inPass    map[string]bool
	// dropped is gen at a root's last dropped capture, until a pass that
	// began after it ends.
	dropped map[string]uint64
}

func NewPasses() *Passes {
	return &Passes{gen: map[string]uint64{}, from: map[string]uint64{}, inPass: map[string]bool{}, dropped: map[string]uint64{}}
}

// Changed counts a change of root; drop: a capture of one of its logs
// was dropped.
func (p *Passes) Changed(root string, drop bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.gen[root]++
	if drop {
		p.dropped[root] = p.gen[root]
	}
}

// Begin marks an evaluation of root starting: a new pass unless one is in
// slices.
func (p *Passes) Begin(root string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.inPass[root] {
		p.from[root] = p.gen[root]
	}
}

// End marks an evaluation of root done; more: its pass goes on in the
// next slice. again says a new pass must follow (changes came since this
// one began).
func (p *Passes) End(root string, more bool) (again bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if more {
		p.inPass[root] = true
		return false
	}
	delete(p.inPass, root)
	from := p.from[root]
	if d, ok := p.dropped[root]; ok && d <= from {
		delete(p.dropped, root) // the pass that ended began after it: captured
	}
	again = p.gen[root] != from
	if !again && p.dropped[root] == 0 {
		delete(p.gen, root)
		delete(p.from, root)
	}
	return again
}

// Uncaptured lists the roots with logs whose capture was dropped and no
// complete pass has covered yet.
func (p *Passes) Uncaptured() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make([]string, 0, len(p.dropped))
	for r := range p.dropped {
		out = append(out, r)
	}
	sort.Strings(out)
	return out
}
