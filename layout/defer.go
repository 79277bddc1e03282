package layout

import (
	"context"
	"errors"
	"fmt"
	"github.com/memwatch/memwatch/policy"
	"strconv"
	"sync"
	"time"

	"github.com/memwatch/memwatch/confine"
	"github.com/memwatch/memwatch/jobs"
	"github.com/memwatch/memwatch/rewrite"
	"github.com/memwatch/memwatch/state"
)

// Backoff bounds for a target being written continuously.
const (
	busyFirst = time.Second
	busyMax   = 5 * time.Minute
)

// busyState is one target's run of deferrals.
type busyState struct {
	since    time.Time
	attempts int
}

// BusyTargets remembers deferrals per store; the Env of a store holds one.
type BusyTargets struct {
	mu sync.Mutex
	m  map[string]*busyState
}

// Deferred turns a rewrite's BusyError into a retry with a growing delay
// (1 s, 2 s, 4 s ... 5 min), reported in memwatch status while it lasts
// and journaled once per run of deferrals. It returns ok false when err is
// not a BusyError.
func (e *Env) Deferred(ctx context.Context, root *confine.Root, rule, target string, err error) (jobs.Result, bool) {
	var busy *rewrite.BusyError
	if !errors.As(err, &busy) {
		return jobs.Result{}, false
	}
	key := root.Path() + "\x00" + rule + "\x00" + target
	if e.Busy == nil {
		e.Busy = &BusyTargets{}
	}
	e.Busy.mu.Lock()
	if e.Busy.m == nil {
		e.Busy.m = map[string]*busyState{}
	}
	b, ok := e.Busy.m[key]
	if !ok {
		b = &busyState{since: e.Now()}
		e.Busy.m[key] = b
	}
	b.attempts++
	attempts, since := b.attempts, b.since
	e.Busy.mu.Unlock()
	delay := busyFirst << min(attempts-1, 10)
	if delay > busyMax {
		delay = busyMax
	}
	msg := fmt.Sprintf("%s: %s; %s deferred (%d attempts since %s, next in %s)", e.Store.Name, busy.Error(), rule, attempts, since.Format(time.TimeOnly), delay)
	e.Warnings.Set(root.Path(), "busy:"+rule+":"+target, msg)
	if attempts == 1 {
		e.Log.Warn("target is being written continuously; deferred", "root", root.Path(), "rule", rule, "path", target, "why", busy.Why, "holders", fmt.Sprint(busy.Holders))
		rec := e.Record(rule)
		rec.Root, rec.Target, rec.Outcome = root.Path(), target, state.Skipped
		rec.Reason = busy.Error() + "; " + rule + " deferred until it is quiet"
		if _, jerr := e.DB.Append(ctx, rec); jerr != nil {
			e.Log.Error("journal a deferral", "err", jerr)
		}
	}
	return jobs.Result{RetryAfter: delay}, true
}

// NotBusy ends a run of deferrals for a target (the rewrite went through,
// or there is nothing to do any more).
func (e *Env) NotBusy(root *confine.Root, rule, target string) {
	if e.Busy == nil {
		return
	}
	key := root.Path() + "\x00" + rule + "\x00" + target
	e.Busy.mu.Lock()
	_, had := e.Busy.m[key]
	delete(e.Busy.m, key)
	e.Busy.mu.Unlock()
	if had {
		e.Warnings.Clear(root.Path(), "busy:"+rule+":"+target)
	}
}

// Regrown reports whether a target over its size limit has grown enough
// since memwatch last compacted it to be worth compacting again. After a
// compaction that could not get under limit, the target must grow by
// regrow (0: a quarter of limit) beyond that compaction's result first;
// otherwise every agent write would trigger another full archive. The
// wait is journaled once per compaction.
func (e *Env) Regrown(ctx context.Context, root *confine.Root, rule, target string, size, limit, regrow int64) bool {
	last, ok, err := e.DB.LastFor(ctx, root.Path(), rule, target, state.Done)
	if err != nil || !ok || last.AfterSize <= limit {
		return true
	}
	if regrow <= 0 {
		regrow = max(limit/4, 1)
	}
	if size >= last.AfterSize+regrow {
		return true
	}
	key := root.Path() + "\x00" + rule + "\x00" + target
	if seen, _, _ := e.DB.Get(ctx, "regrow-noted", key); string(seen) != strconv.FormatInt(last.ID, 10) {
		rec := e.Record(rule)
		rec.Root, rec.Target, rec.Outcome = root.Path(), target, state.Skipped
		rec.BeforeSize, rec.AfterSize = size, size
		left, lim := policy.HumanApart(last.AfterSize, limit)
		rec.Reason = fmt.Sprintf("waiting: the last compaction (journal %d) left %s, over the limit of %s; the next runs once the file reaches %s (regrow %s)",
			last.ID, left, lim, policy.Human(last.AfterSize+regrow), policy.Human(regrow))
		if _, jerr := e.DB.Append(ctx, rec); jerr != nil {
			e.Log.Error("journal a wait", "err", jerr)
		}
		if perr := e.DB.Put(ctx, "regrow-noted", key, []byte(strconv.FormatInt(last.ID, 10))); perr != nil {
			e.Log.Error("remember a wait", "err", perr)
		}
		e.Log.Info("compaction waits for the file to grow", "root", root.Path(), "rule", rule, "path", target, "size", size, "next_at", last.AfterSize+regrow)
	}
	return false
}
