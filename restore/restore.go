// Package restore puts versions of memory files back (memwatch restore,
// the review page, the daemon's restore_deleted): through the safe
// rewrite, journaled, and only a version captured from the root's very
// directory, into it.
package restore

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"time"

	"github.com/memwatch/memwatch/confine"
	"github.com/memwatch/memwatch/rewrite"
	"github.com/memwatch/memwatch/state"
	"github.com/memwatch/memwatch/versions"
)

// Rule journals a version of a file put back by memwatch
// restore (or by restore_deleted).
const Rule = "restore-version"

// Request asks to put a version of a file back.
type Request struct {
	Root    string    `json:"root"`
	Path    string    `json:"path"`
	Version int64     `json:"version,omitempty"` // or
	At      time.Time `json:"at,omitempty"`      // the version of that time
}

// Result says what a restore did.
type Result struct {
	Root    string `json:"root"`
	Path    string `json:"path"`
	Version int64  `json:"version"`
	Outcome string `json:"outcome"`
	Journal int64  `json:"journal,omitempty"`
	Bytes   int    `json:"bytes"`
}

// LostRequest is the body of POST /v1/versions/restore-deleted:
// the files of Root an agent deleted since Since, or with Missing every
// file of it with versions that is not on disk.
type LostRequest struct {
	Root    string    `json:"root"`
	Since   time.Time `json:"since"`
	Missing bool      `json:"missing,omitempty"`
}

// Version puts a version of a memory file back through the safe
// rewrite (journaled, itself undoable: the content it replaces is
// archived): for the daemon, in the root's job slot, and for the CLI when
// no daemon runs. Only a version captured from root's very directory
// is written, and into it: versions of another directory that had the
// path are refused, saying so. The file gets the version's mode (a
// version older than recorded modes: the root's default) and the root's
// owner.
func Version(ctx context.Context, rw *rewrite.Rewriter, vs *versions.Store, root *confine.Root, store string, req Request) (Result, error) {
	rel, err := root.Rel(req.Path)
	if err != nil {
		return Result{}, err
	}
	n := req.Version
	if n == 0 {
		v, err := vs.At(ctx, root.ID(), rel, req.At)
		if err != nil {
			return Result{}, Elsewhere(ctx, vs, root, rel, err)
		}
		n = v.N
	}
	v, data, err := vs.Get(ctx, root.ID(), rel, n)
	if err != nil {
		return Result{}, Elsewhere(ctx, vs, root, rel, err)
	}
	if v.Deleted() {
		return Result{}, fmt.Errorf("restore %s@%d: that version is the file's deletion; give the version before it", rel, n)
	}
	rec := &state.Record{Store: store, Rule: Rule, Reason: fmt.Sprintf("put back version %d of %s (%s, %d bytes)", n, rel, v.Time.Format(time.RFC3339), v.Size)}
	out, err := rw.Apply(ctx, rewrite.Request{Root: root, Target: rel, AllowCreate: true, Mode: v.Mode, Archive: "", Compute: func(_ context.Context, old []byte) ([]byte, error) {
		if old != nil && string(old) == string(data) {
			return nil, rewrite.ErrUnchanged
		}
		return data, nil
	}}, rec)
	if err != nil {
		return Result{}, fmt.Errorf("restore %s@%d: %w", rel, n, err)
	}
	return Result{Root: root.Path(), Path: rel, Version: n, Outcome: out.Status, Journal: out.Record, Bytes: len(data)}, nil
}

// ErrOtherDirectory means a file has versions under its path, but they
// were captured from another directory than the one there now (the path
// was swapped for a symbolic link, or the directory was replaced):
// memwatch neither shows them for it nor writes them into it.
var ErrOtherDirectory = errors.New("its versions were captured from another directory that had this path")

// Elsewhere turns "no such version" for root/rel into ErrOtherDirectory
// when versions of that path were captured from another directory.
func Elsewhere(ctx context.Context, vs *versions.Store, root *confine.Root, rel string, err error) error {
	if !errors.Is(err, versions.ErrNoVersion) {
		return err
	}
	if ids, lerr := vs.Elsewhere(ctx, root.ID(), rel); lerr == nil && len(ids) > 0 {
		return fmt.Errorf("%s in %s: %w (the directory there now is %d:%d; memwatch keeps the old one's versions and serves them for no other)", rel, root.Path(), ErrOtherDirectory, root.ID().Dev, root.ID().Ino)
	}
	return err
}

// Lost lists, for each memory file of root that req selects, the
// version to put back: with Missing, each file with versions that is not
// on disk, as its newest version that is no deletion (restore --missing,
// after a state restore on a new host, say); else each file an agent
// deleted since req.Since, as it was before (restore --deleted). Only
// versions captured from root's very directory count.
func Lost(ctx context.Context, vs *versions.Store, root *confine.Root, req LostRequest) ([]versions.Version, error) {
	var out []versions.Version
	if !req.Missing {
		dels, err := vs.DeletedSince(ctx, root.ID(), req.Since)
		for _, dl := range dels {
			out = append(out, dl[1])
		}
		return out, err
	}
	files, err := vs.Files(ctx, root.ID())
	if err != nil {
		return nil, err
	}
	if len(files) == 0 {
		// None from this directory: say so when its path had some from
		// another (a directory swapped or replaced since).
		if ids, err := vs.Elsewhere(ctx, root.ID(), ""); err == nil && len(ids) > 0 {
			return nil, fmt.Errorf("%s: %w (the directory there now is %d:%d; memwatch keeps the old one's versions and writes them into no other)", root.Path(), ErrOtherDirectory, root.ID().Dev, root.ID().Ino)
		}
	}
	for _, rel := range files {
		if _, err := root.Lstat(rel); !errors.Is(err, fs.ErrNotExist) {
			continue // on disk (or not ours to tell)
		}
		list, err := vs.List(ctx, root.ID(), rel)
		if err != nil {
			return nil, err
		}
		for i := len(list) - 1; i >= 0; i-- {
			if !list[i].Deleted() {
				out = append(out, list[i])
				break
			}
		}
	}
	return out, nil
}
