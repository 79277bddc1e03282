package rewrite

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/memwatch/memwatch/confine"
	"github.com/memwatch/memwatch/state"
)

// RuleRestore journals lines an agent wrote that a conflict had left out
// of its live file, put back into it.
const RuleRestore = "restore"

// riskNS is the state database namespace of the lines at risk, so a
// restart still puts them back.
const riskNS = "at-risk"

// Lifetimes of lines at risk. An agent that read memwatch's result in the
// instant it was in place writes its next version from it after its own
// turn, which can take minutes; lines that are in no live file at all
// wait for the file to be writable again.
const (
	riskDeferred = 30 * time.Minute
	riskAlways   = 24 * time.Hour
	// maxRisks bounds the entries kept per file; the oldest go first (each
	// is also in a kept copy or in the live file when it is recorded). It
	// was 16: a stress run with ~40 conflicts per 3000 writes can have more
	// outstanding than that, and an entry evicted before its restore loses
	// its lines; a few hundred bound the state as well.
	maxRisks = 256
)

// risk is lines an agent wrote that may be missing from its live file
// after a conflict (see the package doc, "Genuine conflicts").
type risk struct {
	Record int64   `json:"record"` // journal record of the rewrite that met the conflict
	Blocks []Block `json:"blocks"`
	// Always: the lines are in no live file now; put them back whatever
	// the file looks like. Otherwise they are in the live file, and only a
	// version written from memwatch's result (which lacked them) loses them.
	Always  bool      `json:"always,omitempty"`
	Dropped []string  `json:"dropped,omitempty"` // lines memwatch's result dropped
	Novel   []string  `json:"novel,omitempty"`   // lines only memwatch's result had
	Until   time.Time `json:"until"`
	Kept    string    `json:"kept,omitempty"` // the backup copy, for the journal
	// Restored is the hash of the file once memwatch had put the lines
	// back (or of a later rewrite of memwatch's that kept them), Restores
	// how many times they were put back. A put-back is a rewrite like any
	// other: a read-modify-write agent that read the file before it writes
	// its next version without them, so the entry stays until a version
	// written after the put-back keeps them (see the package doc).
	Restored string `json:"restored,omitempty"`
	Restores int    `json:"restores,omitempty"`
}

// maxRestores bounds the put-backs of one entry: lines that an agent's
// versions keep lacking after that many are its own deletion.
const maxRestores = 8

// fromResult reports whether live was written from memwatch's result
// rather than from the agent's version: it has a line only the result had,
// or lacks every line the result dropped.
func (r risk) fromResult(live []byte) bool {
	for _, l := range r.Novel {
		if hasLine(live, l) {
			return true
		}
	}
	if len(r.Dropped) == 0 {
		return len(r.Novel) == 0 // nothing tells them apart: keep the lines
	}
	for _, l := range r.Dropped {
		if hasLine(live, l) {
			return false
		}
	}
	return true
}

// risks holds the lines at risk per file. Safe for concurrent use.
type risks struct {
	mu     sync.Mutex
	loaded bool
	m      map[string][]risk // riskKey -> entries, oldest first
}

func riskKey(root, target string) string { return root + "\x00" + target }

// load reads the entries a previous run left, once.
func (w *Rewriter) loadRisks(ctx context.Context) {
	if w.risk.loaded {
		return
	}
	w.risk.loaded = true
	w.risk.m = map[string][]risk{}
	if w.DB == nil {
		return
	}
	all, err := w.DB.Scan(ctx, riskNS)
	if err != nil {
		w.Log.Warn("read the lines at risk from the state database", "err", err)
		return
	}
	for k, v := range all {
		var rs []risk
		if err := json.Unmarshal(v, &rs); err != nil {
			w.Log.Warn("unreadable lines-at-risk entry in the state database; ignored", "key", k, "err", err)
			continue
		}
		w.risk.m[k] = rs
	}
}

// saveRisks stores one file's entries; the caller holds risk.mu.
func (w *Rewriter) saveRisks(ctx context.Context, key string) {
	if w.DB == nil {
		return
	}
	var v []byte
	if rs := w.risk.m[key]; len(rs) > 0 {
		v, _ = json.Marshal(rs)
	}
	if err := w.DB.Put(context.WithoutCancel(ctx), riskNS, key, v); err != nil {
		w.Log.Error("store the lines at risk in the state database", "err", err)
	}
}

