// Package capture does the daemon's background tasks as files are
// written: a session log's new lines into the spool, a memory file's
// settled version into the versions (an agent's deletion or large cut
// noticed, and put back with restore_deleted), a searchable file into
// recall's index. background says when a task runs; the Worker runs it.
//
// Session logs are captured into the spool, and searchable files indexed,
// as soon as the watcher sees them written, not after the store's settle
// time: an agent that trims its log a moment after writing it loses
// nothing, and recall's index lags a write by well under a second. Rules
// capture again before they read, and every search reads what the index
// does not cover yet, so a task dropped (a full queue) only delays, never
// loses.
package capture

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/memwatch/memwatch/background"
	"github.com/memwatch/memwatch/confine"
	"github.com/memwatch/memwatch/control"
	"github.com/memwatch/memwatch/jobs"
	"github.com/memwatch/memwatch/layout"
	"github.com/memwatch/memwatch/metrics"
	"github.com/memwatch/memwatch/policy"
	"github.com/memwatch/memwatch/recall"
	"github.com/memwatch/memwatch/recall/analysis"
	"github.com/memwatch/memwatch/restore"
	"github.com/memwatch/memwatch/rewrite"
	"github.com/memwatch/memwatch/session"
	"github.com/memwatch/memwatch/spool"
	"github.com/memwatch/memwatch/state"
	"github.com/memwatch/memwatch/versions"
)

// Store is a store as a task sees it: its policy, layout and environment.
type Store struct {
	Policy *policy.Store
	Layout layout.Layout
	Env    *layout.Env
}

// Config is what a Worker works with; the daemon fills it in.
type Config struct {
	IndexDir string // the recall index's directory
	DB       *state.DB
	RW       *rewrite.Rewriter
	Spool    *spool.Spool
	Versions *versions.Store
	Indexes  *recall.IndexCache
	// Segments is the index directory's term segments (listed once, kept
	// as they are written; searches read it too, under its lock).
	Segments *recall.SegmentListing
	Queue    *background.Runner
	Progress *background.Progress
	Metrics  *metrics.Metrics
	Log      *slog.Logger
	Quota    *layout.Quota
	Warnings *layout.Warnings
	// Store is a store of the policy by name; StoresOf the stores root is
	// a root of.
	Store    func(name string) (Store, bool)
	StoresOf func(root string) []Store
	// OpenRoot opens a root of a store for a task.
	OpenRoot func(s *policy.Store, path string) (*confine.Root, error)
	// StateFailed says (and counts) a write of the state directory that
	// failed; true: it was one, and is reported.
	StateFailed func(store, root, what string, err error) bool
	// Submit queues a job (a root's evaluation once a log is gone, a
	// deleted file put back); EvaluateRule is the evaluation's rule.
	Submit       func(jobs.Job)
	EvaluateRule string
}

// Worker runs the background tasks (Run, on the background goroutine) and
// captures a version before memwatch changes a file (VersionBefore, on a
// job's goroutine).
type Worker struct {
	Config
	// indexing is the index-root tasks' places between their slices;
	// only the background goroutine uses it.
	indexing map[string]*indexScan
	// verified is the index files checked whole in this run; verMu guards
	// it (rules' captures index too: CaptureLog).
	verMu    sync.Mutex
	verified map[string]bool
	// anMu guards the indexing's analyzer (its stems kept across files),
	// one for the background goroutine and rules' captures (CaptureLog):
	// with one each, a catch-up stemmed and numbered each word twice.
	anMu     sync.Mutex
	analyzer *analysis.Analyzer
	// archive says, per root and path, whether a file is one of
	// memwatch's archives (never versioned); archiveMu guards it (the
	// background goroutine and jobs about to change a file ask).
	archiveMu sync.Mutex
	archive   map[string]bool
	losses    losses
	// syncFailing: the last index sync failed (said once); the
	// background goroutine's.
	syncFailing bool
}

