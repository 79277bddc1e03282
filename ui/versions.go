package ui

import (
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"path/filepath"
	"slices"
	"strconv"

	"github.com/memwatch/memwatch/access"
	"github.com/memwatch/memwatch/policy"
	"github.com/memwatch/memwatch/restore"
	"github.com/memwatch/memwatch/versions"
)

// versionsData is the versions page of one memory file: every version
// memwatch kept (the agent's writes and its own), newest first, a diff of
// one to the one before, and Restore.
type versionsData struct {
	Store    *policy.Store
	Root     string
	Path     string
	Versions []versions.Version
	Shown    int64 // the version whose diff is shown (0: the newest)
	Diff     *diffView
	NoDiff   string
	Restored int64 // a restore just made: its journal record
	Err      string
	CanUndo  bool // the store allows restores (allow_undo)
}

// versionsPage answers GET versions?root=ROOT&path=REL[&n=N].
func (s *Server) versionsPage(r *http.Request) (view, error) {
	ctx := r.Context()
	q := r.URL.Query()
	store, opened, err := s.openRoot(ctx, q.Get("root"))
	if err != nil {
		return view{}, err
	}
	defer opened.Close()
	rel := filepath.Clean(q.Get("path"))
	if q.Get("path") == "" || !filepath.IsLocal(rel) {
		return view{}, badRequest("give the file's path in its root (path=memory/MEMORY.md)")
	}
	if s.cfg.Versions == nil {
		return view{}, notFound("no versions are kept here")
	}
	vs, err := s.cfg.Versions.List(ctx, opened.ID(), rel)
	if err != nil {
		return view{}, err
	}
	if len(vs) == 0 {
		return view{}, notFound("no versions of %s: it is not a memory file of a store with versions, or memwatch has not seen it written", rel)
	}
	slices.Reverse(vs) // newest first
	d := versionsData{Store: store, Root: opened.Path(), Path: rel, Versions: vs, Err: q.Get("error"), CanUndo: store.AllowUndo}
	d.Restored, _ = strconv.ParseInt(q.Get("restored"), 10, 64)
	d.Shown, _ = strconv.ParseInt(q.Get("n"), 10, 64)
	i := 0
	for k, v := range vs {
		if v.N == d.Shown {
			i = k
		}
	}
	d.Shown = vs[i].N
	content := func(v versions.Version) ([]byte, error) {
		if v.Deleted() {
			return nil, nil
		}
		return s.cfg.Versions.Content(ctx, v.SHA)
	}
	after, err := content(vs[i])
	var before []byte
	if err == nil && i+1 < len(vs) {
		before, err = content(vs[i+1])
	}
	page, _ := strconv.Atoi(q.Get("page"))
	switch {
	case err != nil:
		d.NoDiff = "the content of a version is no longer kept (" + err.Error() + ")"
	default:
		v := unified(before, after, isJSONL(rel), page)
		d.Diff = &v
	}
	return view{Template: "versions", Title: rel + " — versions", Data: d}, nil
}

// restoreVersion puts a version back (memwatch restore PATH@N), through
// the daemon: the restore is journaled and undoable like any change.
func (s *Server) restoreVersion(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	c := access.CallerOf(ctx)
	if !sameOrigin(r) || r.PostFormValue("csrf") != s.csrf(c) {
		s.fail(w, r, http.StatusForbidden, errors.New("the restore did not come from this page (its CSRF token or origin is wrong): reload the page and press Restore again"))
		return
	}
	root, rel := r.PostFormValue("root"), filepath.Clean(r.PostFormValue("path"))
	if !filepath.IsLocal(rel) {
		s.fail(w, r, http.StatusBadRequest, fmt.Errorf("bad path %q: give the file's path in its root", r.PostFormValue("path")))
		return
	}
	n, err := strconv.ParseInt(r.PostFormValue("n"), 10, 64)
	if err != nil || n < 1 {
		s.fail(w, r, http.StatusBadRequest, fmt.Errorf("bad version %q", r.PostFormValue("n")))
		return
	}
	_, opened, err := s.openRoot(ctx, root)
	if err != nil {
		var he httpError
		code := http.StatusForbidden
		if errors.As(err, &he) {
			code = he.code
		}
		s.fail(w, r, code, err)
		return
	}
	root = opened.Path()
	opened.Close()
	back := fmt.Sprintf("%sversions?root=%s&path=%s", s.cfg.Prefix, url.QueryEscape(root), url.QueryEscape(rel))
	var res restore.Result
	err = ErrNoDaemon
	if s.cfg.API != nil {
		err = s.cfg.API(ctx, http.MethodPost, "/v1/versions/restore", restore.Request{Path: filepath.Join(root, rel), Version: n}, &res)
	}
	if errors.Is(err, ErrNoDaemon) {
		err = fmt.Errorf("no daemon runs to restore it: start it, or run memwatch restore %s@%d", filepath.Join(root, rel), n)
	}
	if err != nil {
		s.log.Info("restore from the review page refused", "path", filepath.Join(root, rel), "version", n, "caller", c.Name, "err", err)
		http.Redirect(w, r, back+"&error="+url.QueryEscape(err.Error()), http.StatusSeeOther)
		return
	}
	if res.Journal == 0 {
		http.Redirect(w, r, back+"&error="+url.QueryEscape(fmt.Sprintf("the file is already as version %d: nothing to restore", n)), http.StatusSeeOther)
		return
	}
	s.log.Info("restore from the review page", "path", filepath.Join(root, rel), "version", n, "caller", c.Name, "journal", res.Journal)
	http.Redirect(w, r, fmt.Sprintf("%s&restored=%d", back, res.Journal), http.StatusSeeOther)
}
