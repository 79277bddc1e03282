package daemon

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"path/filepath"
	"strconv"

	"github.com/memwatch/memwatch/layout/apprecords"
	"github.com/memwatch/memwatch/policy"
)

// The seed's admin API for app-records stores. Deletes run in the root's
// job slot, so they never race a compaction, and are journaled like any
// change (undo restores them). A caller reaches the databases its uid owns
// or its token names (access.Caller): read to list, write to delete.

type memoryJSON struct {
	ID        int64  `json:"id"`
	Content   string `json:"content"`
	CreatedAt string `json:"createdAt"`
	UpdatedAt string `json:"updatedAt"`
}

func (d *Daemon) recordRoutes(mux *http.ServeMux) {
	mux.HandleFunc("GET /v1/stores/{store}/apps/{app}/memories", d.handleListMemories)
	mux.HandleFunc("DELETE /v1/stores/{store}/apps/{app}/memories", d.handleDeleteMemories)
	mux.HandleFunc("DELETE /v1/stores/{store}/apps/{app}/memories/{id}", d.handleDeleteMemories)
	// The seed's short paths, when there is exactly one app-records store.
	mux.HandleFunc("GET /apps/{app}/memories", d.handleListMemories)
	mux.HandleFunc("DELETE /apps/{app}/memories", d.handleDeleteMemories)
	mux.HandleFunc("DELETE /apps/{app}/memories/{id}", d.handleDeleteMemories)
}

// recordsRoot finds the store and database of a request.
func (d *Daemon) recordsRoot(r *http.Request) (*storeRT, string, error) {
	name := r.PathValue("store")
	d.mu.RLock()
	var rt *storeRT
	n := 0
	for _, s := range d.policy.Stores {
		if s.Layout != "app-records" {
			continue
		}
		n++
		if name == "" || s.Name == name {
			rt = d.stores[s.Name]
		}
	}
	d.mu.RUnlock()
	switch {
	case name == "" && n != 1:
		return nil, "", fmt.Errorf("the short /apps paths need exactly one app-records store (there are %d); use /v1/stores/{store}/apps/{app}/memories", n)
	case rt == nil:
		return nil, "", fmt.Errorf("no app-records store named %q", name)
	}
	roots := rt.store.Roots()
	if q := r.URL.Query().Get("root"); q != "" {
		for _, root := range roots {
			if root == filepath.Clean(q) {
				return rt, root, nil
			}
		}
		return nil, "", fmt.Errorf("store %s has no database %s", rt.store.Name, q)
	}
	if len(roots) != 1 {
		return nil, "", fmt.Errorf("store %s has %d databases; name one with ?root=PATH", rt.store.Name, len(roots))
	}
	return rt, roots[0], nil
}

func (d *Daemon) handleListMemories(w http.ResponseWriter, r *http.Request) {
	rt, root, err := d.recordsRoot(r)
	if err != nil {
		writeErr(w, http.StatusNotFound, err)
		return
	}
	_, froot, ok := d.needRoot(w, r, root, policy.RightRead)
	if !ok {
		return
	}
	defer froot.Close()
	db, err := apprecords.Open(r.Context(), froot, apprecords.OptionsOf(rt.store).Table, false)
	if err != nil {
		writeErr(w, http.StatusServiceUnavailable, err)
		return
	}
	defer db.Close()
	rs, err := db.Records(r.Context(), r.PathValue("app"))
	if err != nil {
		writeErr(w, http.StatusServiceUnavailable, err)
		return
	}
	out := []memoryJSON{}
	for _, m := range rs {
		out = append(out, memoryJSON{ID: m.ID, Content: m.Content, CreatedAt: m.CreatedAt, UpdatedAt: m.UpdatedAt})
	}
	writeJSON(w, http.StatusOK, map[string]any{"memories": out})
}

func (d *Daemon) handleDeleteMemories(w http.ResponseWriter, r *http.Request) {
	rt, root, err := d.recordsRoot(r)
	if err != nil {
		writeErr(w, http.StatusNotFound, err)
		return
	}
	_, froot, ok := d.needRoot(w, r, root, policy.RightWrite)
	if !ok {
		return
	}
	defer froot.Close()
	var ids []int64
	reason := "purged through the admin API"
	if s := r.PathValue("id"); s != "" {
		id, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			writeErr(w, http.StatusBadRequest, fmt.Errorf("bad memory id %q", s))
			return
		}
		ids, reason = []int64{id}, "deleted through the admin API"
	}
	app := r.PathValue("app")
	n := 0
	err = d.engine.Exclusive(r.Context(), rt.store.Name, root, "admin-delete", func(ctx context.Context) error {
		var err error
		n, err = apprecords.Remove(ctx, d.db, rt.store.Name, froot, apprecords.OptionsOf(rt.store).Table, app, ids, reason)
		return err
	})
	switch {
	case errors.Is(err, apprecords.ErrNotFound):
		writeErr(w, http.StatusNotFound, err)
	case err != nil:
		writeErr(w, http.StatusServiceUnavailable, err)
	case ids != nil:
		writeJSON(w, http.StatusOK, map[string]any{"success": true})
	default:
		writeJSON(w, http.StatusOK, map[string]any{"success": true, "deletedCount": n})
	}
}
