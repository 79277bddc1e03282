package background

import (
	"context"
	"sort"
	"sync"
	"time"

	"github.com/memwatch/memwatch/control"
)

// The catch-up after a start (every root evaluated, its logs captured,
// every searchable file indexed) can take minutes on a large home. It
// says how far it is: status and the page show, per root and in total,
// the files and bytes done of the total, the rate and the time left; the
// log says the same every CatchUpEvery. The totals are counted at start
// by a walk of names and sizes (a goroutine the daemon waits for); what
// is done is what the indexing pass has read, the catch-up's last stage.

// CatchUpEvery is how often the log says how far the catch-up is.
const CatchUpEvery = 10 * time.Second

// maxCatchUpRoots bounds the roots a status lists with their progress.
const maxCatchUpRoots = 20

// Progress tracks the start-up's progress. Safe for concurrent use.
type Progress struct {
	mu      sync.Mutex
	started time.Time
	counted bool          // the totals are known
	countCh chan struct{} // closed when they are
	roots   map[string]*control.RootProgress
	done    bool
}

func (c *Progress) Start(now time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.started, c.roots, c.done, c.counted = now, map[string]*control.RootProgress{}, false, false
	c.countCh = make(chan struct{})
}

// WaitCounted waits for the totals, at most d: a status read as the
// catch-up starts says done of a total, not of nothing.
func (c *Progress) WaitCounted(ctx context.Context, d time.Duration) {
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

// Count adds a root's totals (the counting walk).
func (c *Progress) Count(store, root string, files, bytes int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.done || c.roots == nil {
		return
	}
	p := c.root(store, root)
	p.FilesTotal, p.BytesTotal = max(p.FilesTotal, files), max(p.BytesTotal, bytes)
}

func (c *Progress) Counted() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.counted && c.countCh != nil {
		close(c.countCh)
	}
	c.counted = true
}

func (c *Progress) root(store, root string) *control.RootProgress {
	p := c.roots[root]
	if p == nil {
		p = &control.RootProgress{Root: root, Store: store}
		c.roots[root] = p
	}
	return p
}

// Read notes a file the catch-up read (indexed).
func (c *Progress) Read(store, root string, bytes int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.done || c.roots == nil {
		return
	}
	p := c.root(store, root)
	p.Files++
	p.Bytes += bytes
}

func (c *Progress) Finish() {
	c.mu.Lock()
	c.done = true
	c.mu.Unlock()
}

// Status is the progress now (nil once the catch-up is over). reach
// keeps the roots a caller may see.
func (c *Progress) Status(now time.Time, evaluated, total int64, reach func(string) bool) *control.CatchUp {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.done || c.roots == nil {
		return nil
	}
	st := &control.CatchUp{Done: evaluated, Total: total}
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
			if p.Files == 0 && p.Bytes == 0 {
				st.Waiting++
				st.WaitingBytes += p.BytesTotal
			}
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
	// Under way first: a person asks what is being read now.
	sort.Slice(st.Roots, func(i, j int) bool {
		a, b := st.Roots[i], st.Roots[j]
		if wa, wb := a.Files == 0 && a.Bytes == 0, b.Files == 0 && b.Bytes == 0; wa != wb {
			return wb
		}
		return a.BytesTotal-a.Bytes > b.BytesTotal-b.Bytes
	})
	if len(st.Roots) > maxCatchUpRoots {
		st.Roots = st.Roots[:maxCatchUpRoots]
	}
	return st
}
