// Package background is the daemon's queue of work beside the jobs: a
// log's new lines captured into the spool, a memory file's version
// taken, files indexed for recall, one task at a time (urgent ones first,
// roots in turn, some only once their file has been quiet a while); the
// passes through roots whose captures a flood dropped; and the catch-up's
// progress after a start. The daemon says what a task does (its run
// function); this package says when.
package background

import (
	"container/heap"
	"context"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/memwatch/memwatch/recall"
)

// Task is one piece of background work on a root.
type Task struct {
	Kind  Kind
	Store string
	Root  string
	Rel   string
	Src   recall.Kind
}

// Kind is what a background task does.
type Kind uint8

const (
	Capture   Kind = iota + 1 // a log's new lines into the spool
	Version                   // a memory file's settled version
	Index                     // one file into the recall index
	IndexRoot                 // every searchable file of a root
	SyncIndex                 // the index files written unsynced made durable
)

func (k Kind) String() string {
	switch k {
	case Capture:
		return "capture"
	case Version:
		return "version"
	case Index:
		return "index"
	case IndexRoot:
		return "index-root"
	case SyncIndex:
		return "sync-index"
	}
	return "unknown"
}

// urgent reports whether the task goes before indexing: a log line the
// agent may trim, or a memory file it may save over, any moment matters
// more than an index, which only saves a search time.
func (k Kind) urgent() bool { return k == Capture || k == Version }

// maxBackground bounds the background tasks waiting at once.
const maxBackground = 100_000

// later is a task due a while after it is asked for: once its file has
// been quiet that long (each write pushes it back), or, throttled, that
// long after the first ask (writes meanwhile join it).
type later struct {
	t        Task
	quiet    time.Duration
	throttle bool
}

// Runner runs tasks one at a time. Its goroutine owns the pending set;
// the watcher only sends to it, without ever blocking.
type Runner struct {
	in chan Task
	// delay receives tasks to run once their file was quiet for a while
	// (versions: an O_TRUNC-then-write save is one version, not an empty
	// one and then the content).
	delay chan later
	// Queued is how many tasks wait or run, for the catch-up's progress.
	Queued atomic.Int64
	run    func(context.Context, Task)
	log    *slog.Logger
	wg     sync.WaitGroup
	stop   context.CancelFunc
	// dropped lists the roots a capture was dropped for (a flood of
	// changes filled the queue): their next evaluation looks for the logs
	// that went meanwhile (Dropped). droppedMu guards it.
	droppedMu sync.Mutex
	dropped   map[string]bool
	// OnDrop, when set, hears of each capture dropped (the daemon's
	// passes: the root's evaluation goes through its files again).
	OnDrop func(root string)
	// release, when set (HoldIndexing), is closed by Release: until then
	// only captures and versions run, the rest waits in the queue.
	release     chan struct{}
	releaseOnce sync.Once
}

// HoldIndexing, called before Start, keeps every task but captures and
// versions queued until Release: the daemon's start (its watches over
// every root) goes first, and the catch-up's indexing of 10,000 roots
// beside it on two cores made it later by a third. The tasks wait in the
// runner's own queue, so none is dropped for waiting.
func (b *Runner) HoldIndexing() { b.release = make(chan struct{}) }

// Release lets the tasks HoldIndexing held run; safe to call more than
// once, or without HoldIndexing.
func (b *Runner) Release() {
	if b.release != nil {
		b.releaseOnce.Do(func() { close(b.release) })
	}
}

// drop notes a task that was not queued.
func (b *Runner) drop(t Task) {
	if t.Kind != Capture {
		return // an index or version is taken again by the evaluation
	}
	if b.OnDrop != nil {
		b.OnDrop(t.Root)
	}
	b.droppedMu.Lock()
	defer b.droppedMu.Unlock()
	if b.dropped == nil {
		b.dropped = map[string]bool{}
	}
	b.dropped[t.Root] = true
}

// Dropped reports (and forgets) whether a capture of root was dropped
// since the last call.
func (b *Runner) Dropped(root string) bool {
	b.droppedMu.Lock()
	defer b.droppedMu.Unlock()
	was := b.dropped[root]
	delete(b.dropped, root)
	return was
}

func NewRunner(run func(context.Context, Task), log *slog.Logger) *Runner {
	return &Runner{in: make(chan Task, 4096), delay: make(chan later, 4096), run: run, log: log}
}

// Start runs the loop until Stop.
func (b *Runner) Start() {
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
		add := func(t Task) {
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
		due := &dueTasks{at: map[Task]time.Time{}}
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
		// held is the release's channel while indexing is held, then nil
		// (a nil channel is never ready).
		held := b.release
		for {
			if queue.Len() == 0 || held != nil && !queue.HasUrgent() {
				select {
				case <-ctx.Done():
					return
				case <-held:
					held = nil
					continue
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
			b.Queued.Store(int64(queue.Len() + len(b.in)))
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
			pop := queue.Pop
			if held != nil {
				pop = queue.PopUrgent
			}
			t, ok := pop()
			if !ok {
				continue // held: what is queued waits for the release
			}
			b.Queued.Store(int64(queue.Len() + len(b.in) + 1))
			b.run(ctx, t)
			b.Queued.Store(int64(queue.Len() + len(b.in)))
			if ctx.Err() != nil {
				return
			}
		}
	}()
}

// Stop ends the loop after the task in progress and waits for it.
func (b *Runner) Stop() {
	if b.stop != nil {
		b.stop()
	}
	b.wg.Wait()
}

// Queue asks for a task; when the queue is full it is dropped (see above).
func (b *Runner) Queue(t Task) {
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
	at   map[Task]time.Time
	heap dueHeap
}

type dueEntry struct {
	at time.Time
	t  Task
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
func (d *dueTasks) ripe(now time.Time) []Task {
	var out []Task
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
func (b *Runner) Throttle(t Task, d time.Duration) {
	select {
	case b.delay <- later{t: t, quiet: d, throttle: true}:
	default:
	}
}

// After asks for a task once its file has had no write for quiet; each
// later call for the same task pushes it back.
func (b *Runner) After(t Task, quiet time.Duration) {
	select {
	case b.delay <- later{t: t, quiet: quiet}:
	default:
	}
}
