package daemon

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"path/filepath"

	"github.com/memwatch/memwatch/access"
	"github.com/memwatch/memwatch/answer"
	"github.com/memwatch/memwatch/confine"
	"github.com/memwatch/memwatch/control"
	"github.com/memwatch/memwatch/fleet/mirror"
	"github.com/memwatch/memwatch/layout/registry"
	"github.com/memwatch/memwatch/policy"
	"github.com/memwatch/memwatch/recall"
	"github.com/memwatch/memwatch/scope"
	"github.com/memwatch/memwatch/spool"
)

// Recall and show over the control socket: what memwatch recall and
// memwatch show do with the state directory, for a user who cannot read
// it (memwatch's state is private to memwatch). The daemon answers from
// the roots the caller reaches (access.Caller), each opened as every job opens
// it and served only if the directory opened is one the caller reaches,
// with the spool's lines held for those very directories: exactly what
// SO_PEERCRED allows, nothing of a root another user owns.

// RecallResponse is the body of GET /v1/recall.
type RecallResponse = control.RecallResponse

// IndexDir is the recall index's directory in the state directory.
const IndexDir = recall.IndexDir

// handleRecall answers GET /v1/recall (control.RecallRequest: q, and dir
// or cwd, store, all, host, scope, limit, sort, context, explain).
func (d *Daemon) handleRecall(w http.ResponseWriter, r *http.Request) {
	if !d.needRight(w, r, policy.RightRead) {
		return
	}
	req, err := control.ParseRecallRequest(r.URL.Query())
	if err != nil {
		writeErr(w, http.StatusBadRequest, err)
		return
	}
	caller := access.CallerOf(r.Context())
	// A search opens each root it reaches, a home's tens of projects
	// under one directory: the trusted part of their paths is walked,
	// and its directory opened, once.
	pre := new(confine.Prefixes)
	defer pre.Close()
	x, err := d.recaller(r.Context(), caller, pre)
	if err != nil {
		writeErr(w, http.StatusServiceUnavailable, err)
		return
	}
	roots, res, done, err := x.Resolve(r.Context(), req)
	defer done()
	// A central node: the hosts' copies the caller reaches, with its own
	// roots (or one host's alone: host=).
	if host := req.Host; d.fleet != nil && req.Dir == "" && req.Store == "" && (req.All || host != "" || len(x.Roots) == 0) && caller.ReachesFleet() {
		if host != "" {
			roots, err = nil, nil
		}
		fr, fdone := answer.FleetRoots(d.cfg.StateDir, caller, host)
		defer fdone()
		if room := answer.MaxRoots - len(roots); len(fr) > room {
			res.Skipped += len(fr) - room
			fr = fr[:room]
		}
		roots = append(roots, fr...)
	} else if host != "" {
		writeErr(w, http.StatusNotFound, fmt.Errorf("no host %q that %s reaches is followed here", host, caller.Name))
		return
	}
	if err == nil {
		res, err = x.Search(r.Context(), req, roots, res)
	}
	switch {
	case errors.Is(err, control.ErrUsage):
		writeErr(w, http.StatusBadRequest, err)
	case err != nil:
		writeErr(w, http.StatusUnprocessableEntity, err)
	default:
		if n := fitAnswer(res.Results, control.MaxAnswer); n < len(res.Results) {
			// The rest is the next page's: an answer never holds more
			// than MaxAnswer bytes, whatever its results' context.
			res.Results, res.Next = res.Results[:n], req.Offset+n
		}
		writeJSON(w, http.StatusOK, res)
	}
}

// watchSyncDir is where, in the state directory, the watcher's Sync
// writes its markers.
const watchSyncDir = "watch-sync"

// indexCacheBytes bounds the recall indexes the daemon keeps parsed
// between searches: the block filters of about 1.6 GiB of logs (20 KiB
// per MiB).
const indexCacheBytes = 32 << 20

