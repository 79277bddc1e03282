package daemon

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/memwatch/memwatch/confine"
	"github.com/memwatch/memwatch/control"
	"github.com/memwatch/memwatch/fleet/mirror"
	"github.com/memwatch/memwatch/jobs"
	"github.com/memwatch/memwatch/layout"
	"github.com/memwatch/memwatch/policy"
	"github.com/memwatch/memwatch/recall"
	"github.com/memwatch/memwatch/restore"
	"github.com/memwatch/memwatch/rewrite"
	"github.com/memwatch/memwatch/state"
	"github.com/memwatch/memwatch/versions"
)

// Every version of an agent's memory files is captured on the background
// queue as the watcher sees it written (versions/): the memory files are
// the layout's searchable files that are not session logs (those are in
// the spool) nor memwatch's own archives. A deletion or a large shrink by
// the agent is logged at WARN, counted, listed by memwatch status, and
// with restore_deleted in the policy a deleted file is put back at once.

// Loss is a deletion or a large shrink an agent made to a memory file.
type Loss = control.Loss

// seenLoss is a loss with the directory it was seen in: only who reaches
// it sees the loss.
type seenLoss struct {
	Loss
	dir confine.ID
}

// maxLosses bounds the losses remembered for memwatch status.
const maxLosses = 200

// losses is the recent losses, newest last. Safe for concurrent use.
type losses struct {
	mu   sync.Mutex
	list []seenLoss
}

func (l *losses) add(x seenLoss) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.list = append(l.list, x)
	if len(l.list) > maxLosses {
		l.list = l.list[len(l.list)-maxLosses:]
	}
}

// listFor returns the losses keep accepts (by the directory they were
// seen in), newest first.
func (l *losses) listFor(keep func(dir confine.ID) bool) []Loss {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := []Loss{}
	for i := len(l.list) - 1; i >= 0; i-- {
		if keep(l.list[i].dir) {
			out = append(out, l.list[i].Loss)
		}
	}
	return out
}

// versionable reports whether rel is one of the store's memory files.
func (d *Daemon) versionable(ctx context.Context, rt *storeRT, root, rel string) bool {
	if !rt.store.Versions || rewrite.IsTemp(rel) {
		return false
	}
	sr, ok := rt.layout.(layout.Searchable)
	if !ok {
		return false
	}
	if sl, ok := rt.layout.(layout.SessionLogs); ok {
		for _, g := range sl.Logs(rt.store) {
			if confine.Match(g.Glob, g.Exclude, rel) {
				return false
			}
		}
	}
	for _, src := range sr.Sources(rt.store) {
		if src.Kind != recall.Records && confine.Match(src.Glob, src.Exclude, rel) {
			// memwatch's own archives are kept already. Asked of the
			// journal once per path and run: archive names are never reused
			// for memory files.
			key := root + "\x00" + rel
			d.archiveMu.Lock()
			defer d.archiveMu.Unlock()
			isArchive, seen := d.archive[key]
			if !seen {
				recs, err := d.db.Journal(ctx, state.Filter{Root: root, Archive: rel, Limit: 1})
				if err != nil {
					return false
				}
				isArchive = len(recs) > 0
				if len(d.archive) > maxArchiveCache {
					clear(d.archive)
				}
				d.archive[key] = isArchive
			}
			return !isArchive
		}
	}
	return false
}

// maxArchiveCache bounds the paths versionable remembers.
const maxArchiveCache = 100_000

// writerOf says who wrote root/rel with content sha ("" for a deletion):
// memwatch when one of its journal's newest changes of the file left it so.
func (d *Daemon) writerOf(ctx context.Context, root, rel string) func(sha string) (string, int64) {
	return func(sha string) (string, int64) {
		// Pending too: the watcher can see memwatch's write before the
		// rewrite journals it done.
		recs, err := d.db.Journal(ctx, state.Filter{Root: root, Target: rel, Limit: 5})
		if err != nil {
			return versions.ByAgent, 0
		}
		for _, r := range recs {
			if r.Outcome != state.Done && r.Outcome != state.Pending {
				continue
			}
			if r.AfterSHA == sha || (sha == "" && r.AfterSHA == rewrite.RemovedSHA) {
				return versions.ByMemwatch, r.ID
			}
		}
		return versions.ByAgent, 0
	}
}

// versionBefore captures the version of a memory file memwatch is about
// to change (rewrite.Rewriter.BeforeChange): the agent's last write to it
// is a version even when memwatch's change comes before its settle time.
func (d *Daemon) versionBefore(root *confine.Root, rel string) {
	for _, rt := range d.storesOf(root.Path()) {
		if d.versionable(context.Background(), rt, root.Path(), rel) {
			d.captureVersion(context.Background(), root, rt, rel)
			return
		}
	}
}

