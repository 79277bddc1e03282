package daemon

import (
	"context"
	"time"

	"github.com/memwatch/memwatch/layout/apprecords"
	"github.com/memwatch/memwatch/policy"
	"github.com/memwatch/memwatch/rotate"
	"github.com/memwatch/memwatch/state"
)

// Retention is a store's archive retention.
func Retention(s *policy.Store) rotate.Retention {
	return rotate.Retention{Keep: s.ArchiveKeep, MaxAge: s.ArchiveMaxAge, MaxBytes: int64(s.ArchiveMaxBytes), CompressAfter: s.CompressAfter}
}

// JournalRetention is the policy's journal retention.
func JournalRetention(p *policy.Policy) rotate.JournalRetention {
	return rotate.JournalRetention{MaxAge: p.JournalMaxAge, MaxBytes: int64(p.JournalMaxBytes), RowRule: apprecords.IsRowRule}
}

// PruneReport is what retention did (or would do) in one root.
type PruneReport struct {
	Store   string          `json:"store"`
	Root    string          `json:"root"`
	Actions []rotate.Action `json:"actions"`
	Result  rotate.Result   `json:"result"`
	Error   string          `json:"error,omitempty"`
}

// Prune applies the archive retention of the policy's stores (only store,
// when given) to every root, journaled in db; dryRun only plans. Roots
// memwatch refuses are skipped. slot, when set, runs each root's work in
// that root's job slot (the daemon's engine), so it never races an undo.
func Prune(ctx context.Context, db *state.DB, p *policy.Policy, store string, now time.Time, dryRun bool, slot func(ctx context.Context, store, root string, fn func(context.Context) error) error) []PruneReport {
	if slot == nil {
		slot = func(ctx context.Context, _, _ string, fn func(context.Context) error) error { return fn(ctx) }
	}
	var out []PruneReport
	for _, s := range p.Stores {
		if store != "" && s.Name != store {
			continue
		}
		r := Retention(s)
		if !r.Active() {
			continue
		}
		for _, path := range s.Roots() {
			root, err := OpenRoot(s, path)
			if err != nil {
				continue
			}
			rep := PruneReport{Store: s.Name, Root: path}
			err = slot(ctx, s.Name, path, func(ctx context.Context) error {
				archives, err := rotate.Archives(ctx, db, root)
				if err != nil {
					return err
				}
				rep.Actions = rotate.Plan(archives, r, now)
				rep.Result, err = rotate.Apply(ctx, db, root, s.Name, rep.Actions, dryRun)
				return err
			})
			root.Close()
			if err != nil {
				rep.Error = err.Error()
			}
			if len(rep.Actions) > 0 || rep.Error != "" {
				out = append(out, rep)
			}
		}
	}
	return out
}

// pruneArchives is the daemon's scheduled retention: the journal's, then
// each root's archives.
func (d *Daemon) pruneArchives(ctx context.Context) {
	d.mu.RLock()
	p := d.policy
	d.mu.RUnlock()
	slot := func(ctx context.Context, store, root string, fn func(context.Context) error) error {
		return d.engine.Exclusive(ctx, store, root, "archive-retention", fn)
	}
	if jr := JournalRetention(p); jr.Active() {
		res, err := rotate.PruneJournal(ctx, d.db, jr, time.Now(), false)
		switch {
		case err != nil:
			d.log.Warn("journal retention", "err", err)
		case res.Records > 0:
			d.log.Info("journal retention", "removed", res.Records, "freed", res.Freed, "kept", res.Kept, "held", res.Held)
		}
	}
	for _, rep := range Prune(ctx, d.db, p, "", time.Now(), false, slot) {
		if rep.Error != "" {
			d.log.Warn("archive retention", "store", rep.Store, "root", rep.Root, "err", rep.Error)
		}
		if rep.Result.Removed+rep.Result.Compressed > 0 {
			d.log.Info("archive retention", "store", rep.Store, "root", rep.Root, "removed", rep.Result.Removed, "compressed", rep.Result.Compressed, "freed", rep.Result.Freed)
		}
	}
}

// archivesHeld counts, per store, the archives its roots hold and their
// bytes (memwatch status, memwatch_archive_bytes).
func (d *Daemon) archivesHeld(ctx context.Context, stores []*policy.Store, roots map[string][]string) map[string][2]int64 {
	out := map[string][2]int64{}
	for _, s := range stores {
		var n, b int64
		for _, path := range roots[s.Name] {
			root, err := OpenRoot(s, path)
			if err != nil {
				continue
			}
			if as, err := rotate.Archives(ctx, d.db, root); err == nil {
				c, bytes := rotate.Held(as)
				n, b = n+int64(c), b+bytes
			}
			root.Close()
		}
		out[s.Name] = [2]int64{n, b}
	}
	return out
}

// reportArchives sets memwatch_archive_bytes (hourly).
func (d *Daemon) reportArchives(ctx context.Context) {
	d.mu.RLock()
	stores := d.policy.Stores
	d.mu.RUnlock()
	roots, err := d.watch.Roots(ctx)
	if err != nil {
		return
	}
	for name, v := range d.archivesHeld(ctx, stores, roots) {
		d.metrics.archiveBytes.WithLabelValues(name).Set(float64(v[1]))
	}
}
