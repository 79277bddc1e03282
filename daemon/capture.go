package daemon

import (
	"container/heap"
	"context"
	"errors"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

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

// task is one piece of background work on a root.
type task struct {
	kind  taskKind
	store string
	root  string
	rel   string
	src   recall.Kind
}

// taskKind is what a background task does.
type taskKind uint8

const (
	taskCapture   taskKind = iota + 1 // a log's new lines into the spool
	taskVersion                       // a memory file's settled version
	taskIndex                         // one file into the recall index
	taskIndexRoot                     // every searchable file of a root
)

func (k taskKind) String() string {
	switch k {
	case taskCapture:
		return "capture"
	case taskVersion:
		return "version"
	case taskIndex:
		return "index"
	case taskIndexRoot:
		return "index-root"
	}
	return "unknown"
}

// urgent reports whether the task goes before indexing: a log line the
// agent may trim, or a memory file it may save over, any moment matters
// more than an index, which only saves a search time.
func (k taskKind) urgent() bool { return k == taskCapture || k == taskVersion }

// maxBackground bounds the background tasks waiting at once.
const maxBackground = 100_000

// later is a task due a while after it is asked for: once its file has
// been quiet that long (each write pushes it back), or, throttled, that
// long after the first ask (writes meanwhile join it).
type later struct {
	t        task
	quiet    time.Duration
	throttle bool
}

// background runs tasks one at a time. Its goroutine owns the pending set;
// the watcher only sends to it, without ever blocking.
type background struct {
	in chan task
	// delay receives tasks to run once their file was quiet for a while
	// (versions: an O_TRUNC-then-write save is one version, not an empty
	// one and then the content).
	delay chan later
	// queued is how many tasks wait or run, for the catch-up's progress.
	queued atomic.Int64
	run    func(context.Context, task)
	log    *slog.Logger
	wg     sync.WaitGroup
	stop   context.CancelFunc
	// dropped lists the roots a capture was dropped for (a flood of
	// changes filled the queue): their next evaluation looks for the logs
	// that went meanwhile (Dropped). droppedMu guards it.
	droppedMu sync.Mutex
	dropped   map[string]bool
	// onDrop, when set, hears of each capture dropped (the daemon's
	// passes: the root's evaluation goes through its files again).
	onDrop func(root string)
}

// drop notes a task that was not queued.
func (b *background) drop(t task) {
	if t.kind != taskCapture {
		return // an index or version is taken again by the evaluation
	}
	if b.onDrop != nil {
		b.onDrop(t.root)
	}
	b.droppedMu.Lock()
	defer b.droppedMu.Unlock()
	if b.dropped == nil {
		b.dropped = map[string]bool{}
	}
	b.dropped[t.root] = true
}

// Dropped reports (and forgets) whether a capture of root was dropped
// since the last call.
func (b *background) Dropped(root string) bool {
	b.droppedMu.Lock()
	defer b.droppedMu.Unlock()
	was := b.dropped[root]
	delete(b.dropped, root)
	return was
}

func newBackground(run func(context.Context, task), log *slog.Logger) *background {
	return &background{in: make(chan task, 4096), delay: make(chan later, 4096), run: run, log: log}
}

// Start runs the loop until Stop.
func (b *background) Start() {
	ctx, cancel := context.WithCancel(context.Background())
	b.stop = cancel
	b.wg.Add(1)
	go func() {
		defer b.wg.Done()
		queue := newTaskQueue()
		// add queues t unless it waits already; past maxBackground the
		// task is dropped (said once): the roots' evaluations capture
		// and index what a dropped task would have, later.
		full := false
		add := func(t task) {
			switch {
			case queue.Has(t):
			case queue.Len() >= maxBackground:
				b.drop(t)
				if !full {
					full = true
					b.log.Warn("the background queue is full; what waits beyond it is captured and indexed by the roots' evaluations instead", "max", maxBackground)
				}
			default:
				if full && queue.Len() < maxBackground/2 {
					full = false // said again if it fills again
				}
				queue.Push(t)
			}
		}
		// due holds the delayed tasks, each pushed back by every write to
		// its file; timer fires for the earliest.
		due := &dueTasks{at: map[task]time.Time{}}
		timer := time.NewTimer(time.Hour)
		defer timer.Stop()
		reset := func() {
			timer.Stop()
			if next, ok := due.next(); ok {
				timer.Reset(max(time.Until(next), 0))
			}
		}
		ripe := func() {
			for _, t := range due.ripe(time.Now()) {
				add(t)
			}
			reset()
		}
		for {
			if queue.Len() == 0 {
				select {
				case <-ctx.Done():
					return
				case t := <-b.in:
					add(t)
				case l := <-b.delay:
					delay(due, l)
					reset()
					continue
				case <-timer.C:
					ripe()
					continue
				}
			}
			for drained := false; !drained; {
				select {
				case l := <-b.delay:
					delay(due, l)
				default:
					drained = true
				}
			}
			ripe()
			b.queued.Store(int64(queue.Len() + len(b.in)))
			// Take everything queued meanwhile, so a burst of writes to one
			// file is one task.
			for drained := false; !drained; {
				select {
				case t := <-b.in:
					add(t)
				default:
					drained = true
				}
			}
			// Captures and versions go first, each root's in the order
			// they came and the roots in turn (taskQueue): a log line the
			// agent may trim, or a memory file it may save over, any
			// moment matters more than an index, which only saves a
			// search time.
			t, _ := queue.Pop()
			b.queued.Store(int64(queue.Len() + len(b.in) + 1))
			b.run(ctx, t)
			b.queued.Store(int64(queue.Len() + len(b.in)))
			if ctx.Err() != nil {
				return
			}
		}
	}()
}

// Stop ends the loop after the task in progress and waits for it.
func (b *background) Stop() {
	if b.stop != nil {
		b.stop()
	}
	b.wg.Wait()
}

// Queue asks for a task; when the queue is full it is dropped (see above).
func (b *background) Queue(t task) {
	select {
	case b.in <- t:
	default:
		b.drop(t)
	}
}

// dueTasks are the delayed tasks by when they are due: a map of each
// task's time and a heap of (time, task) with stale entries skipped, so
// a million files written at once cost log n each, not n.
type dueTasks struct {
	at   map[task]time.Time
	heap dueHeap
}

type dueEntry struct {
	at time.Time
	t  task
}

type dueHeap []dueEntry

func (h dueHeap) Len() int           { return len(h) }
func (h dueHeap) Less(i, j int) bool { return h[i].at.Before(h[j].at) }
func (h dueHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *dueHeap) Push(x any)        { *h = append(*h, x.(dueEntry)) }
func (h *dueHeap) Pop() any {
	old := *h
	e := old[len(old)-1]
	*h = old[:len(old)-1]
	return e
}

// next is when the earliest task is due.
func (d *dueTasks) next() (time.Time, bool) {
	for d.heap.Len() > 0 {
		e := d.heap[0]
		if at, ok := d.at[e.t]; ok && at.Equal(e.at) {
			return e.at, true
		}
		heap.Pop(&d.heap) // stale: pushed back, or taken
	}
	return time.Time{}, false
}

// ripe takes the tasks due by now.
func (d *dueTasks) ripe(now time.Time) []task {
	var out []task
	for {
		at, ok := d.next()
		if !ok || at.After(now) {
			return out
		}
		e := heap.Pop(&d.heap).(dueEntry)
		delete(d.at, e.t)
		out = append(out, e.t)
	}
}

// delay adds a later task to the due tasks (past maxBackground, drops it:
// see add).
func delay(due *dueTasks, l later) {
	if _, ok := due.at[l.t]; ok && l.throttle {
		return // due already: this write joins it
	}
	if _, ok := due.at[l.t]; !ok && len(due.at) >= maxBackground {
		return
	}
	at := time.Now().Add(l.quiet)
	due.at[l.t] = at
	heap.Push(&due.heap, dueEntry{at, l.t})
	if due.heap.Len() > 4*maxBackground {
		// Too many stale entries: build it again from the live ones.
		due.heap = due.heap[:0]
		for t, at := range due.at {
			due.heap = append(due.heap, dueEntry{at, t})
		}
		heap.Init(&due.heap)
	}
}

// Throttle asks for a task at most every d: the first ask makes it due d
// later, and the asks until then join it.
func (b *background) Throttle(t task, d time.Duration) {
	select {
	case b.delay <- later{t: t, quiet: d, throttle: true}:
	default:
	}
}

// After asks for a task once its file has had no write for quiet; each
// later call for the same task pushes it back.
func (b *background) After(t task, quiet time.Duration) {
	select {
	case b.delay <- later{t: t, quiet: quiet}:
	default:
	}
}

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
				d.bg.Queue(task{kind: taskCapture, store: store, root: root, rel: rel})
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
				d.bg.Throttle(task{kind: taskIndex, store: store, root: root, rel: rel, src: src.Kind}, indexEvery)
				if rt.store.Versions {
					// A version is the file once its write has settled, as
					// the rules read it: a save that truncates, then writes,
					// is one version. A deletion needs no settling.
					t := task{kind: taskVersion, store: store, root: root, rel: rel}
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
func (d *Daemon) runTask(ctx context.Context, t task) {
	rt := d.store(t.store)
	if rt == nil {
		return
	}
	root, err := d.openRoot(rt.store, t.root)
	if err != nil {
		return // the evaluation job reports a refused root
	}
	defer root.Close()
	switch t.kind {
	case taskCapture:
		t0 := time.Now()
		res, err := d.spool.Capture(ctx, root, t.rel, spool.Options{MaxLine: int(rt.store.MaxLine), IsMessage: session.IsMessage})
		if err != nil {
			if d.stateFailed(t.store, t.root, "the lines of "+filepath.Join(t.root, t.rel), err) {
				return
			}
			if !layout.IsRefusal(err) && ctx.Err() == nil {
				d.log.Debug("capture on write failed; the rule captures before it reads", "root", t.root, "log", t.rel, "err", err)
			}
			return
		}
		d.metrics.captured.Add(float64(res.Lines))
		rt.env.CaptureBounds(root, t.rel, res)
		if res.Why == "gone" {
			// What the rules owe a log the agent deleted is found by an
			// evaluation after it was marked gone (one, however many go:
			// the engine merges them).
			d.engine.Submit(jobs.Job{Store: t.store, Root: t.root, Rule: ruleEvaluate, Reason: jobs.ReasonLogGone})
		}
		if res.Why != "same" {
			d.log.Debug("captured", "root", t.root, "log", t.rel, "lines", res.Lines, "why", res.Why, "gen", res.Gen, "took", time.Since(t0))
		}
	case taskIndex:
		d.indexFile(root, rt, t.rel, t.src)
	case taskVersion:
		if d.versionable(ctx, rt, t.root, t.rel) {
			d.captureVersion(ctx, root, rt, t.rel)
		}
	case taskIndexRoot:
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
func (d *Daemon) indexRoot(ctx context.Context, root *confine.Root, rt *storeRT, t task) bool {
	sr, ok := rt.layout.(layout.Searchable)
	if !ok {
		return false
	}
	srcs := sr.Sources(rt.store)
	key := t.store + "\x00" + t.root
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
				d.catch.read(t.store, t.root, fi.Size())
			}
			if d.versionable(ctx, rt, t.root, m) {
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
	d.metrics.indexed.Add(float64(n))
}
