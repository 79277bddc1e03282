// Package jobs runs layout rules as jobs: at most one job per store root at a
// time, a global limit on concurrent jobs, merged triggers, bounded retries
// with backoff, and cooldowns so that no rule can loop.
package jobs

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"sync"
	"syscall"
	"time"

	"github.com/memwatch/memwatch/control"
)

// Job is one unit of work: a rule of a store applied to one target of a root.
type Job struct {
	Store  string `json:"store"`
	Root   string `json:"root"`
	Rule   string `json:"rule"`
	Target string `json:"target"`
	Reason Reason `json:"reason,omitempty"` // why it was triggered, for logs

	attempt int
	fn      func(context.Context) error // exclusive work (undo) instead of a rule
	reply   chan error
}

type key struct{ store, root string }

type jobKey struct{ store, root, rule, target string }

func (j *Job) key() key       { return key{j.Store, j.Root} }
func (j *Job) jobKey() jobKey { return jobKey{j.Store, j.Root, j.Rule, j.Target} }

// Asked reports whether a job's reason is a person's request (memwatch
// trigger, memwatch redo), which no cooldown delays.
func Asked(reason Reason) bool { return reason.Asked() }

// Result is what a runner reports about a finished job.
type Result struct {
	// Changed is true when the job rewrote something; the rule then cools down.
	Changed bool
	// CoolDown asks for a cooldown even without a change (e.g. the heuristic
	// could not get under a threshold and said so once).
	CoolDown bool
	// RetryAfter asks for the job to run again after this long (a target
	// being written continuously: the rule backs off and tries again).
	RetryAfter time.Duration
}

// Runner executes one job.
type Runner func(ctx context.Context, j Job) (Result, error)

// retryable marks an error worth another attempt.
type retryable struct{ err error }

func (r retryable) Error() string { return r.err.Error() }
func (r retryable) Unwrap() error { return r.err }

// ErrTimeout is a job cancelled at its deadline (Config.Timeout).
var ErrTimeout = errors.New("job timed out")

// Retry marks err as transient: the engine retries the job with backoff.
func Retry(err error) error {
	if err == nil {
		return nil
	}
	return retryable{err}
}

// IsRetryable reports whether err was marked with Retry, or is the
// process's want of a descriptor (EMFILE, ENFILE): a moment later there
// is one again.
func IsRetryable(err error) bool {
	var r retryable
	return errors.As(err, &r) || errors.Is(err, syscall.EMFILE) || errors.Is(err, syscall.ENFILE)
}

// Config tunes the engine.
type Config struct {
	MaxJobs     int           // global concurrent jobs, default 2
	MaxAttempts int           // attempts per job, default 4
	Backoff     time.Duration // first retry delay, default 2s; doubles each time
	MaxBackoff  time.Duration // default 2m
	Cooldown    func(store string) time.Duration
	// OnFail is called (from a worker) when a job failed for good.
	OnFail func(j Job, err error)
	// ShutdownTimeout is how long running jobs may finish after Run's context ends.
	ShutdownTimeout time.Duration
	// Timeout bounds one job: past it its context ends (an LLM call, an
	// SQLite query of an app's database are interrupted), and the job is
	// reported as failed for it, freeing its slot. 0: no bound.
	Timeout time.Duration
}

// Engine queues and runs jobs. All its mutable state is owned by the
// goroutine in Run; other goroutines talk to it through channels.
type Engine struct {
	cfg  Config
	run  Runner
	log  *slog.Logger
	msgs chan func(*loopState)

	jobCtx    context.Context
	cancelJob context.CancelFunc
	stopping  chan struct{} // closed when Run's context ends (see Stopping)
	workers   sync.WaitGroup
	started   chan struct{}
	stopped   chan struct{}
}

// loopState is touched only by the Run goroutine.
type loopState struct {
	queues   map[key][]*Job
	order    []key // roots with queued work, oldest first
	running  map[key]*Job
	rerun    map[jobKey]Reason // the reason of the run after the running one
	cooling  map[jobKey]time.Time
	deferred map[jobKey]*time.Timer
	retries  map[*time.Timer]bool
	stopping bool
	stats    Stats
}

// Stats counts the engine's jobs since start (the status answer's type).
type Stats = control.JobStats

// Status is a snapshot of the engine.
type Status struct {
	Queued []Job `json:"queued"`
	// QueuedCount is how many jobs are queued: Queued may list only the
	// first of them (Capped).
	QueuedCount int   `json:"queued_count"`
	Running     []Job `json:"running"`
	Cooling     int   `json:"cooling"`
	Stats       Stats `json:"stats"`
}

