package layout

import (
	"context"
	"sync"
	"time"

	"github.com/memwatch/memwatch/confine"
	"github.com/memwatch/memwatch/spool"
)

// Many files changing at once in a root (an agent deleting 100,000 session
// logs, a git checkout, an rsync) must become a few jobs, not one per file.
// A rule whose evaluation finds several targets of one kind hands them to
// Batches and returns the one target BatchTarget: its job takes the
// targets a batch at a time and works each batch off together (one
// consolidation over many logs, not a job per log).

// BatchTarget is the target of a job that works off the root's batch.
const BatchTarget = "*"

// maxBatched bounds the targets held for one root and rule (a few MiB of
// names); past it, the rest wait for a later evaluation, which finds them
// again.
const maxBatched = 50_000

// Batches holds, per root and rule, the targets an evaluation found and
// the rule's batch job has not taken yet, each once, oldest first. Safe
// for concurrent use; it lives as long as the daemon (a restart finds the
// targets again by evaluating).
type Batches struct {
	mu sync.Mutex
	m  map[batchKey]*batch
	// gone is, per root and consumer, the spool time up to which GoneLogs
	// has looked.
	gone map[batchKey]time.Time
}

type batchKey struct{ root, rule string }

type batch struct {
	order []string
	has   map[string]bool
}

// Add queues targets of root for rule.
func (b *Batches) Add(root *confine.Root, rule string, targets ...string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.m == nil {
		b.m = map[batchKey]*batch{}
	}
	k := batchKey{root.ID().Key(), rule}
	q := b.m[k]
	if q == nil {
		q = &batch{has: map[string]bool{}}
		b.m[k] = q
	}
	for _, t := range targets {
		if !q.has[t] && len(q.has) < maxBatched {
			q.has[t] = true
			q.order = append(q.order, t)
		}
	}
}

// Pending reports how many targets of root wait for rule's batch job.
func (b *Batches) Pending(root *confine.Root, rule string) int {
	b.mu.Lock()
	defer b.mu.Unlock()
	if q := b.m[batchKey{root.ID().Key(), rule}]; q != nil {
		return len(q.order)
	}
	return 0
}

// Take removes and returns at most n targets of root for rule, oldest
// first.
func (b *Batches) Take(root *confine.Root, rule string, n int) []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	k := batchKey{root.ID().Key(), rule}
	q := b.m[k]
	if q == nil {
		return nil
	}
	n = min(n, len(q.order))
	out := append([]string(nil), q.order[:n]...)
	q.order = q.order[n:]
	for _, t := range out {
		delete(q.has, t)
	}
	if len(q.order) == 0 {
		delete(b.m, k)
	}
	return out
}

// BatchOver is the most targets an evaluation gives as a job each: more
// are a burst, worked off by one job.
const BatchOver = 8

// Batched returns targets as an evaluation's answer: the targets
// themselves when there are at most BatchOver and no batch waits, else
// the one BatchTarget, the rest queued for it.
func (e *Env) Batched(root *confine.Root, rule string, targets []string) []string {
	if e.Batches == nil || len(targets) <= BatchOver && e.Batches.Pending(root, rule) == 0 {
		return targets
	}
	if len(targets) > 0 {
		e.Batches.Add(root, rule, targets...)
	}
	if e.Batches.Pending(root, rule) == 0 {
		return nil
	}
	return []string{BatchTarget}
}

// goneSlack covers a log marked gone while GoneLogs ran: its time may be
// a moment before the query's.
const goneSlack = time.Second

// maxGone bounds the gone logs one evaluation takes.
const maxGone = 10_000

// GoneLogs lists the session logs of root that went missing since the
// last call for this consumer and that it has not read to their end, at
// most maxGone (more is true when there may be others: the evaluation
// goes on in its next slice). The first call of a run looks at every gone
// log, later ones only at those marked gone since: each call costs the
// logs gone meanwhile, not every log the root ever held.
func (e *Env) GoneLogs(ctx context.Context, root *confine.Root, consumer string) (logs []spool.Log, more bool, err error) {
	k := batchKey{root.ID().Key(), consumer}
	var since time.Time
	if e.Batches != nil {
		e.Batches.mu.Lock()
		since = e.Batches.gone[k]
		e.Batches.mu.Unlock()
	}
	now := e.Spool.Now()
	logs, err = e.Spool.GoneSince(ctx, root.ID(), consumer, since, maxGone)
	if err != nil || e.Batches == nil {
		return logs, false, err
	}
	next := now.Add(-goneSlack)
	if len(logs) == maxGone {
		next, more = logs[len(logs)-1].Changed, true
	}
	e.Batches.mu.Lock()
	if e.Batches.gone == nil {
		e.Batches.gone = map[batchKey]time.Time{}
	}
	e.Batches.gone[k] = next
	e.Batches.mu.Unlock()
	return logs, more, nil
}
