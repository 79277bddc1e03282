package daemon

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/memwatch/memwatch/background"
	"github.com/memwatch/memwatch/confine"
	"github.com/memwatch/memwatch/jobs"
	"github.com/memwatch/memwatch/layout"
	"github.com/memwatch/memwatch/recall"
	"github.com/memwatch/memwatch/recall/analysis"
	"github.com/memwatch/memwatch/session"
	"github.com/memwatch/memwatch/spool"
)

// Session logs are captured into the spool, and searchable files indexed,
// as soon as the watcher sees them written, not after the store's settle
// time: an agent that trims its log a moment after writing it loses
// nothing, and recall's index lags a write by well under a second. Rules
// capture again before they read, and every search reads what the index
// does not cover yet, so a task dropped here (a full queue) only delays,
// never loses.

// indexEvery is how often a file being written is indexed at most.
const indexEvery = 250 * time.Millisecond

// IndexDir is the recall index's directory in the state directory.
const IndexDir = recall.IndexDir

// ReadableIndex is recall.ReadableIndex.
func ReadableIndex(stateDir string) string { return recall.ReadableIndex(stateDir) }

// onTouched runs on the watcher goroutine for every write under a root: a
// session log is queued for capture, a searchable file for indexing.
func (d *Daemon) onTouched(store, root, path string) {
	rt := d.store(store)
	if rt == nil {
		return
	}
	rel, err := filepath.Rel(root, path)
	if err != nil || !filepath.IsLocal(rel) {
		return
	}
	if sl, ok := rt.layout.(layout.SessionLogs); ok {
		for _, g := range sl.Logs(rt.store) {
			if confine.Match(g.Glob, g.Exclude, rel) {
				d.bg.Queue(background.Task{Kind: background.Capture, Store: store, Root: root, Rel: rel})
				break
			}
		}
	}
	if sr, ok := rt.layout.(layout.Searchable); ok {
		for _, src := range sr.Sources(rt.store) {
			if src.Kind != recall.Records && confine.Match(src.Glob, src.Exclude, rel) {
				// Indexed at most every indexEvery: a search reads what the
				// index does not cover yet, so the index only saves time, and
				// a log written 150 lines a second is not indexed 150 times.
				d.bg.Throttle(background.Task{Kind: background.Index, Store: store, Root: root, Rel: rel, Src: src.Kind}, indexEvery)
				if rt.store.Versions {
					// A version is the file once its write has settled, as
					// the rules read it: a save that truncates, then writes,
					// is one version. A deletion needs no settling.
					t := background.Task{Kind: background.Version, Store: store, Root: root, Rel: rel}
					if _, err := os.Lstat(path); errors.Is(err, fs.ErrNotExist) {
						d.bg.Queue(t)
					} else {
						d.bg.After(t, rt.store.Settle)
					}
				}
				break
			}
		}
	}
}

// runTask runs on the background goroutine.
func (d *Daemon) runTask(ctx context.Context, t background.Task) {
	rt := d.store(t.Store)
	if rt == nil {
		return
	}
	root, err := d.openRoot(rt.store, t.Root)
	if err != nil {
		return // the evaluation job reports a refused root
	}
	defer root.Close()
	switch t.Kind {
	case background.Capture:
		t0 := time.Now()
		res, err := d.spool.Capture(ctx, root, t.Rel, spool.Options{MaxLine: int(rt.store.MaxLine), IsMessage: session.IsMessage})
		if err != nil {
			if d.stateFailed(t.Store, t.Root, "the lines of "+filepath.Join(t.Root, t.Rel), err) {
				return
			}
			if !layout.IsRefusal(err) && ctx.Err() == nil {
				d.log.Debug("capture on write failed; the rule captures before it reads", "root", t.Root, "log", t.Rel, "err", err)
			}
			return
		}
		d.metrics.Captured.Add(float64(res.Lines))
		rt.env.CaptureBounds(root, t.Rel, res)
		if res.Why == "gone" {
			// What the rules owe a log the agent deleted is found by an
			// evaluation after it was marked gone (one, however many go:
			// the engine merges them).
			d.engine.Submit(jobs.Job{Store: t.Store, Root: t.Root, Rule: ruleEvaluate, Reason: jobs.ReasonLogGone})
		}
		if res.Why != "same" {
			d.log.Debug("captured", "root", t.Root, "log", t.Rel, "lines", res.Lines, "why", res.Why, "gen", res.Gen, "took", time.Since(t0))
		}
	case background.Index:
		d.indexFile(root, rt, t.Rel, t.Src)
	case background.Version:
		if d.versionable(ctx, rt, t.Root, t.Rel) {
			d.captureVersion(ctx, root, rt, t.Rel)
		}
	case background.IndexRoot:
		if d.indexRoot(ctx, root, rt, t) {
			d.bg.Queue(t) // the next slice, after the captures queued meanwhile
		}
	}
}

