package daemon

import (
	"context"
	"sort"
	"sync"
	"time"

	"github.com/memwatch/memwatch/confine"
	"github.com/memwatch/memwatch/control"
	"github.com/memwatch/memwatch/layout"
	"github.com/memwatch/memwatch/recall"
)

// The catch-up after a start (every root evaluated, its logs captured,
// every searchable file indexed) can take minutes on a large home. It
// says how far it is: status and the page show, per root and in total,
// the files and bytes done of the total, the rate and the time left; the
// log says the same every catchUpEvery. The totals are counted at start
// by a walk of names and sizes (a goroutine the daemon waits for); what
// is done is what the indexing pass has read, the catch-up's last stage.

// catchUpEvery is how often the log says how far the catch-up is.
const catchUpEvery = 10 * time.Second

// maxCatchUpRoots bounds the roots a status lists with their progress.
const maxCatchUpRoots = 20

// catchUp tracks the start-up's progress. Safe for concurrent use.
type catchUp struct {
	mu      sync.Mutex
	started time.Time
	counted bool          // the totals are known
	countCh chan struct{} // closed when they are
	roots   map[string]*control.RootProgress
	done    bool
}

// CatchUp is how far the start-up is (the status answer's type).
type CatchUp = control.CatchUp

func (c *catchUp) start(now time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.started, c.roots, c.done, c.counted = now, map[string]*control.RootProgress{}, false, false
	c.countCh = make(chan struct{})
}

// waitCounted waits for the totals, at most d: a status read as the
// catch-up starts says done of a total, not of nothing.
func (c *catchUp) waitCounted(ctx context.Context, d time.Duration) {
	c.mu.Lock()
	ch := c.countCh
	c.mu.Unlock()
	if ch == nil {
		return
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ch:
	case <-t.C:
	case <-ctx.Done():
	}
}

// count adds a root's totals (the counting walk).
func (c *catchUp) count(store, root string, files, bytes int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.done || c.roots == nil {
		return
	}
	p := c.root(store, root)
	p.FilesTotal, p.BytesTotal = max(p.FilesTotal, files), max(p.BytesTotal, bytes)
}

func (c *catchUp) counted1() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.counted && c.countCh != nil {
		close(c.countCh)
	}
	c.counted = true
}

func (c *catchUp) root(store, root string) *control.RootProgress {
	p := c.roots[root]
	if p == nil {
		p = &control.RootProgress{Root: root, Store: store}
		c.roots[root] = p
	}
	return p
}

// read notes a file the catch-up read (indexed).
func (c *catchUp) read(store, root string, bytes int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.done || c.roots == nil {
		return
	}
	p := c.root(store, root)
	p.Files++
	p.Bytes += bytes
}

func (c *catchUp) finish() {
	c.mu.Lock()
	c.done = true
	c.mu.Unlock()
}

// status is the progress now (nil once the catch-up is over). reach
// keeps the roots a caller may see.
func (c *catchUp) status(now time.Time, evaluated, total int64, reach func(string) bool) *CatchUp {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.done || c.roots == nil {
		return nil
	}
	st := &CatchUp{Done: evaluated, Total: total}
	for _, p := range c.roots {
		if reach != nil && !reach(p.Root) {
			continue
		}
		st.Files += min(p.Files, max(p.FilesTotal, p.Files))
		st.FilesTotal += max(p.FilesTotal, p.Files)
		st.Bytes += min(p.Bytes, max(p.BytesTotal, p.Bytes))
		st.BytesTotal += max(p.BytesTotal, p.Bytes)
		if p.Files < p.FilesTotal || !c.counted {
			st.Roots = append(st.Roots, *p)
		}
	}
	if el := now.Sub(c.started).Seconds(); el > 0 {
		st.Rate = float64(st.Bytes) / el
	}
	switch {
	case st.Rate > 0 && st.BytesTotal > st.Bytes:
		left := time.Duration(float64(st.BytesTotal-st.Bytes) / st.Rate * float64(time.Second))
		if left >= 10*time.Second {
			left = left.Round(time.Second)
		}
		st.Left = max(100*time.Millisecond, left.Round(100*time.Millisecond))
	case st.BytesTotal > st.Bytes || st.Total > st.Done:
		// Nothing read yet: as long as the count took, at least a second.
		st.Left = max(time.Second, now.Sub(c.started).Round(time.Second))
	}
	sort.Slice(st.Roots, func(i, j int) bool {
		return st.Roots[i].BytesTotal-st.Roots[i].Bytes > st.Roots[j].BytesTotal-st.Roots[j].Bytes
	})
	if len(st.Roots) > maxCatchUpRoots {
		st.Roots = st.Roots[:maxCatchUpRoots]
	}
	return st
}

// countCatchUp walks each root's searchable files (names and sizes) for
// the catch-up's totals. It runs beside the catch-up and stops with ctx.
func (d *Daemon) countCatchUp(ctx context.Context, roots map[string][]confine.ID) {
	defer d.catch.counted1()
	for store, ids := range roots {
		rt := d.store(store)
		if rt == nil {
			continue
		}
		sr, ok := rt.layout.(layout.Searchable)
		if !ok {
			continue
		}
		for _, id := range ids {
			if ctx.Err() != nil {
				return
			}
			root, err := rt.store.OpenRoot(id.Path)
			if err != nil {
				continue
			}
			var files, bytes int64
			for _, src := range sr.Sources(rt.store) {
				if src.Kind == recall.Records {
					continue
				}
				sc, err := root.GlobScan(src.Glob, src.Exclude)
				if err != nil {
					continue
				}
				for ctx.Err() == nil {
					rels, done := sc.Next(256)
					for _, rel := range rels {
						if fi, err := root.Stat(rel); err == nil && fi.Mode().IsRegular() {
							files++
							bytes += fi.Size()
						}
					}
					if done {
						break
					}
				}
				sc.Close()
			}
			root.Close()
			d.catch.count(store, id.Path, files, bytes)
		}
	}
}
