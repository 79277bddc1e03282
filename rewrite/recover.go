package rewrite

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strings"

	"github.com/memwatch/memwatch/state"
)

// Recover resolves journal records left pending by a memwatch that was
// killed between archiving and swapping. It compares each target with the
// record's before and after hashes, so the journal agrees with the files.
func (w *Rewriter) Recover(ctx context.Context) (int, error) {
	pend, err := w.DB.Journal(ctx, state.Filter{Outcome: state.Pending})
	if err != nil {
		return 0, err
	}
	for i := range pend {
		r := &pend[i]
		if resolve, ok := w.Resolvers[r.Rule]; ok {
			r.Outcome, r.Reason = resolve(ctx, r)
			if err := w.DB.Update(ctx, r); err != nil {
				return i, err
			}
			w.Log.Info("resolved interrupted change", "journal", r.ID, "root", r.Root, "target", r.Target, "outcome", r.Outcome, "reason", r.Reason)
			continue
		}
		path, err := Resolve(r.Root, r.Target)
		var data []byte
		if err == nil {
			data, err = os.ReadFile(path)
		}
		sha := ""
		if err == nil {
			sha = Hash(data)
		} else if errors.Is(err, fs.ErrNotExist) {
			sha = RemovedSHA // matches the after-hash of a removal that happened
		}
		switch sha {
		case r.AfterSHA:
			r.Outcome, r.Reason = state.Done, "completed before memwatch stopped; confirmed at restart"
		case r.BeforeSHA:
			r.Outcome, r.Reason = state.Failed, "interrupted before the swap; target unchanged"
		default:
			// Appends carried during the swap make the target longer than
			// the recorded result but still start with it.
			if r.AfterSize > 0 && int64(len(data)) > r.AfterSize && Hash(data[:r.AfterSize]) == r.AfterSHA {
				r.Outcome, r.Reason = state.Done, "completed before memwatch stopped; agent appended since"
			} else {
				r.Outcome, r.Reason = state.Failed, "interrupted; target changed since (pre-image kept in archive)"
			}
		}
		if err := w.DB.Update(ctx, r); err != nil {
			return i, err
		}
		w.Log.Info("resolved interrupted rewrite", "journal", r.ID, "root", r.Root, "path", r.Target, "outcome", r.Outcome, "reason", r.Reason)
	}
	return len(pend), nil
}

// ErrTargetChanged is returned by Undo when the agent changed the target
// after the action being undone; --force overrides it.
var ErrTargetChanged = errors.New("target changed since this action")

// UndoPlan describes what an undo would do.
type UndoPlan struct {
	Record  state.Record
	Restore []byte // content the target would get
	Current string // sha of the current content
	Changed bool   // the agent changed the target since the action
}

// PlanUndo works out how to undo journal record id without writing anything.
func (w *Rewriter) PlanUndo(ctx context.Context, id int64) (*UndoPlan, error) {
	rec, err := w.DB.GetRecord(ctx, id)
	if err != nil {
		return nil, err
	}
	if rec.Outcome != state.Done {
		return nil, fmt.Errorf("undo %d: only done actions can be undone; this one is %s", id, rec.Outcome)
	}
	if rec.BeforeSHA == "" {
		return nil, fmt.Errorf("undo %d: rule %s changed no file content; nothing to restore", id, rec.Rule)
	}
	path, err := Resolve(rec.Root, rec.Target)
	if err != nil {
		return nil, fmt.Errorf("undo %d: %w", id, err)
	}
	cur, err := os.ReadFile(path)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("undo %d: read target: %w", id, err)
	}
	current := Hash(cur)
	if errors.Is(err, fs.ErrNotExist) {
		current = RemovedSHA
	}
	plan := &UndoPlan{Record: rec, Current: current, Changed: current != rec.AfterSHA}
	switch {
	case rec.Archive != "":
		ap, err := Resolve(rec.Root, rec.Archive)
		if err != nil {
			return nil, fmt.Errorf("undo %d: %w", id, err)
		}
		plan.Restore, err = os.ReadFile(ap)
		if err != nil {
			return nil, fmt.Errorf("undo %d: read archive %s: %w", id, rec.Archive, err)
		}
		if Hash(plan.Restore) != rec.BeforeSHA {
			return nil, fmt.Errorf("undo %d: archive %s no longer matches the recorded pre-image", id, rec.Archive)
		}
	case len(rec.Data) > 0 && strings.HasPrefix(string(rec.Data), `{"insert_at":`):
		// An insertion: take the inserted bytes out again.
		var ins struct {
			At int64 `json:"insert_at"`
		}
		if err := json.Unmarshal(rec.Data, &ins); err != nil {
			return nil, fmt.Errorf("undo %d: %w", id, err)
		}
		n := rec.AfterSize - rec.BeforeSize
		if ins.At < 0 || ins.At+n > int64(len(cur)) {
			return nil, fmt.Errorf("undo %d: the inserted text is no longer where it was", id)
		}
		restore := append(bytes.Clone(cur[:ins.At]), cur[ins.At+n:]...)
		if plan.Changed || Hash(restore) != rec.BeforeSHA {
			return nil, fmt.Errorf("undo %d: %w since the insertion; there is no archive to restore from", id, ErrTargetChanged)
		}
		plan.Restore = restore
	case int64(len(cur)) >= rec.BeforeSize && Hash(cur[:rec.BeforeSize]) == rec.BeforeSHA:
		// An append-only change: the pre-image is the start of the file.
		plan.Restore = bytes.Clone(cur[:rec.BeforeSize])
	default:
		return nil, fmt.Errorf("undo %d: no archive, and the target no longer starts with the pre-image", id)
	}
	return plan, nil
}

// Undo restores the target of journal record id to its pre-image. It refuses
// when the target changed since, unless force; either way the current content
// is archived before it is replaced.
func (w *Rewriter) Undo(ctx context.Context, id int64, force bool) (Outcome, error) {
	plan, err := w.PlanUndo(ctx, id)
	if err != nil {
		return Outcome{}, err
	}
	if plan.Changed && !force {
		return Outcome{}, fmt.Errorf("undo %d: %w (now sha256 %.12s, after the action %.12s); use --force to archive the current content and restore anyway", id, ErrTargetChanged, plan.Current, plan.Record.AfterSHA)
	}
	rec := &state.Record{Store: plan.Record.Store, Rule: "undo", Reason: fmt.Sprintf("undo of #%d", id)}
	out, err := w.Apply(ctx, Request{
		Root:        plan.Record.Root,
		Target:      plan.Record.Target,
		AllowCreate: true,
		Compute: func(_ context.Context, old []byte) ([]byte, error) {
			if cur := Hash(old); cur != plan.Current && !(old == nil && plan.Current == RemovedSHA) && !force {
				return nil, ErrConflict
			}
			return plan.Restore, nil
		},
	}, rec)
	return out, err
}
