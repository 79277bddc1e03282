// Package prune applies the policy's retention: the archives of every
// root of a store and the versions kept of its files (memwatch prune, and
// the daemon on its schedule, each root's work in its job slot).
package prune

import (
	"context"
	"time"

	"github.com/memwatch/memwatch/layout/apprecords"
	"github.com/memwatch/memwatch/policy"
	"github.com/memwatch/memwatch/rotate"
	"github.com/memwatch/memwatch/state"
	"github.com/memwatch/memwatch/versions"
)

// Retention is a store's archive retention.
func Retention(s *policy.Store) rotate.Retention {
	return rotate.Retention{Keep: s.ArchiveKeep, MaxAge: s.ArchiveMaxAge, MaxBytes: int64(s.ArchiveMaxBytes), CompressAfter: s.CompressAfter}
}

// JournalRetention is the policy's journal retention.
func JournalRetention(p *policy.Policy) rotate.JournalRetention {
	return rotate.JournalRetention{MaxAge: p.JournalMaxAge, MaxBytes: int64(p.JournalMaxBytes), RowRule: apprecords.IsRowRule}
}

// ArchiveReport is what retention did (or would do) in one root.
type ArchiveReport struct {
	Store   string          `json:"store"`
	Root    string          `json:"root"`
	Actions []rotate.Action `json:"actions"`
	Result  rotate.Result   `json:"result"`
	Error   string          `json:"error,omitempty"`
}

// Archives applies the archive retention of the policy's stores (only store,
// when given) to every root, journaled in db; dryRun only plans. Roots
// memwatch refuses are skipped. slot, when set, runs each root's work in
// that root's job slot (the daemon's engine), so it never races an undo.
func Archives(ctx context.Context, db *state.DB, p *policy.Policy, store string, now time.Time, dryRun bool, slot func(ctx context.Context, store, root string, fn func(context.Context) error) error) []ArchiveReport {
	if slot == nil {
		slot = func(ctx context.Context, _, _ string, fn func(context.Context) error) error { return fn(ctx) }
	}
	var out []ArchiveReport
	for _, s := range p.Stores {
		if store != "" && s.Name != store {
			continue
		}
		r := Retention(s)
		if !r.Active() {
			continue
		}
		for _, path := range s.Roots() {
			root, err := s.OpenRoot(path)
			if err != nil {
				continue
			}
			rep := ArchiveReport{Store: s.Name, Root: path}
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

// VersionReport is what version retention did (or would do) in one root.
type VersionReport struct {
	Store   string          `json:"store"`
	Root    string          `json:"root"`
	Removed versions.Pruned `json:"removed"`
	Error   string          `json:"error,omitempty"`
}

// VersionRetention is a store's retention of versions.
func VersionRetention(s *policy.Store) versions.Retention {
	return versions.Retention{Keep: s.VersionsKeep, MaxAge: s.VersionsMaxAge, MaxBytes: int64(s.VersionsMaxBytes)}
}

// Versions applies each store's version retention (only store, when
// given) to the versions of its roots; dryRun only counts nothing and
// returns no report (versions are removed inside one transaction per root).
func Versions(ctx context.Context, vs *versions.Store, p *policy.Policy, store string, dryRun bool) []VersionReport {
	if vs == nil || dryRun {
		return nil
	}
	var out []VersionReport
	for _, s := range p.Stores {
		if store != "" && s.Name != store {
			continue
		}
		r := VersionRetention(s)
		if !r.Active() {
			continue
		}
		roots, err := vs.Roots(ctx)
		if err != nil {
			out = append(out, VersionReport{Store: s.Name, Error: err.Error()})
			continue
		}
		for _, root := range roots {
			if !s.MatchesRoot(root) {
				continue
			}
			rep := VersionReport{Store: s.Name, Root: root}
			rep.Removed, err = vs.Prune(ctx, root, r)
			if err != nil {
				rep.Error = err.Error()
			}
			if rep.Removed.Versions > 0 || rep.Error != "" {
				out = append(out, rep)
			}
		}
	}
	return out
}