// Capped lists at most n of the queued jobs (QueuedCount says how many
// there are): a status answer is bounded however long the queue.
func (s Status) Capped(n int) Status {
	s.QueuedCount = len(s.Queued)
	if len(s.Queued) > n {
		s.Queued = s.Queued[:n]
	}
	return s
}

// Only is the status of the jobs of the roots keep accepts: the queue and
// the running jobs (the counters are the engine's and are left out).
func (s Status) Only(keep func(root string) bool) Status {
	out := Status{Queued: []Job{}, Running: []Job{}}
	for _, j := range s.Queued {
		if keep(j.Root) {
			out.Queued = append(out.Queued, j)
		}
	}
	for _, j := range s.Running {
		if keep(j.Root) {
			out.Running = append(out.Running, j)
		}
	}
	return out
}

// New returns an engine; call Run to start it.
func New(cfg Config, run Runner, log *slog.Logger) *Engine {
	if cfg.MaxJobs < 1 {
		cfg.MaxJobs = 2
	}
	if cfg.MaxAttempts < 1 {
		cfg.MaxAttempts = 4
	}
	if cfg.Backoff <= 0 {
		cfg.Backoff = 2 * time.Second
	}
	if cfg.MaxBackoff <= 0 {
		cfg.MaxBackoff = 2 * time.Minute
	}
	if cfg.Cooldown == nil {
		cfg.Cooldown = func(string) time.Duration { return 0 }
	}
	if cfg.ShutdownTimeout <= 0 {
		cfg.ShutdownTimeout = 30 * time.Second
	}
	stopping := make(chan struct{})
	jctx, cancel := context.WithCancel(context.WithValue(context.Background(), stoppingKey{}, stopping))
	return &Engine{cfg: cfg, run: run, log: log, msgs: make(chan func(*loopState), 64),
		jobCtx: jctx, cancelJob: cancel, stopping: stopping, started: make(chan struct{}), stopped: make(chan struct{})}
}

type stoppingKey struct{}