// addRisk records lines at risk for a file.
func (w *Rewriter) addRisk(ctx context.Context, root, target string, r risk) {
	if len(r.Blocks) == 0 {
		return
	}
	w.risk.mu.Lock()
	defer w.risk.mu.Unlock()
	w.loadRisks(ctx)
	key := riskKey(root, target)
	rs := append(w.risk.m[key], r)
	if len(rs) > maxRisks {
		rs = rs[len(rs)-maxRisks:]
	}
	w.risk.m[key] = rs
	w.saveRisks(ctx, key)
}

// RiskTargets lists the files of root with lines at risk: the daemon runs
// Restore for each when the root changes.
func (w *Rewriter) RiskTargets(ctx context.Context, root string) []string {
	w.risk.mu.Lock()
	defer w.risk.mu.Unlock()
	w.loadRisks(ctx)
	var out []string
	for k, rs := range w.risk.m {
		r, t, _ := strings.Cut(k, "\x00")
		if r == root && len(rs) > 0 {
			out = append(out, t)
		}
	}
	return out
}

// mergeRisks applies a file's entries to live: the missing blocks of each
// entry that applies are inserted. It returns the merged content (live
// itself when nothing is missing) and the entries used (forgotten once the
// restore is written, see forgetUsed), and forgets expired entries and
// those satisfied: all their lines in a version they apply to.
func (w *Rewriter) mergeRisks(ctx context.Context, key string, live []byte) ([]byte, []risk) {
	w.risk.mu.Lock()
	defer w.risk.mu.Unlock()
	w.loadRisks(ctx)
	rs := w.risk.m[key]
	if len(rs) == 0 {
		return live, nil
	}
	now := w.Now()
	var keep, used []risk
	out := live
	liveSHA := Hash(live)
	for _, r := range rs {
		if now.After(r.Until) {
			w.Log.Info("lines at risk expired", "key", strings.ReplaceAll(key, "\x00", " "), "record", r.Record, "kept", r.Kept)
			continue
		}
		missing := Missing(out, r.Blocks)
		if r.Restored != "" {
			switch {
			case liveSHA == r.Restored:
				// Nobody wrote since the put-back: an agent that read the
				// file before it may still write.
				keep = append(keep, r)
			case len(missing) == 0:
				// A version written after the put-back keeps the lines.
			case len(missing) < len(r.Blocks) || r.Restores >= maxRestores:
				// Some are kept, or they were put back often enough: the
				// agent's own edit.
				w.Log.Info("lines put back are gone again; left to the agent's edit", "key", strings.ReplaceAll(key, "\x00", " "), "record", r.Record, "restores", r.Restores)
			default:
				// Every line put back is gone: a version written from the
				// file as it was before the put-back.
				out = Insert(out, missing)
				used = append(used, r)
				keep = append(keep, r)
			}
			continue
		}
		applies := r.Always || r.fromResult(out)
		switch {
		case len(missing) == 0 && applies:
			// Satisfied: the lines are in a file written from the result
			// (or were never at risk of it). Forgotten.
			continue
		case len(missing) > 0 && applies:
			out = Insert(out, missing)
			used = append(used, r) // forgotten once the restore is written
		}
		if applies && !r.Always {
			// A version written from memwatch's result: its change took
			// effect after all, and its journal record says so.
			w.tookEffect(ctx, r.Record)
		}
		// Otherwise the lines are in the agent's version: the agent that
		// read the result may not have written yet.
		keep = append(keep, r)
	}
	if len(keep) != len(rs) {
		w.risk.m[key] = keep
		w.saveRisks(ctx, key)
	}
	return out, used
}

// rewritten updates a file's entries after memwatch rewrote it from pre
// to final: the entries a restore used (put back into pre) are now
// restored as final; restored entries whose lines final keeps are
// restored as final too (an agent that read the file before may still
// write), and those whose lines were in pre and not in final are
// forgotten: memwatch's own rewrite took them out, and its archive has them.
// atRisk reports whether a file has lines at risk (see Restore).
func (w *Rewriter) atRisk(ctx context.Context, key string) bool {
	w.risk.mu.Lock()
	defer w.risk.mu.Unlock()
	w.loadRisks(ctx)
	return len(w.risk.m[key]) > 0
}

