// Package undo undoes a journaled change (memwatch undo, the review page,
// the daemon's /v1/undo) and ends the hold an undo puts on the file's rule
// (redo): through the safe rewrite, each in the root's job slot when the
// daemon runs.
package undo

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"

	"github.com/memwatch/memwatch/jobs"
	"github.com/memwatch/memwatch/layout/apprecords"
	"github.com/memwatch/memwatch/rewrite"
	"github.com/memwatch/memwatch/state"
)

// Result is what an undo did (or would do): the body of POST
// /v1/undo/{id}.
type Result struct {
	ID      int64  `json:"id"`
	Target  string `json:"target"`
	Root    string `json:"root"`
	DryRun  bool   `json:"dry_run"`
	Changed bool   `json:"target_changed_since"`
	Bytes   int    `json:"restore_bytes"`
	Outcome string `json:"outcome,omitempty"`
	Archive string `json:"archived_current_to,omitempty"`
	Journal int64  `json:"journal,omitempty"`
	// Removed says the undone change had created the file: the undo
	// moved it into the archive.
	Removed bool `json:"removed,omitempty"`
	// Also are the other files of the same action (a compression's topic
	// file beside MEMORY.md), undone with it.
	Also []Part `json:"also,omitempty"`
}

// Part is one more file an undo restored or removed.
type Part struct {
	Record  int64  `json:"record"` // the undone change of this file
	Target  string `json:"target"`
	Outcome string `json:"outcome,omitempty"`
	Archive string `json:"archived_current_to,omitempty"`
	Journal int64  `json:"journal,omitempty"`
	Removed bool   `json:"removed,omitempty"`
}

// String is what memwatch undo prints: a line per file.
func (r Result) String() string {
	var b strings.Builder
	switch {
	case r.DryRun:
		fmt.Fprintf(&b, "would restore %s in %s (%d bytes)", r.Target, r.Root, r.Bytes)
		if r.Changed {
			b.WriteString("; the file changed since, so this needs --force")
		}
		b.WriteByte('\n')
		for _, a := range r.Also {
			fmt.Fprintf(&b, "and with it %s (#%d, part of the same change)\n", a.Target, a.Record)
		}
		return b.String()
	default:
		undone(&b, r.Target, r.Root, r.Journal, r.Archive, r.Removed)
		for _, a := range r.Also {
			undone(&b, a.Target, r.Root, a.Journal, a.Archive, a.Removed)
		}
	}
	return b.String()
}

// undone says what an undo did to one file.
func undone(b *strings.Builder, target, root string, journal int64, archive string, removed bool) {
	switch {
	case removed:
		fmt.Fprintf(b, "removed %s from %s, which the undone change had created (journal record %d); its content is in %s\n", target, root, journal, archive)
	default:
		fmt.Fprintf(b, "restored %s in %s (journal record %d)", target, root, journal)
		if archive != "" {
			fmt.Fprintf(b, "; the content it replaced is in %s", archive)
		}
		b.WriteByte('\n')
	}
}

// Do undoes a journal record. With an engine it runs in the root's job
// slot so it cannot race a job; without one (no daemon) it runs directly.
func Do(ctx context.Context, rw *rewrite.Rewriter, eng *jobs.Engine, id int64, force, dryRun bool) (Result, error) {
	if rec, err := rw.DB.GetRecord(ctx, id); err == nil && apprecords.IsRowRule(rec.Rule) {
		res := Result{ID: id, Target: rec.Target, Root: rec.Root, DryRun: dryRun}
		if rec.Outcome != state.Done {
			return res, fmt.Errorf("undo %d: only done actions can be undone; this one is %s", id, rec.Outcome)
		}
		if dryRun {
			return res, nil
		}
		do := func(ctx context.Context) error {
			res.Outcome = state.Done
			id, err := apprecords.Undo(ctx, rw.DB, rec, force, rw.OpenRoot)
			res.Journal = id
			return err
		}
		if eng == nil {
			return res, do(ctx)
		}
		return res, eng.Exclusive(ctx, rec.Store, rec.Root, "undo", do)
	}
	plan, err := rw.PlanUndo(ctx, id)
	if err != nil {
		return Result{}, err
	}
	res := Result{ID: id, Target: plan.Record.Target, Root: plan.Record.Root, DryRun: dryRun, Changed: plan.Changed, Bytes: len(plan.Restore), Removed: plan.Remove}
	if dryRun {
		for _, other := range rewrite.SameAction(ctx, rw.DB, plan.Record) {
			if r, err := rw.DB.GetRecord(ctx, other); err == nil {
				res.Also = append(res.Also, Part{Record: r.ID, Target: r.Target})
			}
		}
		return res, nil
	}
	do := func(ctx context.Context) error {
		out, err := rw.Undo(ctx, id, force)
		res.Outcome, res.Archive, res.Journal, res.Removed = out.Status, out.Archive, out.Record, out.Removed
		for _, a := range out.Also {
			part := Part{Target: a.Target, Outcome: a.Status, Archive: a.Archive, Journal: a.Record, Removed: a.Removed}
			if r, err := rw.DB.GetRecord(ctx, a.Record); err == nil {
				part.Record, _ = rewrite.UndoneBy(r.Key)
			}
			res.Also = append(res.Also, part)
		}
		return err
	}
	if eng == nil {
		return res, do(ctx)
	}
	return res, eng.Exclusive(ctx, plan.Record.Store, plan.Record.Root, "undo", do)
}

// ErrNoHold means a record's file is not held by an undo.
var ErrNoHold = errors.New("no undo holds its rule off the file")

// Redo ends the hold an undo of record id (or the undo, id) put on its
// file's rule, and the holds of the other changes of the same action (a
// compression's topic file beside MEMORY.md): the action may run again
// whole. It returns the holds it ended, the one of id's own file first.
func Redo(ctx context.Context, db *state.DB, id int64) ([]state.Hold, error) {
	rec, err := db.GetRecord(ctx, id)
	if err != nil {
		return nil, err
	}
	undone := rec
	if n, ok := rewrite.UndoneBy(rec.Key); ok && rec.Rule == "undo" {
		if undone, err = db.GetRecord(ctx, n); err != nil {
			return nil, err
		}
	}
	var ended []state.Hold
	for i, r := range append([]int64{undone.ID}, rewrite.SameAction(ctx, db, undone)...) {
		part := undone
		if i > 0 {
			if part, err = db.GetRecord(ctx, r); err != nil {
				continue
			}
		}
		h, ok, err := db.GetHold(ctx, part.Root, part.Target)
		if err != nil {
			return ended, err
		}
		if !ok || h.Record != part.ID {
			continue
		}
		if err := db.DropHold(ctx, part.Root, part.Target); err != nil {
			return ended, err
		}
		// Journaled: the undone content is no longer what the rule must
		// leave alone (layout.Env.Seen), and the log says who decided.
		redo := &state.Record{Store: part.Store, Root: part.Root, Target: part.Target, Rule: rewrite.RuleRedo, Outcome: state.Done,
			Key: fmt.Sprintf("redo:%d", h.Undo), Reason: fmt.Sprintf("redo: rule %s applies again (the undo #%d of #%d no longer holds it)", h.Rule, h.Undo, h.Record)}
		if _, err := db.Append(ctx, redo); err != nil {
			return ended, err
		}
		ended = append(ended, h)
	}
	if len(ended) == 0 {
		return nil, fmt.Errorf("%s: %w (memwatch status lists the holds)", filepath.Join(rec.Root, rec.Target), ErrNoHold)
	}
	return ended, nil
}