// captureVersion runs on the background goroutine, or on a job's before
// memwatch changes the file (versions.Store serializes them).
func (d *Daemon) captureVersion(ctx context.Context, root *confine.Root, rt *storeRT, rel string) {
	who := d.writerOf(ctx, root.Path(), rel)
	v, prev, ok, err := d.versions.Capture(ctx, root, rel, who)
	if err != nil {
		if d.stateFailed(rt.store.Name, root.Path(), "a version of "+root.Join(rel), err) {
			return
		}
		if !layout.IsRefusal(err) && !errors.Is(err, confine.ErrNotRegular) && ctx.Err() == nil {
			d.log.Debug("capture a version", "root", root.Path(), "path", rel, "err", err)
		}
		return
	}
	if !ok {
		return
	}
	d.metrics.Versions.Inc()
	if v.Writer != versions.ByAgent || prev.N == 0 || prev.Deleted() {
		return
	}
	loss := seenLoss{Loss: Loss{Root: root.Path(), Path: rel, Time: v.Time, Version: v.N, Before: prev.N, LinesBefore: prev.Lines, LinesAfter: v.Lines}, dir: root.ID()}
	switch {
	case v.Deleted():
		loss.Kind, loss.LinesAfter = "deleted", 0
	case prev.Lines >= 4 && v.Lines < prev.Lines && float64(v.Removed) > rt.store.ShrinkWarn*float64(prev.Lines):
		// Cut: fewer lines, most of the old gone. A rewrite that grew the
		// file is no loss to warn of (its versions are kept all the same).
		loss.Kind = "shrunk"
	default:
		return
	}
	d.metrics.Losses.WithLabelValues(rt.store.Name, loss.Kind).Inc()
	if loss.Kind == "deleted" && rt.store.RestoreDeleted {
		// A job in the root's slot: the background queue never waits for one.
		d.engine.Submit(jobs.Job{Store: rt.store.Name, Root: root.Path(), Rule: restore.Rule, Target: rel, Reason: jobs.ReasonRestoreDeleted})
		loss.Restored = true
	}
	d.losses.add(loss)
	all := d.losses.listFor(func(dir confine.ID) bool { return dir == root.ID() })
	var names []string
	for _, l := range all {
		if l.Kind == loss.Kind && time.Since(l.Time) < time.Hour && !l.Restored {
			names = append(names, l.Path)
		}
	}
	sort.Strings(names)
	if loss.Kind == "deleted" {
		const msg = "an agent deleted a memory file; its last version is kept"
		if d.quota.Allow(d.log, slog.LevelWarn, root.Path(), "deleted", msg) {
			d.log.Warn(msg, "store", rt.store.Name, "root", root.Path(), "path", rel,
				"version", prev.N, "lines", prev.Lines, "restored", loss.Restored, "deleted_last_hour", names[:min(len(names), 20)])
		}
		if len(names) > 0 {
			d.warnings.Set(root.Path(), "agent-deleted", fmt.Sprintf("%s: an agent deleted %d memory file(s) in the last hour: %s (memwatch restore --deleted %s --since 1h)",
				root.Path(), len(names), strings.Join(names, ", "), root.Path()))
		}
		return
	}
	const msg = "an agent removed most of a memory file in one write; the version before is kept"
	if d.quota.Allow(d.log, slog.LevelWarn, root.Path(), "shrunk", msg) {
		d.log.Warn(msg, "store", rt.store.Name, "root", root.Path(), "path", rel,
			"lines_before", prev.Lines, "lines_after", v.Lines, "removed", v.Removed, "version", v.N, "restore", fmt.Sprintf("memwatch restore %s@%d", rel, prev.N))
	}
	d.warnings.Set(root.Path(), "agent-shrunk:"+rel, fmt.Sprintf("%s: an agent cut %s from %d to %d lines (memwatch versions %s; memwatch restore %s@%d)",
		root.Path(), rel, prev.Lines, v.Lines, rel, rel, prev.N))
}

// restoreDeletedJob puts back a memory file an agent deleted (policy
// restore_deleted): its last version, if it is still gone.
func (d *Daemon) restoreDeletedJob(ctx context.Context, rt *storeRT, root *confine.Root, rel string) (jobs.Result, error) {
	vs, err := d.versions.List(ctx, root.ID(), rel)
	if err != nil || len(vs) < 2 || !vs[len(vs)-1].Deleted() {
		return jobs.Result{}, err // written again meanwhile, or nothing to bring back
	}
	var last int64
	for _, v := range vs {
		if !v.Deleted() {
			last = v.N
		}
	}
	res, err := restore.Version(ctx, d.rw, d.versions, root, rt.store.Name, restore.Request{Path: rel, Version: last})
	if err != nil {
		d.log.Error("put back a memory file an agent deleted", "root", root.Path(), "path", rel, "err", err)
		return jobs.Result{}, layout.Retryable(err)
	}
	d.log.Warn("put back a memory file an agent deleted (restore_deleted)", "root", root.Path(), "path", rel, "version", last, "journal", res.Journal)
	return jobs.Result{Changed: res.Outcome == state.Done}, nil
}