// New returns a Worker of cfg.
func New(cfg Config) *Worker {
	if cfg.Indexes != nil && cfg.IndexDir != "" {
		// The indexer syncs its writes in batches (syncIndexes), not a
		// fsync a file.
		cfg.Indexes.DeferSync()
	}
	return &Worker{Config: cfg, verified: map[string]bool{}, indexing: map[string]*indexScan{}, analyzer: analysis.New(), archive: map[string]bool{}}
}

// CaptureLog captures the log rel of store's root into the spool, as a
// rule does before it reads (on the rule's goroutine), indexing it from
// the same read when its index is behind (captureIndexed).
func (w *Worker) CaptureLog(ctx context.Context, store string, root *confine.Root, rel string, o spool.Options) (spool.Result, error) {
	rt, ok := w.Store(store)
	if !ok {
		return w.Spool.Capture(ctx, root, rel, o)
	}
	res, err := w.captureIndexed(ctx, rt, root, rel, false, o, func(lines *recall.LineMemo) {
		w.indexWith(root, rt, rel, recall.Log, lines)
		// Its writes are synced with the indexer's, soon.
		if w.Indexes.Unsynced() >= maxUnsynced {
			w.Queue.Queue(background.Task{Kind: background.SyncIndex})
		} else {
			w.Queue.Throttle(background.Task{Kind: background.SyncIndex}, syncEvery)
		}
	})
	return res, err
}

// captureIndexed captures the log rel into the spool. When recall indexes
// the log and its index is behind, the capture decodes each new line
// whole and index brings the index up to date from those lines at once:
// a catch-up's logs are parsed once, not by the capture to tell messages
// and again by the indexer. Whichever of a root's evaluation (CaptureLog)
// and its index pass (indexRoot) comes to a log first does both; the
// other finds it done.
//
// behind says the caller found the index behind (logIndexBehind) already;
// else that is asked at the first new line, if any: a rule's evaluation
// captures every log of its root, most of them unchanged, at each event.
func (w *Worker) captureIndexed(ctx context.Context, rt Store, root *confine.Root, rel string, behind bool, o spool.Options, index func(*recall.LineMemo)) (spool.Result, error) {
	var lines *recall.LineMemo
	if behind {
		lines = recall.NewLineMemo()
	}
	asked := behind
	isMessage := o.IsMessage
	o.Message = func(off int64, data []byte, hash uint64) bool {
		if !asked {
			asked = true
			if w.logIndexBehind(rt, root, rel) {
				lines = recall.NewLineMemo()
			}
		}
		if lines == nil {
			return isMessage(data, false)
		}
		return lines.Message(off, data, hash)
	}
	res, err := w.Spool.Capture(ctx, root, rel, o)
	if err == nil && lines != nil && res.Lines > 0 {
		index(lines)
	}
	return res, err
}

// isSessionLog reports whether rel is a session log the spool captures.
func isSessionLog(rt Store, rel string) bool {
	sl, ok := rt.Layout.(layout.SessionLogs)
	if !ok {
		return false
	}
	for _, g := range sl.Logs(rt.Policy) {
		if confine.Match(g.Glob, g.Exclude, rel) {
			return true
		}
	}
	return false
}

// logIndexBehind reports whether rel is a session log recall indexes (a source of
// the store's layout of kind Log, captured) whose index covers less than
// the file.
func (w *Worker) logIndexBehind(rt Store, root *confine.Root, rel string) bool {
	sr, ok := rt.Layout.(layout.Searchable)
	if !ok || w.IndexDir == "" || strings.HasSuffix(rel, ".gz") || !isSessionLog(rt, rel) {
		return false
	}
	for _, src := range sr.Sources(rt.Policy) {
		if src.Kind == recall.Log && confine.Match(src.Glob, src.Exclude, rel) {
			fi, err := root.Stat(rel)
			return err == nil && fi.Size() >= oneReadFrom && recall.Covered(w.IndexDir, root.Path(), rel) <= fi.Size()-oneReadFrom
		}
	}
	return false
}

