package spool

import (
	"context"
	"fmt"

	"github.com/memwatch/memwatch/confine"
	"github.com/memwatch/memwatch/state"
)

// What the spool holds belongs to a root's ID, not to its path: each log
// is keyed by the key of the directory it was captured from
// (confine.ID.Key), so a directory that takes the path later (an agent
// swapping a parent for a symbolic link, a project removed and cloned
// again) starts with nothing, and what was captured from the old one is
// never served, consolidated or cited under the new one. Two kinds of log
// have no directory yet: those of a spool written before roots had IDs
// (keyed by the bare path) and those of a state restored from another
// host's replica (Unbind): the first directory found at their path,
// owned by the same user for the latter, takes them (Bind).

// maxBound bounds the keys remembered as bound in one run.
const maxBound = 100_000

// Bind runs bindNow once per root key and run (read-only spools bind
// nothing); a failure is tried again at the next capture.
func (s *Spool) Bind(ctx context.Context, id confine.ID) {
	if s.readOnly {
		return
	}
	key := id.Key()
	s.mu.Lock()
	done := s.bound[key]
	s.mu.Unlock()
	if done || s.bindNow(ctx, id) != nil {
		return
	}
	s.mu.Lock()
	if len(s.bound) >= maxBound {
		clear(s.bound)
	}
	s.bound[key] = true
	s.mu.Unlock()
}

// bindNow gives root's ID the logs kept under its bindable keys
// (confine.ID.Bindable): its bare path, and its path unbound with its
// owner's uid. A log of that path already captured under the ID stays as
// it is (the other is left unbound).
func (s *Spool) bindNow(ctx context.Context, root confine.ID) error {
	b := root.Bindable()
	if _, err := s.db.ExecContext(ctx, `UPDATE OR IGNORE logs SET root=? WHERE root IN (?,?)`, root.Key(), b[0], b[1]); err != nil {
		return fmt.Errorf("bind the spool's logs of %s: %w", root.Path, err)
	}
	return nil
}

// Unbind unbinds every log from the directory it was captured from,
// keeping its path and owner (confine.ID.Unbound): a state restored from
// a replica comes from another host, whose device and inode numbers mean
// nothing here. It returns how many roots it unbound.
func (s *Spool) Unbind(ctx context.Context) (int, error) {
	return state.UnbindRoots(ctx, s.db, "logs")
}
