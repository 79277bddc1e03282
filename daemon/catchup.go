package daemon

import (
	"context"

	"github.com/memwatch/memwatch/confine"
	"github.com/memwatch/memwatch/control"
	"github.com/memwatch/memwatch/layout"
	"github.com/memwatch/memwatch/recall"
)

// CatchUp is how far the start-up is (the status answer's type).
type CatchUp = control.CatchUp

// countCatchUp walks each root's searchable files (names and sizes) for
// the catch-up's totals. It runs beside the catch-up and stops with ctx.
func (d *Daemon) countCatchUp(ctx context.Context, roots map[string][]confine.ID) {
	defer d.catch.Counted()
	// One batch of opens (as a search's): a store's roots are mostly the
	// directories of one parent, whose trusted part is looked up once,
	// not again for each of 10,000 sessions. It only counts.
	pre := new(confine.Prefixes)
	defer pre.Close()
	for store, ids := range roots {
		rt := d.store(store)
		if rt == nil {
			continue
		}
		sr, ok := rt.layout.(layout.Searchable)
		if !ok {
			continue
		}
		for _, id := range ids {
			if ctx.Err() != nil {
				return
			}
			root, err := rt.store.OpenRootIn(id.Path, pre)
			if err != nil {
				continue
			}
			var files, bytes int64
			for _, src := range sr.Sources(rt.store) {
				if src.Kind == recall.Records {
					continue
				}
				sc, err := root.GlobScan(src.Glob, src.Exclude)
				if err != nil {
					continue
				}
				for ctx.Err() == nil {
					rels, done := sc.Next(256)
					for _, rel := range rels {
						if fi, err := root.Stat(rel); err == nil && fi.Mode().IsRegular() {
							files++
							bytes += fi.Size()
						}
					}
					if done {
						break
					}
				}
				sc.Close()
			}
			root.Close()
			d.catch.Count(store, id.Path, files, bytes)
		}
	}
}