func (w *Rewriter) rewritten(ctx context.Context, key string, pre, final []byte, used []risk) {
	w.risk.mu.Lock()
	defer w.risk.mu.Unlock()
	w.loadRisks(ctx)
	rs := w.risk.m[key]
	if len(rs) == 0 {
		return
	}
	sha := Hash(final)
	var keep []risk
	changed := false
	for _, r := range rs {
		isUsed := false
		for _, u := range used {
			isUsed = isUsed || (u.Record == r.Record && u.Until.Equal(r.Until))
		}
		switch {
		case isUsed:
			// What was inserted is what a stale version lacks.
			if ins := Missing(pre, r.Blocks); len(ins) > 0 {
				r.Blocks = ins
			}
			r.Restored, r.Restores, r.Always = sha, r.Restores+1, true
			changed = true
		case r.Restored == "":
		case len(Missing(final, r.Blocks)) == 0:
			changed = changed || r.Restored != sha
			r.Restored = sha
		case len(Missing(pre, r.Blocks)) == 0:
			changed = true
			continue
		}
		keep = append(keep, r)
	}
	if changed {
		w.risk.m[key] = keep
		w.saveRisks(ctx, key)
	}
}

// Restore puts back into target the lines an agent wrote that a conflict
// left out of it (see the package doc): an insertion through the safe
// rewrite, journaled under RuleRestore. Nothing to put back is Skipped.
func (w *Rewriter) Restore(ctx context.Context, root *confine.Root, target, store string) (Outcome, error) {
	rel, err := root.Rel(target)
	if err != nil {
		return Outcome{}, err
	}
	key := riskKey(root.Path(), rel)
	var used []risk
	rec := &state.Record{Store: store, Rule: RuleRestore}
	out, err := w.Apply(ctx, Request{Root: root, Target: rel, restoring: true, used: &used, Compute: func(_ context.Context, old []byte) ([]byte, error) {
		merged, u := w.mergeRisks(ctx, key, old)
		used = nil // an earlier attempt's, which met a conflict
		if len(u) == 0 {
			return nil, ErrUnchanged
		}
		used = u
		var ids, kept []string
		lines := 0
		for _, r := range u {
			ids = append(ids, fmt.Sprintf("#%d", r.Record))
			if r.Kept != "" {
				kept = append(kept, r.Kept)
			}
			for _, b := range Missing(old, r.Blocks) {
				lines += len(b.Lines)
			}
		}
		rec.Reason = fmt.Sprintf("put back %d lines an agent wrote that a conflict during rewrite %s had left out of the file", lines, strings.Join(ids, ", "))
		if len(kept) > 0 {
			rec.Reason += " (backup: " + strings.Join(kept, ", ") + ")"
		}
		return merged, nil
	}}, rec)
	if err != nil {
		return out, err
	}
	if out.Status == state.Done {
		w.Log.Warn("put back lines an agent wrote that a conflict had left out of its file", "root", root.Path(), "path", rel, "journal", out.Record, "reason", rec.Reason)
	}
	return out, nil
}

// restoreFirst runs Restore before a rewrite of a file with lines at risk,
// so the rewrite starts from a file that has them. A failure is logged:
// the entries stay for the next try.
func (w *Rewriter) restoreFirst(ctx context.Context, req Request, rel, store string) {
	if req.restoring {
		return
	}
	w.risk.mu.Lock()
	w.loadRisks(ctx)
	n := len(w.risk.m[riskKey(req.Root.Path(), rel)])
	w.risk.mu.Unlock()
	if n == 0 {
		return
	}
	if _, err := w.Restore(ctx, req.Root, rel, store); err != nil && !errors.Is(err, ErrConflict) {
		w.Log.Warn("put back lines at risk before a rewrite", "root", req.Root.Path(), "path", rel, "err", err)
	}
}

// tookEffect marks the journal record of a rewrite that met a conflict as
// done: the agent wrote its next version from memwatch's result, so what
// the rewrite removed is gone from the live file and in its archive.
func (w *Rewriter) tookEffect(ctx context.Context, id int64) {
	if w.DB == nil || id == 0 {
		return
	}
	rec, err := w.DB.GetRecord(context.WithoutCancel(ctx), id)
	if err != nil || rec.Outcome != state.Failed || rec.Archive == "" {
		return
	}
	rec.Outcome = state.Done
	rec.Reason = "took effect after a conflict: the agent wrote its next version from memwatch's result (the lines the agent added meanwhile were put back)"
	if err := w.DB.Update(context.WithoutCancel(ctx), &rec); err != nil {
		w.Log.Warn("journal a rewrite that took effect", "journal", id, "err", err)
	}
}
