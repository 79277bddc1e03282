package rewrite

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"strconv"
	"strings"

	"github.com/memwatch/memwatch/confine"
	"github.com/memwatch/memwatch/state"
)

// OpenRoot opens the root a journal record names, refusing one that has
// since become a symlink.
func OpenRoot(path string) (*confine.Root, error) {
	return confine.Open(path, confine.Options{})
}

// ErrRootReplaced means a record's root path now names another directory
// than the one the change was made in: undo and recovery leave it alone.
var ErrRootReplaced = errors.New("the root is not the directory this change was made in")

// rootID is a root's identity as the journal records it.
func rootID(r *confine.Root) (dev, ino int64) {
	id := r.ID()
	return int64(id.Dev), int64(id.Ino)
}

// recordRoot opens the root of a journal record: through OpenRoot (the
// policy's checks), and only if it is the directory the record was made
// in (when the record says which).
func (w *Rewriter) recordRoot(rec *state.Record) (*confine.Root, error) {
	open := w.OpenRoot
	if open == nil {
		open = OpenRoot
	}
	root, err := open(rec.Root)
	if err != nil {
		return nil, err
	}
	if rec.RootIno != 0 {
		if dev, ino := rootID(root); dev != rec.RootDev || ino != rec.RootIno {
			root.Close()
			return nil, fmt.Errorf("%s: %w (it was moved or replaced since journal record %d)", rec.Root, ErrRootReplaced, rec.ID)
		}
	}
	return root, nil
}

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
		data, sha := w.currentContent(r)
		switch {
		case sha == r.AfterSHA:
			r.Outcome, r.Reason = state.Done, "completed before memwatch stopped; confirmed at restart"
		case r.AfterSHA == RemovedSHA && sha != RemovedSHA:
			r.Outcome, r.Reason = state.Failed, "interrupted before the file was moved into the archive; it is still in place"
		case sha == r.BeforeSHA:
			r.Outcome, r.Reason = state.Failed, "interrupted before the swap; target unchanged"
		case r.AfterSize > 0 && int64(len(data)) > r.AfterSize && Hash(data[:r.AfterSize]) == r.AfterSHA:
			// Appends carried during the swap make the target longer than
			// the recorded result but still start with it.
			r.Outcome, r.Reason = state.Done, "completed before memwatch stopped; agent appended since"
		default:
			r.Outcome, r.Reason = state.Failed, "interrupted; target changed since (pre-image kept in archive)"
		}
		if r.Outcome == state.Done {
			w.carriedBefore(r)
		}
		if err := w.DB.Update(ctx, r); err != nil {
			return i, err
		}
		w.Log.Info("resolved interrupted rewrite", "journal", r.ID, "root", r.Root, "path", r.Target, "outcome", r.Outcome, "reason", r.Reason)
	}
	return len(pend), nil
}

// carriedBefore makes a record's pre-image the archive's content when the
// archive extends it: appends carried in the last check before the swap
// went into the archive as well as the result.
func (w *Rewriter) carriedBefore(r *state.Record) {
	if r.Archive == "" {
		return
	}
	root, err := w.recordRoot(r)
	if err != nil {
		return
	}
	defer root.Close()
	arch, err := root.ReadFile(r.Archive)
	if err != nil || Hash(arch) == r.BeforeSHA || int64(len(arch)) < r.BeforeSize || Hash(arch[:r.BeforeSize]) != r.BeforeSHA {
		return
	}
	r.BeforeSHA, r.BeforeSize = Hash(arch), int64(len(arch))
}

// currentContent reads a record's target; its hash is RemovedSHA when the
// file is missing and "" when it cannot be read (or its root is not the
// record's any more).
func (w *Rewriter) currentContent(rec *state.Record) ([]byte, string) {
	root, err := w.recordRoot(rec)
	if err != nil {
		return nil, ""
	}
	defer root.Close()
	data, err := root.ReadFile(rec.Target)
	switch {
	case err == nil:
		return data, Hash(data)
	case errors.Is(err, fs.ErrNotExist):
		return nil, RemovedSHA
	}
	return nil, ""
}

// ErrTargetChanged is returned by Undo when the agent changed the target
// after the action being undone; --force overrides it.
var ErrTargetChanged = errors.New("target changed since this action")

// ErrPruned is returned by Undo when the archive that held the pre-image was
// removed by retention.
var ErrPruned = errors.New("the archive holding the pre-image was pruned by retention")

// ErrScrubbed means the record is a scrub of credentials (Request.Scrub):
// by design no copy of what it replaced was kept.
var ErrScrubbed = errors.New("a scrub of credentials keeps no copy of the values it masked (scrub_secrets), so it cannot be undone")