// oneReadFrom is the least a log's index must lack for its capture and
// indexing to share a read (captureIndexed): below it, the two files
// opened more cost more than a second parse (10,000 one-line logs caught
// up in 6.3 s instead of 4.6).
const oneReadFrom = 64 << 10

// Losses are the recent deletions and large cuts agents made, newest
// first, of the directories keep accepts.
func (w *Worker) Losses(keep func(dir confine.ID) bool) []control.Loss {
	return w.losses.listFor(keep)
}

// Close ends the index-root tasks' scans and syncs what was indexed;
// the background goroutine has stopped.
func (w *Worker) Close() {
	w.syncIndexes()
	for _, st := range w.indexing {
		if st.scan != nil {
			st.scan.Close()
		}
	}
}

// indexEvery is how often a file being written is indexed at most.
const indexEvery = 250 * time.Millisecond

// OnTouched runs on the watcher goroutine for every write under a root: a
// session log is queued for capture, a searchable file for indexing.
func (w *Worker) OnTouched(store, root, path string) {
	rt, ok := w.Store(store)
	if !ok {
		return
	}
	rel, err := filepath.Rel(root, path)
	if err != nil || !filepath.IsLocal(rel) {
		return
	}
	if sl, ok := rt.Layout.(layout.SessionLogs); ok {
		for _, g := range sl.Logs(rt.Policy) {
			if confine.Match(g.Glob, g.Exclude, rel) {
				w.Queue.Queue(background.Task{Kind: background.Capture, Store: store, Root: root, Rel: rel})
				break
			}
		}
	}
	if sr, ok := rt.Layout.(layout.Searchable); ok {
		for _, src := range sr.Sources(rt.Policy) {
			if src.Kind != recall.Records && confine.Match(src.Glob, src.Exclude, rel) {
				// Indexed at most every indexEvery: a search reads what the
				// index does not cover yet, so the index only saves time, and
				// a log written 150 lines a second is not indexed 150 times.
				w.Queue.Throttle(background.Task{Kind: background.Index, Store: store, Root: root, Rel: rel, Src: src.Kind}, indexEvery)
				if rt.Policy.Versions {
					// A version is the file once its write has settled, as
					// the rules read it: a save that truncates, then writes,
					// is one version. A deletion needs no settling.
					t := background.Task{Kind: background.Version, Store: store, Root: root, Rel: rel}
					if _, err := os.Lstat(path); errors.Is(err, fs.ErrNotExist) {
						w.Queue.Queue(t)
					} else {
						w.Queue.After(t, rt.Policy.Settle)
					}
				}
				break
			}
		}
	}
}

// Run runs on the background goroutine.
func (w *Worker) Run(ctx context.Context, t background.Task) {
	if t.Kind == background.SyncIndex {
		w.syncIndexes()
		return
	}
	defer w.unsyncedAfter()
	rt, ok := w.Store(t.Store)
	if !ok {
		return
	}
	root, err := w.OpenRoot(rt.Policy, t.Root)
	if err != nil {
		return // the evaluation job reports a refused root
	}
	defer root.Close()
	switch t.Kind {
	case background.Capture:
		t0 := time.Now()
		res, err := w.Spool.Capture(ctx, root, t.Rel, spool.Options{MaxLine: int(rt.Policy.MaxLine), IsMessage: session.IsMessage})
		w.captured(ctx, rt, root, t.Store, t.Rel, res, err, t0)
	case background.Index:
		w.indexFile(root, rt, t.Rel, t.Src)
	case background.Version:
		if w.versionable(ctx, rt, t.Root, t.Rel) {
			w.captureVersion(ctx, root, rt, t.Rel)
		}
	case background.IndexRoot:
		if w.indexRoot(ctx, root, rt, t) {
			w.Queue.Queue(t) // the next slice, after the captures queued meanwhile
		}
	}
}