// recaller is the answer.Recaller of the roots caller reaches: the roots the
// watcher found, opened as every job opens them, in the batch pre.
func (d *Daemon) recaller(ctx context.Context, caller *access.Caller, pre *confine.Prefixes) (*answer.Recaller, error) {
	ids, err := d.watch.RootIDs(ctx)
	if err != nil {
		return nil, err
	}
	p := d.Policy()
	x := &answer.Recaller{Policy: p, Cache: &d.scopes,
		Open:    func(s *policy.Store, path string) (*confine.Root, error) { return d.openRootIn(s, path, pre) },
		Reaches: caller.Reaches,
		Options: func(o *recall.Options) {
			o.Index = filepath.Join(d.cfg.StateDir, IndexDir)
			gens := d.spool.Gens(ctx)
			o.Generation, o.Held = gens.Of, gens.Held
			o.Indexes, o.Segments = d.indexes, d.segments
			// What a search listed of a root is used again, unlisted,
			// while the watcher saw nothing change there, every change
			// made before this search taken in (Sync).
			if m, err := d.watch.Sync(ctx); err == nil {
				o.Listings = d.listings
				o.Fresh = func(r recall.Root) (uint64, bool) { return m.Changed(r.Root.Path()) }
			}
		}}
	// Only the roots the caller reaches, before anything is resolved: a
	// root of another user is never named, counted or opened for it, in
	// an answer, an error or a scope (which of them a directory means).
	for _, s := range p.Stores {
		if _, ok := registry.SearchSources(s); !ok || !caller.ReachesStore(s) {
			continue
		}
		for _, id := range ids[s.Name] {
			if caller.Reaches(s, id) {
				x.Roots = append(x.Roots, scope.Candidate{Store: s, ID: id})
			}
		}
	}
	return x, nil
}

// ShowResponse is the body of GET /v1/show.
type ShowResponse = control.ShowResponse

// handleShow answers GET /v1/show?root=PATH&cite=CITATION: the lines a
// citation names, from the live file or the spool (memwatch show).
func (d *Daemon) handleShow(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	if _, _, ok := mirror.SplitHostPath(mirror.CitedPath(q.Get("cite"))); ok && q.Get("root") == "" && d.fleet != nil {
		d.handleHostShow(w, r)
		return
	}
	c, err := spool.ParseCitation(q.Get("cite"))
	if err != nil {
		writeErr(w, http.StatusBadRequest, err)
		return
	}
	rootPath := q.Get("root")
	if rootPath == "" && filepath.IsAbs(c.Path) {
		// A citation with a whole path (recall over several roots): the
		// deepest root holding it, of those the watcher found.
		ids, err := d.watch.RootIDs(r.Context())
		if err != nil {
			writeErr(w, http.StatusServiceUnavailable, err)
			return
		}
		// Of the caller's roots only: a path in another user's root is
		// answered as one in no root.
		caller := access.CallerOf(r.Context())
		p := d.Policy()
		for name, list := range ids {
			s := p.StoreByName(name)
			for _, id := range list {
				if s != nil && caller.Reaches(s, id) && confine.Within(id.Path, c.Path) && id.Path != c.Path && len(id.Path) > len(rootPath) {
					rootPath = id.Path
				}
			}
		}
		if rootPath == "" {
			writeErr(w, http.StatusNotFound, fmt.Errorf("%s is in no root of yours: %w", c.Path, spool.ErrUnknownLog))
			return
		}
		c.Path, _ = filepath.Rel(rootPath, c.Path)
	}
	_, root, ok := d.needRoot(w, r, rootPath, policy.RightRead)
	if !ok {
		return
	}
	defer root.Close()
	lines, err := answer.ShowIn(r.Context(), d.spool, root, c)
	switch {
	case errors.Is(err, spool.ErrUnknownLog), errors.Is(err, spool.ErrNoSuchLine):
		writeErr(w, http.StatusNotFound, err)
	case err != nil:
		writeErr(w, http.StatusUnprocessableEntity, err)
	default:
		// The values themselves only to their owner, asking (show --reveal):
		// a user on the socket, or root; never a token, the page or MCP.
		reveal := q.Get("reveal") == "1" && access.CallerOf(r.Context()).Owner()
		writeJSON(w, http.StatusOK, ShowResponse{Root: root.Path(), Path: c.Path, Lines: answer.Decode(lines, c.Path, reveal)})
	}
}
