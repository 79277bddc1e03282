package daemon

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"path/filepath"
	"strconv"

	"github.com/memwatch/memwatch/confine"
	"github.com/memwatch/memwatch/control"
	"github.com/memwatch/memwatch/fleet/mirror"
	"github.com/memwatch/memwatch/policy"
	"github.com/memwatch/memwatch/restore"
	"github.com/memwatch/memwatch/rewrite"
	"github.com/memwatch/memwatch/versions"
)

// Every version of an agent's memory files is captured on the background
// queue as the watcher sees it written (versions/): the memory files are
// the layout's searchable files that are not session logs (those are in
// the spool) nor memwatch's own archives. A deletion or a large shrink by
// the agent is logged at WARN, counted, listed by memwatch status, and
// with restore_deleted in the policy a deleted file is put back at once.

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
		writeErr(w, http.StatusBadRequest, fmt.Errorf("n must be a version number (1, 2, ...), not %q", control.Clip(r.URL.Query().Get("n"))))
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