// captured reports a capture the background goroutine made of the log rel
// of store's root (on its write, or with its index: indexRoot), started
// at t0.
func (w *Worker) captured(ctx context.Context, rt Store, root *confine.Root, store, rel string, res spool.Result, err error, t0 time.Time) {
	if err != nil {
		if w.StateFailed(store, root.Path(), "the lines of "+root.Join(rel), err) {
			return
		}
		if !layout.IsRefusal(err) && ctx.Err() == nil {
			w.Log.Debug("capture failed; the rule captures before it reads", "root", root.Path(), "log", rel, "err", err)
		}
		return
	}
	w.Metrics.Captured.Add(float64(res.Lines))
	rt.Env.CaptureBounds(root, rel, res)
	if res.Why == "gone" {
		// What the rules owe a log the agent deleted is found by an
		// evaluation after it was marked gone (one, however many go:
		// the engine merges them).
		w.Submit(jobs.Job{Store: store, Root: root.Path(), Rule: w.EvaluateRule, Reason: jobs.ReasonLogGone})
	}
	if res.Why != "same" {
		w.Log.Debug("captured", "root", root.Path(), "log", rel, "lines", res.Lines, "why", res.Why, "gen", res.Gen, "took", time.Since(t0))
	}
}

// ForgetTerms lets the terms and stems the analyzer kept go, so an idle
// daemon holds no table of them: at the catch-up's end (the daemon), and
// at a sync with no root being indexed. Not at each root's end: a
// catch-up of 10,000 one-session directories made (and cleared) an
// analyzer's tables 10,000 times, its tokens stemmed anew each time.
func (w *Worker) ForgetTerms() {
	w.anMu.Lock()
	w.analyzer = analysis.New()
	w.anMu.Unlock()
}

// syncEvery is how long an index written unsynced waits at most (while
// the background goroutine runs) for the sync that makes it durable;
// maxUnsynced how many wait at most.
const (
	syncEvery   = time.Second
	maxUnsynced = 4096
)

// syncIndexes makes the indexes written since the last call durable
// (recall.IndexCache.SyncIndexes); on the background goroutine, or once
// it stopped.
// A failing sync is said once, until one succeeds.
func (w *Worker) syncIndexes() {
	if len(w.indexing) == 0 {
		// No root is being indexed: the analyzer's tables go, at most
		// once a syncEvery (ForgetTerms).
		w.ForgetTerms()
	}
	err := w.Indexes.SyncIndexes(w.IndexDir)
	switch {
	case err == nil:
		if w.syncFailing {
			w.syncFailing = false
			w.Log.Info("the index syncs again", "dir", w.IndexDir)
		}
	case w.StateFailed("", "", "the index's sync", err):
	case !w.syncFailing:
		w.syncFailing = true
		w.Log.Warn("sync the index: the files it could not sync stay marked unsynced and are checked whole when read; said once until a sync succeeds", "dir", w.IndexDir, "err", err)
	}
}

