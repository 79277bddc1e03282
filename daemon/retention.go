package daemon

import (
	"context"
	"path/filepath"
	"sort"
	"time"

	"github.com/memwatch/memwatch/policy"
	"github.com/memwatch/memwatch/prune"
	"github.com/memwatch/memwatch/rotate"
	"github.com/memwatch/memwatch/state"
)

// pruneArchives is the daemon's scheduled retention: the journal's, then
// each root's archives.
func (d *Daemon) pruneArchives(ctx context.Context) {
	d.mu.RLock()
	p := d.policy
	d.mu.RUnlock()
	slot := func(ctx context.Context, store, root string, fn func(context.Context) error) error {
		return d.engine.Exclusive(ctx, store, root, "archive-retention", fn)
	}
	if jr := prune.JournalRetention(p); jr.Active() {
		res, err := rotate.PruneJournal(ctx, d.db, jr, time.Now(), false)
		switch {
		case err != nil:
			d.log.Warn("journal retention", "err", err)
		case res.Records > 0:
			d.log.Info("journal retention", "removed", res.Records, "freed", res.Freed, "kept", res.Kept, "held", res.Held)
		}
	}
	for _, rep := range prune.Versions(ctx, d.versions, p, "", false) {
		if rep.Error != "" {
			d.log.Warn("version retention", "store", rep.Store, "root", rep.Root, "err", rep.Error)
		} else if rep.Removed.Versions > 0 {
			d.log.Info("version retention", "store", rep.Store, "root", rep.Root, "removed", rep.Removed.Versions, "freed", rep.Removed.Bytes)
		}
	}
	for _, rep := range prune.Archives(ctx, d.db, p, "", time.Now(), false, slot) {
		if rep.Error != "" {
			d.log.Warn("archive retention", "store", rep.Store, "root", rep.Root, "err", rep.Error)
		}
		if rep.Result.Removed+rep.Result.Compressed > 0 {
			d.log.Info("archive retention", "store", rep.Store, "root", rep.Root, "removed", rep.Result.Removed, "compressed", rep.Result.Compressed, "freed", rep.Result.Freed)
		}
	}
}

// held is what a store's roots hold in archives (memwatch status,
// memwatch_archive_bytes, memwatch_kept_copies).
type held struct {
	archives int
	bytes    int64
	kept     []KeptCopy
}

// maxKeptListed bounds the kept copies status lists per store (newest first).
const maxKeptListed = 20

// archivesHeld counts, per store, the archives its roots hold and their
// bytes, and lists the kept copies among them.
func (d *Daemon) archivesHeld(ctx context.Context, stores []*policy.Store, roots map[string][]string) map[string]held {
	out := map[string]held{}
	// Only the roots the journal names an archive in are opened: a home
	// of 10,000 session roots has archives in a few, if any.
	has, err := d.db.ArchiveRoots(ctx)
	if err != nil {
		has = nil // each root is asked, as before
	}
	for _, s := range stores {
		var h held
		for _, path := range roots[s.Name] {
			if has != nil && !has[filepath.Clean(path)] {
				continue
			}
			root, err := s.OpenRoot(path)
			if err != nil {
				continue
			}
			if as, err := rotate.Archives(ctx, d.db, root); err == nil {
				n, b, _ := rotate.Held(as)
				h.archives, h.bytes = h.archives+n, h.bytes+b
				for _, a := range as {
					if a.Kept {
						h.kept = append(h.kept, KeptCopy{Root: path, Path: a.Path, Target: a.Target, Time: a.Time, Record: a.Record, Size: a.Size, Reason: a.Reason})
					}
				}
			}
			root.Close()
		}
		sort.SliceStable(h.kept, func(i, j int) bool { return h.kept[i].Time.After(h.kept[j].Time) })
		out[s.Name] = h
	}
	return out
}

// reportArchives sets memwatch_archive_bytes and records the day's disk
// use (hourly: it opens every root, too much to do at start).
func (d *Daemon) reportArchives(ctx context.Context) {
	d.mu.RLock()
	stores := d.policy.Stores
	d.mu.RUnlock()
	roots, err := d.watch.Roots(ctx)
	if err != nil {
		return
	}
	day := time.Now().Format(time.DateOnly)
	disk := d.disk()
	samples := []state.DiskSample{
		{Day: day, Kind: "journal", Bytes: disk.Journal},
		{Day: day, Kind: "spool", Bytes: disk.Spool},
		{Day: day, Kind: "index", Bytes: disk.Index},
		{Day: day, Kind: "versions", Bytes: disk.Versions},
	}
	for name, h := range d.archivesHeld(ctx, stores, roots) {
		d.metrics.ArchiveBytes.WithLabelValues(name).Set(float64(h.bytes))
		d.metrics.Kept.WithLabelValues(name).Set(float64(len(h.kept)))
		samples = append(samples, state.DiskSample{Day: day, Store: name, Kind: "archives", Bytes: h.bytes})
	}
	// The day's reading, for the disk plot of the review pages.
	if err := d.db.PutDisk(ctx, samples); err != nil && ctx.Err() == nil {
		d.log.Warn("recording disk use failed", "err", err)
	}
}
