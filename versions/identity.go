package versions

import (
	"context"
	"fmt"
	"path/filepath"

	"github.com/memwatch/memwatch/confine"
	"github.com/memwatch/memwatch/state"
)

// Versions belong to a root's ID, as the spool's logs do (see the spool's
// identity.go): a file's versions are keyed by the key of the directory
// they were captured from, so a directory that takes the root's path later
// neither reads them nor gets them written into it. Versions kept before
// roots had IDs, and those of a state restored from another host's
// replica (Unbind), go to the first directory opened at their path (with
// the same owner, for the latter).

// Bind gives root's ID the files kept under its bindable keys
// (state.BindRoots), once per root key and run.
func (s *Store) Bind(ctx context.Context, root confine.ID) {
	s.bound.Once(root.Key(), func() error { return state.BindRoots(ctx, s.db, "files", root) })
}

// Unbind unbinds every file's versions from the directory they were
// captured from, keeping path and owner: run on a state restored from a
// replica (see state.UnbindRoots).
func (s *Store) Unbind(ctx context.Context) (int, error) {
	defer s.bound.Unbound()
	return state.UnbindRoots(ctx, s.db, "files")
}

// Elsewhere reports the directories other than root's that versions of
// root/rel (with rel "", of any file of root's path) were captured from,
// each as an ID once (a bare path or an unbound key has no device and
// inode): what an error says when root's directory has no versions but
// its path had some.
func (s *Store) Elsewhere(ctx context.Context, root confine.ID, rel string) ([]confine.ID, error) {
	if rel != "" {
		rel = filepath.Clean(rel)
	}
	rows, err := s.db.QueryContext(ctx, `SELECT DISTINCT root FROM files WHERE (?='' OR path=?) AND root<>? AND (root=? OR root>=? AND root<?)`,
		rel, rel, root.Key(), root.Path, root.Path+"\x00", root.Path+"\x01")
	if err != nil {
		return nil, fmt.Errorf("look for versions of %s: %w", rel, err)
	}
	defer rows.Close()
	var out []confine.ID
	for rows.Next() {
		var k string
		if err := rows.Scan(&k); err != nil {
			return nil, err
		}
		if id, ok := confine.ParseKey(k); ok {
			out = append(out, id)
		}
	}
	return out, rows.Err()
}