// Stopping reports whether the engine running the job of ctx is shutting
// down. A job that works through a backlog in steps (a summary per window,
// a consolidation per range) stops between two steps: its context is only
// cancelled after the shutdown timeout, which a step must be allowed to
// finish within.
func Stopping(ctx context.Context) bool {
	ch, ok := ctx.Value(stoppingKey{}).(chan struct{})
	if !ok {
		return false
	}
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// send hands f to the loop; it is dropped once the engine has stopped.
func (e *Engine) send(f func(*loopState)) bool {
	select {
	case e.msgs <- f:
		return true
	case <-e.stopped:
		return false
	}
}

// Submit queues a job. A job already queued for the same target merges with
// it; one submitted while it runs causes one re-evaluation afterwards.
func (e *Engine) Submit(j Job) {
	e.send(func(s *loopState) { e.submit(s, &j) })
}

// Exclusive runs fn in the root's slot, so it never overlaps a job of that
// root (undo uses it), and waits for it.
func (e *Engine) Exclusive(ctx context.Context, store, root, what string, fn func(context.Context) error) error {
	j := &Job{Store: store, Root: root, Rule: what, fn: fn, reply: make(chan error, 1)}
	if !e.send(func(s *loopState) { e.enqueue(s, j) }) {
		return errors.New("engine stopped")
	}
	select {
	case err := <-j.reply:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Status returns the queue and running jobs.
// Pending is how many jobs are queued or running: cheaper than Status
// for a caller that only waits for the engine to drain.
func (e *Engine) Pending(ctx context.Context) (int, error) {
	ch := make(chan int, 1)
	if !e.send(func(s *loopState) {
		n := len(s.running)
		for _, k := range s.order {
			n += len(s.queues[k])
		}
		ch <- n
	}) {
		return 0, errors.New("engine stopped")
	}
	select {
	case n := <-ch:
		return n, nil
	case <-ctx.Done():
		return 0, ctx.Err()
	}
}

func (e *Engine) Status(ctx context.Context) (Status, error) {
	ch := make(chan Status, 1)
	if !e.send(func(s *loopState) {
		var st Status
		for _, k := range s.order {
			for _, j := range s.queues[k] {
				st.Queued = append(st.Queued, *j)
			}
		}
		for _, j := range s.running {
			st.Running = append(st.Running, *j)
		}
		st.QueuedCount = len(st.Queued)
		st.Cooling = len(s.cooling)
		st.Stats = s.stats
		ch <- st
	}) {
		return Status{}, errors.New("engine stopped")
	}
	select {
	case st := <-ch:
		return st, nil
	case <-ctx.Done():
		return Status{}, ctx.Err()
	}
}

// Run processes jobs until ctx ends, then lets running jobs finish for up to
// ShutdownTimeout, cancels the rest and waits for every worker.
func (e *Engine) Run(ctx context.Context) error {
	s := &loopState{queues: map[key][]*Job{}, running: map[key]*Job{}, rerun: map[jobKey]Reason{},
		cooling: map[jobKey]time.Time{}, deferred: map[jobKey]*time.Timer{}, retries: map[*time.Timer]bool{}}
	close(e.started)
	defer close(e.stopped)
	var deadline <-chan time.Time
	for {
		select {
		case f := <-e.msgs:
			f(s)
		case <-ctx.Done():
			if !s.stopping {
				s.stopping = true
				close(e.stopping)
				e.stopTimers(s)
				e.dropQueued(s)
				if len(s.running) > 0 {
					var names []string
					for _, j := range s.running {
						names = append(names, j.Store+"/"+j.Rule+" "+j.Root+" "+j.Target)
					}
					e.log.Info("waiting for running jobs", "jobs", len(s.running), "running", names, "timeout", e.cfg.ShutdownTimeout)
				}
				deadline = time.After(e.cfg.ShutdownTimeout)
			}
		case <-deadline:
			e.log.Warn("shutdown timeout reached; cancelling running jobs", "jobs", len(s.running))
			e.cancelJob()
			deadline = nil
		}
		if s.stopping && len(s.running) == 0 {
			e.cancelJob()
			e.workers.Wait()
			return nil
		}
		if !s.stopping {
			e.dispatch(s)
		}
	}
}

func (e *Engine) stopTimers(s *loopState) {
	for _, t := range s.deferred {
		t.Stop()
	}
	for t := range s.retries {
		t.Stop()
	}
}

func (e *Engine) dropQueued(s *loopState) {
	for _, k := range s.order {
		for _, j := range s.queues[k] {
			if j.reply != nil {
				j.reply <- errors.New("memwatch is shutting down")
			}
		}
	}
	s.queues, s.order = map[key][]*Job{}, nil
}

func (e *Engine) submit(s *loopState, j *Job) {
	if s.stopping {
		return
	}
	jk := j.jobKey()
	if Asked(j.Reason) {
		// A person asked for it (memwatch trigger, redo): no cooldown holds
		// it back; a cooling job waiting for its end runs now instead.
		if t, ok := s.deferred[jk]; ok && t.Stop() {
			delete(s.deferred, jk)
		}
		delete(s.cooling, jk)
	}
	if _, ok := s.deferred[jk]; ok {
		s.stats.Merged++ // the deferred evaluation will see this change too
		return
	}
	if until, ok := s.cooling[jk]; ok {
		if d := time.Until(until); d > 0 {
			// Cooling: evaluate once when the cooldown ends, not now.
			s.stats.Deferred++
			jj := *j
			s.deferred[jk] = time.AfterFunc(d, func() {
				e.send(func(s *loopState) {
					delete(s.deferred, jk)
					delete(s.cooling, jk)
					e.submit(s, &jj)
				})
			})
			return
		}
		delete(s.cooling, jk)
	}
	if r, ok := s.running[j.key()]; ok && r.jobKey() == jk {
		// A person's request merged into a run keeps its reason, so the
		// run after is theirs too (no cooldown holds it back).
		if Asked(j.Reason) || s.rerun[jk] == "" {
			s.rerun[jk] = j.Reason
		}
		s.stats.Merged++
		return
	}
	for _, q := range s.queues[j.key()] {
		if q.fn == nil && q.jobKey() == jk {
			if Asked(j.Reason) {
				q.Reason = j.Reason
			}
			s.stats.Merged++
			return
		}
	}
	e.enqueue(s, j)
}

func (e *Engine) enqueue(s *loopState, j *Job) {
	if s.stopping {
		if j.reply != nil {
			j.reply <- errors.New("memwatch is shutting down")
		}
		return
	}
	k := j.key()
	if len(s.queues[k]) == 0 {
		s.order = append(s.order, k)
	}
	s.queues[k] = append(s.queues[k], j)
}

func (e *Engine) dispatch(s *loopState) {
	for i := 0; i < len(s.order) && len(s.running) < e.cfg.MaxJobs; {
		k := s.order[i]
		if _, busy := s.running[k]; busy {
			i++
			continue
		}
		q := s.queues[k]
		j := q[0]
		if len(q) == 1 {
			delete(s.queues, k)
			s.order = append(s.order[:i], s.order[i+1:]...)
		} else {
			s.queues[k] = q[1:]
			// Move the root to the back so other roots get their turn.
			s.order = append(append(s.order[:i], s.order[i+1:]...), k)
		}
		s.running[k] = j
		s.stats.Started++
		e.workers.Add(1)
		go e.work(j)
	}
}

func (e *Engine) work(j *Job) {
	defer e.workers.Done()
	var res Result
	var err error
	ctx, cancel := e.jobCtx, context.CancelFunc(func() {})
	if e.cfg.Timeout > 0 {
		ctx, cancel = context.WithTimeout(e.jobCtx, e.cfg.Timeout)
	}
	func() {
		defer func() {
			if p := recover(); p != nil {
				err = fmt.Errorf("job panicked: %v", p)
			}
		}()
		if j.fn != nil {
			err = j.fn(ctx)
		} else {
			res, err = e.run(ctx, *j)
		}
	}()
	if errors.Is(ctx.Err(), context.DeadlineExceeded) && e.jobCtx.Err() == nil {
		err = fmt.Errorf("%w: the job ran past its bound of %v (job_timeout) and was cancelled (it returned: %v)", ErrTimeout, e.cfg.Timeout, err)
		res = Result{}
	}
	cancel()
	if j.reply != nil {
		j.reply <- err
		err = nil // the caller reports it
	}
	// The loop may already be draining; finish() must still reach it, which
	// send guarantees until Run returns (Run waits for running jobs).
	e.msgs <- func(s *loopState) { e.finish(s, j, res, err) }
}

func (e *Engine) finish(s *loopState, j *Job, res Result, err error) {
	delete(s.running, j.key())
	jk := j.jobKey()
	s.stats.Finished++
	if err != nil && IsRetryable(err) && j.attempt+1 < e.cfg.MaxAttempts && !s.stopping && e.jobCtx.Err() == nil {
		d := Backoff(e.cfg.Backoff, e.cfg.MaxBackoff, j.attempt)
		e.log.Warn("job failed; will retry", "store", j.Store, "root", j.Root, "rule", j.Rule, "path", j.Target, "attempt", j.attempt+1, "retry_in", d.Round(time.Millisecond), "err", err)
		s.stats.Retried++
		jj := *j
		jj.attempt++
		var t *time.Timer
		t = time.AfterFunc(d, func() {
			e.send(func(s *loopState) {
				delete(s.retries, t)
				delete(s.rerun, jk)
				e.enqueue(s, &jj)
			})
		})
		s.retries[t] = true
		return
	}
	if err != nil && !errors.Is(err, context.Canceled) {
		s.stats.Failed++
		e.log.Error("job failed", "store", j.Store, "root", j.Root, "rule", j.Rule, "path", j.Target, "attempts", j.attempt+1, "err", err)
		if e.cfg.OnFail != nil {
			e.cfg.OnFail(*j, err)
		}
	}
	if (err != nil || res.Changed || res.CoolDown) && j.fn == nil {
		if cd := e.cfg.Cooldown(j.Store); cd > 0 {
			s.cooling[jk] = time.Now().Add(cd)
		}
	}
	if res.RetryAfter > 0 && err == nil && !s.stopping && j.fn == nil {
		jj := *j.fresh()
		jj.Reason = ReasonRetry
		var t *time.Timer
		t = time.AfterFunc(res.RetryAfter, func() {
			e.send(func(s *loopState) {
				delete(s.retries, t)
				e.submit(s, &jj)
			})
		})
		s.retries[t] = true
	}
	if why, ok := s.rerun[jk]; ok {
		delete(s.rerun, jk)
		jj := j.fresh()
		if Asked(why) {
			jj.Reason = why
		}
		e.submit(s, jj)
	}
}

func (j *Job) fresh() *Job {
	return &Job{Store: j.Store, Root: j.Root, Rule: j.Rule, Target: j.Target, Reason: ReasonChangedWhileRunning}
}

// Backoff is the delay before retry number attempt (from 0): exponential
// from base, capped at max, with jitter between half and the whole delay so
// retries of many jobs (or LLM calls) do not arrive together.
func Backoff(base, max time.Duration, attempt int) time.Duration {
	d := base << attempt
	if d > max || d <= 0 {
		d = max
	}
	return d/2 + rand.N(d/2+1)
}
