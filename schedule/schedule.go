// Package schedule runs rules on a clock with robfig/cron. Schedules are in
// local time (the TZ environment variable or /etc/localtime); a run missed
// while memwatch was down is run once at start, as logrotate does.
package schedule

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/robfig/cron/v3"

	"github.com/memwatch/memwatch/state"
)

const ns = "schedule"

// Entry is one scheduled task.
type Entry struct {
	Name string // unique; the key of its last run in the state store
	Spec string // standard 5-field cron spec or a descriptor such as @daily
	Run  func()
}

// Scheduler owns a cron instance.
type Scheduler struct {
	cron  *cron.Cron
	db    *state.DB
	log   *slog.Logger
	now   func() time.Time
	mu    sync.Mutex              // guards names: Add may run while Next is asked
	names map[cron.EntryID]string // the entries' names, for Next
}

// Parse parses a spec the way the scheduler will.
func Parse(spec string) (cron.Schedule, error) {
	s, err := cron.ParseStandard(spec)
	if err != nil {
		return nil, fmt.Errorf("parse schedule %q: %w", spec, err)
	}
	return s, nil
}

// Missed reports whether a run between last and now was missed.
func Missed(s cron.Schedule, last, now time.Time) bool {
	if last.IsZero() {
		return false
	}
	next := s.Next(last)
	return !next.After(now)
}

// New builds a scheduler in the given location (time.Local in production).
func New(db *state.DB, log *slog.Logger, loc *time.Location, now func() time.Time) *Scheduler {
	logger := cron.VerbosePrintfLogger(slogPrintf{log})
	return &Scheduler{cron: cron.New(cron.WithLocation(loc), cron.WithChain(cron.Recover(logger))), db: db, log: log, now: now}
}

type slogPrintf struct{ log *slog.Logger }

func (s slogPrintf) Printf(format string, args ...any) { s.log.Debug(fmt.Sprintf(format, args...)) }

// Add registers entries and runs, once, every entry whose scheduled run was
// missed since its last recorded run.
func (s *Scheduler) Add(ctx context.Context, entries []Entry) error {
	for _, e := range entries {
		sched, err := Parse(e.Spec)
		if err != nil {
			return err
		}
		e := e
		run := func() {
			e.Run()
			_ = s.db.Put(context.Background(), ns, e.Name, []byte(s.now().Format(time.RFC3339)))
		}
		id := s.cron.Schedule(sched, cron.FuncJob(run))
		s.mu.Lock()
		if s.names == nil {
			s.names = map[cron.EntryID]string{}
		}
		s.names[id] = e.Name
		s.mu.Unlock()
		raw, ok, err := s.db.Get(ctx, ns, e.Name)
		if err != nil {
			return err
		}
		var last time.Time
		if ok {
			last, _ = time.Parse(time.RFC3339, string(raw))
		}
		switch {
		case !ok:
			// First start: nothing was missed; remember when we began.
			_ = s.db.Put(ctx, ns, e.Name, []byte(s.now().Format(time.RFC3339)))
		case Missed(sched, last, s.now()):
			s.log.Info("running a scheduled task missed while memwatch was down", "task", e.Name, "last_run", last.Format(time.RFC3339))
			run()
		}
	}
	return nil
}

// Next is the next run of the entries whose names start with prefix, the
// soonest (zero when none is scheduled).
func (s *Scheduler) Next(prefix string) time.Time {
	var next time.Time
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, e := range s.cron.Entries() {
		if name := s.names[e.ID]; strings.HasPrefix(name, prefix) && !e.Next.IsZero() && (next.IsZero() || e.Next.Before(next)) {
			next = e.Next
		}
	}
	return next
}

// Start starts the cron goroutine.
func (s *Scheduler) Start() { s.cron.Start() }

// Stop stops the scheduler and waits for running tasks.
func (s *Scheduler) Stop() { <-s.cron.Stop().Done() }
