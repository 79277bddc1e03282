package daemon

import (
	"errors"
	"fmt"
	"net/http"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/memwatch/memwatch/confine"
	"github.com/memwatch/memwatch/control"
	"github.com/memwatch/memwatch/fleet/mirror"
	"github.com/memwatch/memwatch/policy"
	"github.com/memwatch/memwatch/recall"
	"github.com/memwatch/memwatch/spool"
)

// Recall and show over the control socket: what memwatch recall and
// memwatch show do with the state directory, for a user who cannot read
// it (memwatch's state is private to memwatch). The daemon answers from
// the roots the caller reaches (auth.go), each opened as every job opens
// it and served only if the directory opened is one the caller reaches,
// with the spool's lines held for those very directories: exactly what
// SO_PEERCRED allows, nothing of a root another user owns.

// MaxRecallRoots bounds the roots one recall over the socket opens; a
// caller with more names one (root=) or a store (store=).
const MaxRecallRoots = 1000

// RecallResponse is the body of GET /v1/recall.
type RecallResponse = control.RecallResponse

// handleRecall answers GET /v1/recall?q=QUERY[&root=PATH][&store=NAME]
// [&limit=N][&scope=LABELS][&sort=relevance|newest][&explain=1].
func (d *Daemon) handleRecall(w http.ResponseWriter, r *http.Request) {
	if !d.needRight(w, r, policy.RightRead) {
		return
	}
	q := r.URL.Query()
	query, err := recall.ParseQuery(q.Get("q"))
	if err != nil {
		writeErr(w, http.StatusBadRequest, err)
		return
	}
	opts := recall.Options{Limit: recall.DefaultLimit, Explain: q.Get("explain") == "1", Sort: q.Get("sort")}
	if s := q.Get("limit"); s != "" {
		if opts.Limit, err = strconv.Atoi(s); err != nil || opts.Limit < 1 || opts.Limit > 100_000 {
			writeErr(w, http.StatusBadRequest, fmt.Errorf("limit must be a number from 1 to 100000, not %q", clip(s)))
			return
		}
	}
	switch opts.Sort {
	case "", recall.SortRelevance, recall.SortNewest:
	default:
		writeErr(w, http.StatusBadRequest, fmt.Errorf("sort must be relevance or newest, not %q", opts.Sort))
		return
	}
	if s := q.Get("scope"); s != "" && s != "all" {
		opts.Labels = strings.Split(s, ",")
	}
	caller := CallerOf(r.Context())
	var res RecallResponse
	if root := q.Get("root"); root != "" {
		s, opened, ok := d.needRoot(w, r, root, policy.RightRead)
		if !ok {
			return
		}
		defer opened.Close()
		srcs, ok := SearchSources(s)
		if !ok {
			writeErr(w, http.StatusBadRequest, fmt.Errorf("%s is a root of store %s, whose layout (%s) has nothing to search", root, s.Name, s.Layout))
			return
		}
		opts.Roots = []recall.Root{{Root: opened, Sources: srcs}}
	} else {
		opts.NameRoots = true
		ids, err := d.watch.RootIDs(r.Context())
		if err != nil {
			writeErr(w, http.StatusServiceUnavailable, err)
			return
		}
		var stores []*policy.Store
		for _, s := range d.Policy().Stores {
			if _, ok := SearchSources(s); ok && (q.Get("store") == "" || s.Name == q.Get("store")) && caller.ReachesStore(s) {
				stores = append(stores, s)
			}
		}
		if q.Get("store") != "" && len(stores) == 0 {
			writeErr(w, http.StatusNotFound, fmt.Errorf("no searchable store named %q that %s reaches", q.Get("store"), caller.Name))
			return
		}
		for _, s := range stores {
			srcs, _ := SearchSources(s)
			for _, id := range ids[s.Name] {
				if !caller.Reaches(s, id) {
					continue
				}
				if len(opts.Roots) >= MaxRecallRoots {
					res.Skipped++
					continue
				}
				root, err := d.openRoot(s, id.Path)
				if err != nil {
					continue // refused: the watcher reports it
				}
				if !caller.Reaches(s, root.ID()) {
					root.Close() // not the directory discovery found: not the caller's
					continue
				}
				defer root.Close()
				name := filepath.Base(id.Path)
				if len(stores) > 1 {
					name = s.Name + "/" + name
				}
				opts.Roots = append(opts.Roots, recall.Root{Root: root, Sources: srcs, Name: name, Store: s.Name})
			}
		}
	}
	// A central node: the hosts' copies the caller reaches, with its own
	// roots (or one host's alone: host=).
	if host := q.Get("host"); d.fleet != nil && q.Get("root") == "" && q.Get("store") == "" && caller.ReachesFleet() {
		if host != "" {
			opts.Roots = nil
		}
		fr, done := FleetRoots(d.cfg.StateDir, caller, host)
		defer done()
		if room := MaxRecallRoots - len(opts.Roots); len(fr) > room {
			res.Skipped += len(fr) - room
			fr = fr[:room]
		}
		opts.Roots = append(opts.Roots, fr...)
	} else if host != "" {
		writeErr(w, http.StatusNotFound, fmt.Errorf("no host %q that %s reaches is followed here", host, caller.Name))
		return
	}
	opts.Index = filepath.Join(d.cfg.StateDir, IndexDir)
	opts.Generation = func(root *confine.Root, rel string) int64 { return d.spool.LiveGen(r.Context(), root.ID(), rel) }
	opts.Held = d.spool.SearchHeld
	res.Roots = len(opts.Roots)
	results, stats, err := recall.Search(r.Context(), query, opts)
	if err != nil {
		writeErr(w, http.StatusUnprocessableEntity, err)
		return
	}
	if results == nil {
		results = []recall.Result{}
	}
	res.Results, res.Stats = results, stats
	writeJSON(w, http.StatusOK, res)
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
	_, root, ok := d.needRoot(w, r, q.Get("root"), policy.RightRead)
	if !ok {
		return
	}
	defer root.Close()
	lines, err := d.spool.Show(r.Context(), root, c)
	if errors.Is(err, spool.ErrUnknownLog) {
		if file, ok, ferr := spool.ShowFile(r.Context(), root, c); ok {
			lines, err = file, ferr
		}
	}
	switch {
	case errors.Is(err, spool.ErrUnknownLog), errors.Is(err, spool.ErrNoSuchLine):
		writeErr(w, http.StatusNotFound, err)
	case err != nil:
		writeErr(w, http.StatusUnprocessableEntity, err)
	default:
		writeJSON(w, http.StatusOK, ShowResponse{Root: root.Path(), Path: c.Path, Lines: lines})
	}
}