// unsyncedAfter asks for the sync of what an index task wrote unsynced:
// at once past maxUnsynced, else within syncEvery.
func (w *Worker) unsyncedAfter() {
	switch n := w.Indexes.Unsynced(); {
	case n >= maxUnsynced:
		w.syncIndexes()
	case n > 0:
		w.Queue.Throttle(background.Task{Kind: background.SyncIndex}, syncEvery)
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
// it (Worker.indexing).
type indexScan struct {
	id   confine.ID
	src  int
	scan *confine.Scan
}

// indexRoot indexes a slice of the root's searchable files (capturing the
// version each memory file has when memwatch first sees it: what an
// agent's later deletion brings back), going on where the last slice
// stopped. It reports whether there is more.
func (w *Worker) indexRoot(ctx context.Context, root *confine.Root, rt Store, t background.Task) bool {
	sr, ok := rt.Layout.(layout.Searchable)
	if !ok {
		return false
	}
	srcs := sr.Sources(rt.Policy)
	key := t.Store + "\x00" + t.Root
	st := w.indexing[key]
	if st == nil || st.id != root.ID() {
		if st != nil {
			st.scan.Close()
		}
		st = &indexScan{id: root.ID()}
		w.indexing[key] = st
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
			indexed := false
			if src.Kind == recall.Log && w.logIndexBehind(rt, root, m) {
				// A log the spool captures too: both from one read, unless
				// its root's evaluation did them first (CaptureLog).
				t0 := time.Now()
				res, err := w.captureIndexed(ctx, rt, root, m, true, spool.Options{MaxLine: int(rt.Policy.MaxLine), IsMessage: session.IsMessage}, func(lines *recall.LineMemo) {
					w.indexWith(root, rt, m, src.Kind, lines)
					indexed = true
				})
				w.captured(ctx, rt, root, t.Store, m, res, err, t0)
			}
			if !indexed {
				w.indexFile(root, rt, m, src.Kind)
			}
			if fi, err := root.Stat(m); err == nil {
				w.Progress.Read(t.Store, t.Root, fi.Size())
			}
			if w.versionable(ctx, rt, t.Root, m) {
				w.captureVersion(ctx, root, rt, m)
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
	delete(w.indexing, key)
	return false
}

func (w *Worker) indexFile(root *confine.Root, rt Store, rel string, kind recall.Kind) {
	w.indexWith(root, rt, rel, kind, nil)
}

// indexWith indexes rel, from the lines a capture decoded when given.
func (w *Worker) indexWith(root *confine.Root, rt Store, rel string, kind recall.Kind, lines *recall.LineMemo) {
	if strings.HasSuffix(rel, ".gz") {
		return // searched decompressed, never through the index
	}
	// The first time in a run, an index is checked whole: a corrupt one
	// is built anew (searches meanwhile trust only its structure).
	key := root.Path() + "\x00" + rel
	w.verMu.Lock()
	verified := w.verified[key]
	w.verMu.Unlock()
	w.anMu.Lock()
	n, err := recall.IndexFile(w.IndexDir, root, rel, kind, recall.IndexOptions{MaxLine: int(rt.Policy.MaxLine), Verify: !verified, Listing: w.Segments, Analyzer: w.analyzer, Cache: w.Indexes, Lines: lines})
	w.anMu.Unlock()
	if err == nil {
		w.verMu.Lock()
		if len(w.verified) >= maxVerified {
			clear(w.verified) // checked whole again: a cost, never a loss
		}
		w.verified[key] = true
		w.verMu.Unlock()
	}
	if err != nil {
		if !w.StateFailed(rt.Policy.Name, root.Path(), "the index of "+root.Join(rel), err) && !layout.IsRefusal(err) {
			w.Log.Debug("index a file", "root", root.Path(), "path", rel, "err", err)
		}
		return
	}
	w.Metrics.Indexed.Add(float64(n))
}

// seenLoss is a loss with the directory it was seen in: only who reaches
// it sees the loss.
type seenLoss struct {
	control.Loss
	dir confine.ID
}

// maxLosses bounds the losses remembered for memwatch status.
const maxLosses = 200

// losses is the recent losses, newest last. Safe for concurrent use.
type losses struct {
	mu   sync.Mutex
	list []seenLoss
}

func (l *losses) add(x seenLoss) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.list = append(l.list, x)
	if len(l.list) > maxLosses {
		l.list = l.list[len(l.list)-maxLosses:]
	}
}

// listFor returns the losses keep accepts (by the directory they were
// seen in), newest first.
func (l *losses) listFor(keep func(dir confine.ID) bool) []control.Loss {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := []control.Loss{}
	for i := len(l.list) - 1; i >= 0; i-- {
		if keep(l.list[i].dir) {
			out = append(out, l.list[i].Loss)
		}
	}
	return out
}

// versionable reports whether rel is one of the store's memory files.
func (w *Worker) versionable(ctx context.Context, rt Store, root, rel string) bool {
	if !rt.Policy.Versions || rewrite.IsTemp(rel) {
		return false
	}
	sr, ok := rt.Layout.(layout.Searchable)
	if !ok {
		return false
	}
	if sl, ok := rt.Layout.(layout.SessionLogs); ok {
		for _, g := range sl.Logs(rt.Policy) {
			if confine.Match(g.Glob, g.Exclude, rel) {
				return false
			}
		}
	}
	for _, src := range sr.Sources(rt.Policy) {
		if src.Kind != recall.Records && confine.Match(src.Glob, src.Exclude, rel) {
			// memwatch's own archives are kept already. Asked of the
			// journal once per path and run: archive names are never reused
			// for memory files.
			key := root + "\x00" + rel
			w.archiveMu.Lock()
			defer w.archiveMu.Unlock()
			isArchive, seen := w.archive[key]
			if !seen {
				recs, err := w.DB.Journal(ctx, state.Filter{Root: root, Archive: rel, Limit: 1})
				if err != nil {
					return false
				}
				isArchive = len(recs) > 0
				if len(w.archive) > maxArchiveCache {
					clear(w.archive)
				}
				w.archive[key] = isArchive
			}
			return !isArchive
		}
	}
	return false
}

// maxArchiveCache bounds the paths versionable remembers.
const maxArchiveCache = 100_000

// writerOf says who wrote root/rel with content sha ("" for a deletion):
// memwatch when one of its journal's newest changes of the file left it so.
func (w *Worker) writerOf(ctx context.Context, root, rel string) func(sha string) (string, int64) {
	return func(sha string) (string, int64) {
		// Pending too: the watcher can see memwatch's write before the
		// rewrite journals it done.
		recs, err := w.DB.Journal(ctx, state.Filter{Root: root, Target: rel, Limit: 5})
		if err != nil {
			return versions.ByAgent, 0
		}
		for _, r := range recs {
			if r.Outcome != state.Done && r.Outcome != state.Pending {
				continue
			}
			if r.AfterSHA == sha || (sha == "" && r.AfterSHA == rewrite.RemovedSHA) {
				return versions.ByMemwatch, r.ID
			}
		}
		return versions.ByAgent, 0
	}
}

// VersionBefore captures the version of a memory file memwatch is about
// to change (rewrite.Rewriter.BeforeChange): the agent's last write to it
// is a version even when memwatch's change comes before its settle time.
func (w *Worker) VersionBefore(root *confine.Root, rel string) {
	for _, rt := range w.StoresOf(root.Path()) {
		if w.versionable(context.Background(), rt, root.Path(), rel) {
			w.captureVersion(context.Background(), root, rt, rel)
			return
		}
	}
}

// captureVersion runs on the background goroutine, or on a job's before
// memwatch changes the file (versions.Store serializes them).
func (w *Worker) captureVersion(ctx context.Context, root *confine.Root, rt Store, rel string) {
	who := w.writerOf(ctx, root.Path(), rel)
	v, prev, ok, err := w.Versions.Capture(ctx, root, rel, who)
	if err != nil {
		if w.StateFailed(rt.Policy.Name, root.Path(), "a version of "+root.Join(rel), err) {
			return
		}
		if !layout.IsRefusal(err) && !errors.Is(err, confine.ErrNotRegular) && ctx.Err() == nil {
			w.Log.Debug("capture a version", "root", root.Path(), "path", rel, "err", err)
		}
		return
	}
	if !ok {
		return
	}
	w.Metrics.Versions.Inc()
	if v.Writer != versions.ByAgent || prev.N == 0 || prev.Deleted() {
		return
	}
	loss := seenLoss{Loss: control.Loss{Root: root.Path(), Path: rel, Time: v.Time, Version: v.N, Before: prev.N, LinesBefore: prev.Lines, LinesAfter: v.Lines}, dir: root.ID()}
	switch {
	case v.Deleted():
		loss.Kind, loss.LinesAfter = "deleted", 0
	case prev.Lines >= 4 && v.Lines < prev.Lines && float64(v.Removed) > rt.Policy.ShrinkWarn*float64(prev.Lines):
		// Cut: fewer lines, most of the old gone. A rewrite that grew the
		// file is no loss to warn of (its versions are kept all the same).
		loss.Kind = "shrunk"
	default:
		return
	}
	w.Metrics.Losses.WithLabelValues(rt.Policy.Name, loss.Kind).Inc()
	if loss.Kind == "deleted" && rt.Policy.RestoreDeleted {
		// A job in the root's slot: the background queue never waits for one.
		w.Submit(jobs.Job{Store: rt.Policy.Name, Root: root.Path(), Rule: restore.Rule, Target: rel, Reason: jobs.ReasonRestoreDeleted})
		loss.Restored = true
	}
	w.losses.add(loss)
	all := w.losses.listFor(func(dir confine.ID) bool { return dir == root.ID() })
	var names []string
	for _, l := range all {
		if l.Kind == loss.Kind && time.Since(l.Time) < time.Hour && !l.Restored {
			names = append(names, l.Path)
		}
	}
	sort.Strings(names)
	if loss.Kind == "deleted" {
		const msg = "an agent deleted a memory file; its last version is kept"
		if w.Quota.Allow(w.Log, slog.LevelWarn, root.Path(), "deleted", msg) {
			w.Log.Warn(msg, "store", rt.Policy.Name, "root", root.Path(), "path", rel,
				"version", prev.N, "lines", prev.Lines, "restored", loss.Restored, "deleted_last_hour", names[:min(len(names), 20)])
		}
		if len(names) > 0 {
			w.Warnings.Set(root.Path(), "agent-deleted", fmt.Sprintf("%s: an agent deleted %d memory file(s) in the last hour: %s (memwatch restore --deleted %s --since 1h)",
				root.Path(), len(names), strings.Join(names, ", "), root.Path()))
		}
		return
	}
	const msg = "an agent removed most of a memory file in one write; the version before is kept"
	if w.Quota.Allow(w.Log, slog.LevelWarn, root.Path(), "shrunk", msg) {
		w.Log.Warn(msg, "store", rt.Policy.Name, "root", root.Path(), "path", rel,
			"lines_before", prev.Lines, "lines_after", v.Lines, "removed", v.Removed, "version", v.N, "restore", fmt.Sprintf("memwatch restore %s@%d", rel, prev.N))
	}
	w.Warnings.Set(root.Path(), "agent-shrunk:"+rel, fmt.Sprintf("%s: an agent cut %s from %d to %d lines (memwatch versions %s; memwatch restore %s@%d)",
		root.Path(), rel, prev.Lines, v.Lines, rel, rel, prev.N))
}

// RestoreDeleted puts back a memory file an agent deleted (policy
// restore_deleted): its last version, if it is still gone.
func (w *Worker) RestoreDeleted(ctx context.Context, rt Store, root *confine.Root, rel string) (jobs.Result, error) {
	vs, err := w.Versions.List(ctx, root.ID(), rel)
	if err != nil || len(vs) < 2 || !vs[len(vs)-1].Deleted() {
		return jobs.Result{}, err // written again meanwhile, or nothing to bring back
	}
	var last int64
	for _, v := range vs {
		if !v.Deleted() {
			last = v.N
		}
	}
	res, err := restore.Version(ctx, w.RW, w.Versions, root, rt.Policy.Name, restore.Request{Path: rel, Version: last})
	if err != nil {
		w.Log.Error("put back a memory file an agent deleted", "root", root.Path(), "path", rel, "err", err)
		return jobs.Result{}, layout.Retryable(err)
	}
	w.Log.Warn("put back a memory file an agent deleted (restore_deleted)", "root", root.Path(), "path", rel, "version", last, "journal", res.Journal)
	return jobs.Result{Changed: res.Outcome == state.Done}, nil
}