// UndoPlan describes what an undo would do.
type UndoPlan struct {
	Record  state.Record
	Restore []byte // content the target would get
	Current string // sha of the current content
	Changed bool   // the agent changed the target since the action
	// Remove says the action created the target: undo moves it into the
	// archive directory (Restore is empty).
	Remove bool
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
	root, err := w.recordRoot(&rec)
	if err != nil {
		return nil, fmt.Errorf("undo %d: %w", id, err)
	}
	defer root.Close()
	cur, err := root.ReadFile(rec.Target)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("undo %d: read target: %w", id, err)
	}
	current := Hash(cur)
	if errors.Is(err, fs.ErrNotExist) {
		current = RemovedSHA
	}
	if u, ok, err := w.DB.ByKey(ctx, rec.Root, rec.Target, UndoKey(id)); err == nil && ok {
		return nil, fmt.Errorf("undo %d: %w by #%d (%s)", id, ErrAlreadyUndone, u.ID, u.Time.Local().Format("2006-01-02 15:04:05"))
	}
	plan := &UndoPlan{Record: rec, Current: current, Changed: current != rec.AfterSHA}
	switch {
	case rec.Archive != "":
		plan.Restore, err = root.ReadFile(rec.Archive)
		if errors.Is(err, fs.ErrNotExist) {
			if gz := w.compressedAs(ctx, rec); gz != "" {
				rec.Archive = gz // compressed by retention; unpacked below
				plan.Restore, err = root.ReadFile(gz)
			}
		}
		if errors.Is(err, fs.ErrNotExist) {
			if pruned, _ := w.pruned(ctx, rec); pruned != "" {
				return nil, fmt.Errorf("undo %d: %w (%s)", id, ErrPruned, pruned)
			}
		}
		if err != nil {
			return nil, fmt.Errorf("undo %d: read archive %s: %w", id, rec.Archive, err)
		}
		if Hash(plan.Restore) != rec.BeforeSHA {
			if restored, ok := Unpack(plan.Restore); ok && Hash(restored) == rec.BeforeSHA {
				plan.Restore = restored
				break
			}
			return nil, fmt.Errorf("undo %d: archive %s no longer matches the recorded pre-image", id, rec.Archive)
		}
	case string(rec.Data) == scrubbedData:
		return nil, fmt.Errorf("undo %d: %w", id, ErrScrubbed)
	case string(rec.Data) == createdData:
		plan.Remove = true
		if current == RemovedSHA {
			return nil, fmt.Errorf("undo %d: %s is already gone", id, rec.Target)
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

// Unpack returns the original bytes of a gzip-compressed archive (rotate
// compresses old archives); ok is false for bytes that are not gzip.
func Unpack(b []byte) ([]byte, bool) {
	if len(b) < 2 || b[0] != 0x1f || b[1] != 0x8b {
		return nil, false
	}
	zr, err := gzip.NewReader(bytes.NewReader(b))
	if err != nil {
		return nil, false
	}
	out, err := io.ReadAll(io.LimitReader(zr, 1<<31))
	if err != nil {
		return nil, false
	}
	return out, true
}

// compressedAs finds where retention moved an archive by compressing it.
func (w *Rewriter) compressedAs(ctx context.Context, rec state.Record) string {
	recs, err := w.DB.Journal(ctx, state.Filter{Root: rec.Root, Target: rec.Archive, Rule: "archive-compress", Outcome: state.Done, Limit: 1})
	if err != nil || len(recs) == 0 {
		return ""
	}
	return recs[0].Archive
}

// pruned finds the journal record of the retention that removed rec's archive.
func (w *Rewriter) pruned(ctx context.Context, rec state.Record) (string, error) {
	recs, err := w.DB.Journal(ctx, state.Filter{Root: rec.Root, Target: rec.Archive, Rule: "archive-prune", Limit: 1})
	if err != nil || len(recs) == 0 {
		return "", err
	}
	return fmt.Sprintf("journal record %d, %s", recs[0].ID, recs[0].Reason), nil
}

// ErrAlreadyUndone means a change was undone before.
var ErrAlreadyUndone = errors.New("already undone")

// RuleRedo names the journal records of memwatch redo: a person let the
// rule of an undone change apply again (its hold ended; no file changed).
const RuleRedo = "redo"

// UndoKey is the journal key of the undo of record id.
func UndoKey(id int64) string { return fmt.Sprintf("undo:%d", id) }

// UndoneBy returns the record an undo's journal key (UndoKey) names.
func UndoneBy(key string) (int64, bool) {
	n, ok := strings.CutPrefix(key, "undo:")
	if !ok {
		return 0, false
	}
	id, err := strconv.ParseInt(n, 10, 64)
	return id, err == nil
}

// WithKey is the journal key that ties a change to the others it is one
// action with (a compression's facts moved out of MEMORY.md, and MEMORY.md
// itself): undoing one undoes them all.
func WithKey(ids ...int64) string {
	var parts []string
	for _, id := range ids {
		parts = append(parts, strconv.FormatInt(id, 10))
	}
	return "with:" + strings.Join(parts, ",")
}

// Undo restores the target of journal record id to its pre-image, and the
// other changes of the same action (WithKey) with it. It refuses when the
// target changed since, unless force; either way the current content is
// archived before it is replaced. The rule that made the change is held
// off the file (state.Hold) until it grows past its threshold again.
func (w *Rewriter) Undo(ctx context.Context, id int64, force bool) (Outcome, error) {
	return w.undoAll(ctx, id, force, map[int64]bool{})
}

func (w *Rewriter) undoAll(ctx context.Context, id int64, force bool, seen map[int64]bool) (Outcome, error) {
	seen[id] = true
	out, err := w.undoOne(ctx, id, force)
	if err != nil {
		return out, err
	}
	rec, err := w.DB.GetRecord(ctx, id)
	if err != nil {
		return out, nil
	}
	for _, other := range SameAction(ctx, w.DB, rec) {
		if seen[other] {
			continue
		}
		o, err := w.undoAll(ctx, other, force, seen)
		if err != nil && !errors.Is(err, ErrAlreadyUndone) {
			return out, fmt.Errorf("undo %d: done, but #%d, part of the same change, was not: %w", id, other, err)
		}
		if err == nil {
			// Flat: every file of the action is said once, in order.
			also := o.Also
			o.Also = nil
			out.Also = append(append(out.Also, o), also...)
		}
	}
	return out, nil
}

// SameAction lists the records that are one action with rec (a
// compression's MEMORY.md and the topic file its facts moved to): undo and
// redo take them together.
func SameAction(ctx context.Context, db *state.DB, rec state.Record) []int64 {
	var out []int64
	if ids, ok := strings.CutPrefix(rec.Key, "with:"); ok {
		for _, s := range strings.Split(ids, ",") {
			if n, err := strconv.ParseInt(s, 10, 64); err == nil {
				out = append(out, n)
			}
		}
	}
	if recs, err := db.WithKey(ctx, rec.Root, WithKey(rec.ID)); err == nil {
		for _, r := range recs {
			out = append(out, r.ID)
		}
	}
	return out
}

// undoOne undoes record id alone.
func (w *Rewriter) undoOne(ctx context.Context, id int64, force bool) (Outcome, error) {
	plan, err := w.PlanUndo(ctx, id)
	if err != nil {
		return Outcome{}, err
	}
	if plan.Changed && !force {
		return Outcome{}, fmt.Errorf("undo %d: %w (now sha256 %.12s, after the action %.12s); use --force to archive the current content and restore anyway", id, ErrTargetChanged, plan.Current, plan.Record.AfterSHA)
	}
	root, err := w.recordRoot(&plan.Record)
	if err != nil {
		return Outcome{}, fmt.Errorf("undo %d: %w", id, err)
	}
	defer root.Close()
	rec := &state.Record{Store: plan.Record.Store, Rule: "undo", Reason: fmt.Sprintf("undo of #%d", id), Key: UndoKey(id)}
	defer func() {
		if rec.Outcome == state.Done {
			w.hold(ctx, plan, rec.ID)
		}
	}()
	if plan.Remove {
		// The action created the file: it goes into the archive, as the
		// current content of any undone file does.
		if err := w.Remove(ctx, root, plan.Record.Target, "", rec); err != nil {
			return Outcome{}, err
		}
		return Outcome{Status: state.Done, Archive: rec.Archive, Record: rec.ID, Target: plan.Record.Target, Removed: true}, nil
	}
	var from []string
	if plan.Record.Archive != "" {
		from = []string{plan.Record.Archive} // the archive kept the file's mode
	}
	out, err := w.Apply(ctx, Request{
		Root:        root,
		Target:      plan.Record.Target,
		AllowCreate: true,
		From:        from,
		Compute: func(_ context.Context, old []byte) ([]byte, error) {
			if cur := Hash(old); cur != plan.Current && !(old == nil && plan.Current == RemovedSHA) && !force {
				return nil, ErrConflict
			}
			return plan.Restore, nil
		},
	}, rec)
	out.Target = plan.Record.Target
	return out, err
}

// hold records that the rule of an undone change is held off its file.
func (w *Rewriter) hold(ctx context.Context, plan *UndoPlan, undo int64) {
	if plan.Record.Rule == "undo" || plan.Record.Rule == RuleRestore {
		return
	}
	lines := bytes.Count(plan.Restore, []byte{'\n'})
	if len(plan.Restore) > 0 && plan.Restore[len(plan.Restore)-1] != '\n' {
		lines++
	}
	h := state.Hold{Root: plan.Record.Root, Target: plan.Record.Target, Rule: plan.Record.Rule, Record: plan.Record.ID, Undo: undo,
		Size: int64(len(plan.Restore)), Lines: lines, Time: w.Now()}
	if err := w.DB.PutHold(ctx, h); err != nil {
		w.Log.Warn("record that an undone change stays undone", "root", h.Root, "path", h.Target, "err", err)
	}
}
