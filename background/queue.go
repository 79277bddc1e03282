package background

import "github.com/cespare/xxhash/v2"

// taskQueue is the background goroutine's pending tasks: each task once,
// in per-root FIFOs served round-robin, captures and versions before
// indexing. A root whose agent deleted 100,000 logs at once queues 100,000
// captures; another root's new line still waits for one task of it, not
// for all of them. Pushing and taking cost O(1) whatever the queue holds.
// Only the background goroutine uses it.
type taskQueue struct {
	// pending holds each queued task's hash (a task is some 80 bytes;
	// 100,000 of them are kept once, in the FIFOs). Two tasks of one hash
	// are taken for one: the second waits for the evaluation, as a task
	// dropped from a full queue does.
	pending map[uint64]bool
	urgent  roundRobin // captures and versions: a line an agent may trim any moment
	rest    roundRobin // indexing: only saves a search time
}

func newTaskQueue() *taskQueue { return &taskQueue{pending: map[uint64]bool{}} }

func (t Task) hash() uint64 {
	d := xxhash.New()
	d.Write([]byte{byte(t.Kind)})
	for _, s := range []string{t.Store, t.Root, t.Rel} {
		d.WriteString(s)
		d.Write([]byte{0})
	}
	d.Write([]byte{byte(t.Src)})
	return d.Sum64()
}

// Len is the number of tasks queued.
func (q *taskQueue) Len() int { return len(q.pending) }

// Has reports whether t is queued.
func (q *taskQueue) Has(t Task) bool { return q.pending[t.hash()] }

// Push queues t unless it is queued already.
func (q *taskQueue) Push(t Task) {
	h := t.hash()
	if q.pending[h] {
		return
	}
	q.pending[h] = true
	if t.Kind.urgent() {
		q.urgent.push(t)
	} else {
		q.rest.push(t)
	}
}

// Pop takes the next task: an urgent one of the next root that has one,
// else an index task of the next root; ok is false when none is queued.
func (q *taskQueue) Pop() (Task, bool) {
	t, ok := q.urgent.pop()
	if !ok {
		t, ok = q.rest.pop()
	}
	if ok {
		delete(q.pending, t.hash())
	}
	return t, ok
}

// HasUrgent reports whether a capture or a version is queued.
func (q *taskQueue) HasUrgent() bool { return len(q.urgent.ring) > 0 }

// PopUrgent takes the next capture or version, as Pop would; ok is false
// when none is queued (indexing, queued or not, stays).
func (q *taskQueue) PopUrgent() (Task, bool) {
	t, ok := q.urgent.pop()
	if ok {
		delete(q.pending, t.hash())
	}
	return t, ok
}

// roundRobin holds a FIFO per root and serves the roots in turn.
type roundRobin struct {
	fifos map[string]*fifo
	ring  []string // roots with tasks, in the order they are served
	next  int
}

func (r *roundRobin) push(t Task) {
	if r.fifos == nil {
		r.fifos = map[string]*fifo{}
	}
	f := r.fifos[t.Root]
	if f == nil {
		f = &fifo{}
		r.fifos[t.Root] = f
		r.ring = append(r.ring, t.Root)
	}
	f.push(t)
}

func (r *roundRobin) pop() (Task, bool) {
	if len(r.ring) == 0 {
		return Task{}, false
	}
	if r.next >= len(r.ring) {
		r.next = 0
	}
	root := r.ring[r.next]
	f := r.fifos[root]
	t := f.pop()
	if f.len() == 0 {
		delete(r.fifos, root)
		r.ring = append(r.ring[:r.next], r.ring[r.next+1:]...)
	} else {
		r.next++
	}
	return t, true
}

// fifo is a queue that reuses its slice: taking from the front moves a
// head index, and the slice is compacted once half of it is taken.
type fifo struct {
	items []Task
	head  int
}

func (f *fifo) push(t Task) { f.items = append(f.items, t) }

func (f *fifo) len() int { return len(f.items) - f.head }

func (f *fifo) pop() Task {
	t := f.items[f.head]
	f.items[f.head] = Task{}
	f.head++
	if f.head > 64 && f.head*2 >= len(f.items) {
		f.items = append(f.items[:0], f.items[f.head:]...)
		f.head = 0
	}
	return t
}