// maxVerified bounds the index files remembered as checked whole.
const maxVerified = 100_000

// indexSlice bounds one slice of a root's indexing: a root of a million
// files is indexed a slice at a time, so the captures of other roots,
// queued meanwhile, run between two slices within a fraction of a second.
const indexSlice = 100 * time.Millisecond

// indexScan is an index-root task's place between its slices: the source
// it is at and the scan of its files. Only the background goroutine uses
// it (Daemon.indexing).
type indexScan struct {
	id   confine.ID
	src  int
	scan *confine.Scan
}

// indexRoot indexes a slice of the root's searchable files (capturing the
// version each memory file has when memwatch first sees it: what an
// agent's later deletion brings back), going on where the last slice
// stopped. It reports whether there is more.
func (d *Daemon) indexRoot(ctx context.Context, root *confine.Root, rt *storeRT, t background.Task) bool {
	sr, ok := rt.layout.(layout.Searchable)
	if !ok {
		return false
	}
	srcs := sr.Sources(rt.store)
	key := t.Store + "\x00" + t.Root
	st := d.indexing[key]
	if st == nil || st.id != root.ID() {
		if st != nil {
			st.scan.Close()
		}
		st = &indexScan{id: root.ID()}
		d.indexing[key] = st
	}
	start := time.Now()
	for st.src < len(srcs) {
		src := srcs[st.src]
		if src.Kind == recall.Records {
			st.src++ // a database: its conversations are searched in the spool
			continue
		}
		if st.scan == nil {
			sc, err := root.GlobScan(src.Glob, src.Exclude)
			if err != nil {
				st.src++
				continue
			}
			st.scan = sc
		}
		rels, done := st.scan.Next(32)
		for _, m := range rels {
			d.indexFile(root, rt, m, src.Kind)
			if fi, err := root.Stat(m); err == nil {
				d.catch.Read(t.Store, t.Root, fi.Size())
			}
			if d.versionable(ctx, rt, t.Root, m) {
				d.captureVersion(ctx, root, rt, m)
			}
		}
		if done {
			st.scan, st.src = nil, st.src+1
		}
		if ctx.Err() != nil {
			break
		}
		if time.Since(start) >= indexSlice && st.src < len(srcs) {
			return true
		}
	}
	if st.scan != nil {
		st.scan.Close()
	}
	delete(d.indexing, key)
	if len(d.indexing) == 0 {
		// Every root indexed (the catch-up's end, mostly): the stems
		// kept for it go, so an idle daemon holds no table of them.
		d.analyzer = analysis.New()
	}
	return false
}

func (d *Daemon) indexFile(root *confine.Root, rt *storeRT, rel string, kind recall.Kind) {
	if strings.HasSuffix(rel, ".gz") {
		return // searched decompressed, never through the index
	}
	// The first time in a run, an index is checked whole: a corrupt one
	// is built anew (searches meanwhile trust only its structure).
	key := root.Path() + "\x00" + rel
	n, err := recall.IndexFile(filepath.Join(d.cfg.StateDir, IndexDir), root, rel, kind, recall.IndexOptions{MaxLine: int(rt.store.MaxLine), Verify: !d.verified[key], Listing: d.segments, Analyzer: d.analyzer, Cache: d.indexes})
	if err == nil {
		if len(d.verified) >= maxVerified {
			clear(d.verified) // checked whole again: a cost, never a loss
		}
		d.verified[key] = true
	}
	if err != nil {
		if !d.stateFailed(rt.store.Name, root.Path(), "the index of "+root.Join(rel), err) && !layout.IsRefusal(err) {
			d.log.Debug("index a file", "root", root.Path(), "path", rel, "err", err)
		}
		return
	}
	d.metrics.Indexed.Add(float64(n))
}