// RestoreVersion puts a version of a memory file back through the safe
// rewrite, in the root's job slot (journaled, itself undoable: the content
// it replaces is archived). The root is opened in the slot, as a job opens
// it; with dir set (a request's root, checked for its caller) it must be
// that very directory still.
func (d *Daemon) RestoreVersion(ctx context.Context, req restore.Request, dir *confine.ID) (restore.Result, error) {
	rt, _ := d.storeFor(req.Root)
	if rt == nil {
		return restore.Result{}, fmt.Errorf("restore %s: %s is %w", req.Path, req.Root, control.ErrNotARoot)
	}
	var res restore.Result
	err := d.engine.Exclusive(ctx, rt.store.Name, req.Root, "restore a version", func(ctx context.Context) error {
		root, err := d.openRoot(rt.store, req.Root)
		if err != nil {
			return err
		}
		defer root.Close()
		if dir != nil && root.ID() != *dir {
			return fmt.Errorf("restore %s: %s: %w (it was replaced while the request waited)", req.Path, req.Root, rewrite.ErrRootReplaced)
		}
		res, err = restore.Version(ctx, d.rw, d.versions, root, rt.store.Name, req)
		return err
	})
	return res, err
}

// RestoreLost writes back the memory files of a root that req selects
// (restore.Lost), each through the safe rewrite, owned by the root's
// owner, journaled; with dir set (a request's root), only into that very
// directory.
func (d *Daemon) RestoreLost(ctx context.Context, req restore.LostRequest, dir *confine.ID) ([]restore.Result, error) {
	rt, _ := d.storeFor(req.Root)
	if rt == nil {
		return nil, fmt.Errorf("restore: %s is %w", req.Root, control.ErrNotARoot)
	}
	root, err := d.openRoot(rt.store, req.Root)
	if err != nil {
		return nil, err
	}
	id := root.ID()
	lost, err := restore.Lost(ctx, d.versions, root, req)
	root.Close()
	if err != nil {
		return nil, err
	}
	if dir != nil && id != *dir {
		return nil, fmt.Errorf("restore: %s: %w (it was replaced while the request waited)", req.Root, rewrite.ErrRootReplaced)
	}
	out := []restore.Result{}
	for _, v := range lost {
		res, err := d.RestoreVersion(ctx, restore.Request{Root: req.Root, Path: v.Path, Version: v.N}, &id)
		if err != nil {
			return out, err
		}
		out = append(out, res)
	}
	return out, nil
}

func (d *Daemon) versionRoutes(mux *http.ServeMux) {
	mux.HandleFunc("GET /v1/versions", d.handleVersions)
	mux.HandleFunc("GET /v1/versions/content", d.handleVersionContent)
	mux.HandleFunc("POST /v1/versions/restore", d.handleRestoreVersion)
	mux.HandleFunc("POST /v1/versions/restore-deleted", d.handleRestoreLost)
}

// versionPath opens the root holding ?path= (absolute) for a caller with
// right (needRoot), and gives the path relative to it. The caller closes
// the root.
func (d *Daemon) versionPath(w http.ResponseWriter, r *http.Request, path, right string) (*policy.Store, *confine.Root, string, bool) {
	path = filepath.Clean(path)
	if !filepath.IsAbs(path) {
		writeErr(w, http.StatusBadRequest, fmt.Errorf("path %q must be absolute", path))
		return nil, nil, "", false
	}
	_, rootPath := d.storeFor(path)
	if rootPath == "" {
		rootPath = path // answered by needRoot: not a root of any store
	}
	s, root, ok := d.needRoot(w, r, rootPath, right)
	if !ok {
		return nil, nil, "", false
	}
	rel, err := root.Rel(path)
	if err != nil || rel == "." {
		root.Close()
		writeErr(w, http.StatusBadRequest, fmt.Errorf("%s is not a file under a root", path))
		return nil, nil, "", false
	}
	return s, root, rel, true
}

