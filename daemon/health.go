package daemon

import (
	"context"
	"fmt"
	"sort"
	"sync"
	"time"

	"github.com/memwatch/memwatch/background"
	"github.com/memwatch/memwatch/control"
	"github.com/memwatch/memwatch/jobs"
	"github.com/memwatch/memwatch/state"
)

// When memwatch cannot write its own state (the state directory's disk is
// full, read-only or failing), the agents' files are untouched but what
// memwatch would have recorded is not: captured lines, versions, journal
// records, index blocks. memwatch says so at once (one ERROR naming the
// directory and what was not recorded, a problem in memwatch status,
// memwatch_state_degraded 1), remembers which roots it could not record
// for, and probes the directory every probeEvery. Once it can write again
// it says so and catches up on its own: every root it missed is evaluated
// (the rules capture every log from where the spool stopped: the agents'
// files are still there) and indexed (every memory file gets the version
// it has now), without a trigger or a restart.

// probeEvery is how often a degraded state directory is probed.
const probeEvery = 2 * time.Second

// health is the state directory's: ok, or degraded since a failed write.
// Safe for concurrent use; the serve loop probes.
type health struct {
	mu    sync.Mutex
	since time.Time // zero: writable
	err   string
	// missed lists what was not recorded (a few, for the message), and
	// roots the store roots to catch up.
	missed []string
	roots  map[rootKey]bool
	// wake starts the probe (buffered: the serve loop takes it).
	wake chan struct{}
}

type rootKey struct{ store, root string }

// maxMissed bounds what status names of what was not recorded.
const maxMissed = 10

// maxDegradedRoots bounds the roots remembered; past it every root of the
// policy is caught up.
const maxDegradedRoots = 100_000

// StateProblem is the state directory's trouble in memwatch status.
type StateProblem = control.StateProblem

// stateFailed notes a failed write of memwatch's state: what (for the
// message) in root of store ("" when no root). It returns whether err
// was such a failure (others are the caller's to report).
func (d *Daemon) stateFailed(store, root, what string, err error) bool {
	if !state.WriteFailed(err) {
		return false
	}
	h := &d.health
	d.metrics.StateErrors.WithLabelValues(what).Inc()
	h.mu.Lock()
	first := h.since.IsZero()
	if first {
		h.since, h.err = time.Now(), err.Error()
		h.missed, h.roots = nil, map[rootKey]bool{}
	}
	if len(h.missed) < maxMissed {
		h.missed = append(h.missed, what)
	}
	if root != "" && len(h.roots) < maxDegradedRoots {
		h.roots[rootKey{store, root}] = true
	}
	h.mu.Unlock()
	if first {
		d.metrics.Degraded.Set(1)
		d.log.Error("memwatch cannot write its state directory; the agents' files are untouched, and it catches up on its own once it can write again",
			"dir", d.cfg.StateDir, "err", err, "not_recorded", what, "probe_every", probeEvery)
		d.warnings.Set("", "state", fmt.Sprintf("memwatch cannot write its state directory %s (%v) since %s: what agents write is not captured, versioned or journaled until it can; it retries every %v",
			d.cfg.StateDir, err, time.Now().Format(time.DateTime), probeEvery))
		select {
		case h.wake <- struct{}{}:
		default:
		}
	}
	return true
}

// stateProblem is the degraded state for status (nil: writable).
func (d *Daemon) stateProblem() *StateProblem {
	h := &d.health
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.since.IsZero() {
		return nil
	}
	return &StateProblem{Dir: d.cfg.StateDir, Since: h.since, Error: h.err, Missed: append([]string{}, h.missed...), Roots: len(h.roots)}
}

// probeState runs on the serve loop while degraded: when the directory
// can be written again, it ends the episode and catches up. It reports
// whether the state is still degraded.
func (d *Daemon) probeState(ctx context.Context) bool {
	h := &d.health
	h.mu.Lock()
	degraded := !h.since.IsZero()
	h.mu.Unlock()
	if !degraded {
		return false
	}
	if err := state.ProbeDir(d.cfg.StateDir); err != nil {
		return true
	}
	h.mu.Lock()
	roots, since := h.roots, h.since
	full := len(roots) >= maxDegradedRoots
	h.since, h.err, h.missed, h.roots = time.Time{}, "", nil, nil
	h.mu.Unlock()
	d.metrics.Degraded.Set(0)
	d.warnings.Clear("", "state")
	if full {
		roots = map[rootKey]bool{}
		all, _ := d.watch.Roots(ctx)
		for store, rs := range all {
			for _, r := range rs {
				roots[rootKey{store, r}] = true
			}
		}
	}
	keys := make([]rootKey, 0, len(roots))
	for k := range roots {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool { return keys[i].root < keys[j].root })
	d.log.Info("memwatch can write its state directory again; catching up what it could not record", "dir", d.cfg.StateDir,
		"degraded_for", time.Since(since).Round(time.Second).String(), "roots", len(keys))
	for _, k := range keys {
		// Every log captured from where the spool stopped, every memory
		// file's version as it is now, the index brought up to date.
		d.bg.Queue(background.Task{Kind: background.IndexRoot, Store: k.store, Root: k.root})
		d.engine.Submit(jobs.Job{Store: k.store, Root: k.root, Rule: ruleEvaluate, Reason: jobs.ReasonStateWritable})
	}
	return false
}
