package spool

import (
	"context"

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

// Bind gives root's ID the logs kept under its bindable keys
// (state.BindRoots), once per root key and run.
func (s *Spool) Bind(ctx context.Context, root confine.ID) bool {
	return s.bound.Once(root.Key(), func() error { return state.BindRoots(ctx, s.db, "logs", root) })
}

// Unbind unbinds every log from the directory it was captured from,
// keeping its path and owner (confine.ID.Unbound): a state restored from
// a replica comes from another host, whose device and inode numbers mean
// nothing here. It returns how many roots it unbound.
func (s *Spool) Unbind(ctx context.Context) (int, error) {
	defer s.forgetSame() // rows changed other than by a capture
	defer s.bound.Unbound()
	return state.UnbindRoots(ctx, s.db, "logs")
}