// handleVersions lists the versions of ?path=, or with ?root= and no path
// the files of that root that have versions.
func (d *Daemon) handleVersions(w http.ResponseWriter, r *http.Request) {
	if _, _, ok := mirror.SplitHostPath(r.URL.Query().Get("path")); ok && d.fleet != nil {
		d.handleHostVersions(w, r, false)
		return
	}
	if rootPath := r.URL.Query().Get("root"); rootPath != "" && r.URL.Query().Get("path") == "" {
		_, root, ok := d.needRoot(w, r, rootPath, policy.RightRead)
		if !ok {
			return
		}
		files, err := d.versions.Files(r.Context(), root.ID())
		root.Close()
		if err != nil {
			writeErr(w, http.StatusInternalServerError, err)
			return
		}
		if files == nil {
			files = []string{}
		}
		writeJSON(w, http.StatusOK, files)
		return
	}
	_, root, rel, ok := d.versionPath(w, r, r.URL.Query().Get("path"), policy.RightRead)
	if !ok {
		return
	}
	defer root.Close()
	vs, err := d.versions.List(r.Context(), root.ID(), rel)
	if err != nil {
		writeErr(w, http.StatusInternalServerError, err)
		return
	}
	if vs == nil {
		vs = []versions.Version{}
	}
	writeJSON(w, http.StatusOK, vs)
}

func (d *Daemon) handleVersionContent(w http.ResponseWriter, r *http.Request) {
	if _, _, ok := mirror.SplitHostPath(r.URL.Query().Get("path")); ok && d.fleet != nil {
		d.handleHostVersions(w, r, true)
		return
	}
	_, root, rel, ok := d.versionPath(w, r, r.URL.Query().Get("path"), policy.RightRead)
	if !ok {
		return
	}
	defer root.Close()
	n, err := strconv.ParseInt(r.URL.Query().Get("n"), 10, 64)
	if err != nil || n < 1 {
		writeErr(w, http.StatusBadRequest, fmt.Errorf("n must be a version number (1, 2, ...), not %q", clip(r.URL.Query().Get("n"))))
		return
	}
	v, data, err := d.versions.Get(r.Context(), root.ID(), rel, n)
	err = restore.Elsewhere(r.Context(), d.versions, root, rel, err)
	switch {
	case errors.Is(err, versions.ErrNoVersion), errors.Is(err, restore.ErrOtherDirectory):
		writeErr(w, http.StatusNotFound, err)
	case err != nil:
		writeErr(w, http.StatusInternalServerError, err)
	default:
		writeJSON(w, http.StatusOK, VersionContent{Version: v, Content: data})
	}
}

// VersionContent is the body of GET /v1/versions/content.
type VersionContent struct {
	versions.Version
	Content []byte `json:"content"` // nil for a deletion
}

// mayRestore checks the undo right and the store's allow_undo.
func (d *Daemon) mayRestore(w http.ResponseWriter, s *policy.Store) bool {
	if !s.AllowUndo {
		writeErr(w, http.StatusForbidden, fmt.Errorf("store %s does not allow undo (allow_undo: false in the policy), and a restore is one", s.Name))
		return false
	}
	return true
}

func (d *Daemon) handleRestoreVersion(w http.ResponseWriter, r *http.Request) {
	var req restore.Request
	if err := d.decodeBody(w, r, &req); err != nil {
		writeErr(w, http.StatusBadRequest, err)
		return
	}
	s, root, rel, ok := d.versionPath(w, r, req.Path, policy.RightUndo)
	if !ok {
		return
	}
	id := root.ID()
	root.Close()
	if !d.mayRestore(w, s) {
		return
	}
	res, err := d.RestoreVersion(r.Context(), restore.Request{Root: id.Path, Path: rel, Version: req.Version, At: req.At}, &id)
	switch {
	case errors.Is(err, versions.ErrNoVersion), errors.Is(err, restore.ErrOtherDirectory):
		writeErr(w, http.StatusNotFound, err)
	case err != nil:
		writeErr(w, http.StatusUnprocessableEntity, err)
	default:
		writeJSON(w, http.StatusOK, res)
	}
}

func (d *Daemon) handleRestoreLost(w http.ResponseWriter, r *http.Request) {
	var req restore.LostRequest
	if err := d.decodeBody(w, r, &req); err != nil {
		writeErr(w, http.StatusBadRequest, err)
		return
	}
	req.Root = filepath.Clean(req.Root)
	s, root, ok := d.needRoot(w, r, req.Root, policy.RightUndo)
	if !ok {
		return
	}
	id := root.ID()
	root.Close()
	if !d.mayRestore(w, s) {
		return
	}
	res, err := d.RestoreLost(r.Context(), req, &id)
	if err != nil {
		writeErr(w, http.StatusUnprocessableEntity, err)
		return
	}
	writeJSON(w, http.StatusOK, res)
}

// Versions lists the versions of root/rel (the MCP tool memory_versions).
func (d *Daemon) Versions(ctx context.Context, root *confine.Root, rel string) ([]versions.Version, error) {
	return d.versions.List(ctx, root.ID(), rel)
}

// VersionContent returns version n of root/rel.
func (d *Daemon) VersionContent(ctx context.Context, root *confine.Root, rel string, n int64) ([]byte, error) {
	_, data, err := d.versions.Get(ctx, root.ID(), rel, n)
	return data, restore.Elsewhere(ctx, d.versions, root, rel, err)
}
