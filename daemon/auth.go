package daemon

// Who may use the control API, and for what: access.Caller says; the
// daemon authenticates each request (the socket's peer, or a bearer token
// over TCP) and checks its rights and roots here.

import (
	"context"
	"fmt"
	"net/http"
	"path/filepath"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	dto "github.com/prometheus/client_model/go"

	"github.com/memwatch/memwatch/access"
	"github.com/memwatch/memwatch/confine"
	"github.com/memwatch/memwatch/control"
	"github.com/memwatch/memwatch/layout"
	"github.com/memwatch/memwatch/policy"
)

// authenticate wraps the API: every request but /healthz gets its caller
// (from the socket peer, or from its bearer token over TCP).
func (d *Daemon) authenticate(tcp bool, adminToken string, h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/healthz" {
			h.ServeHTTP(w, r)
			return
		}
		var c *access.Caller
		if tcp {
			ui := strings.HasPrefix(r.URL.Path, "/ui/")
			got, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
			if !ok && ui {
				if ck, err := r.Cookie(access.UITokenCookie); err == nil {
					got, ok = ck.Value, true
				}
			}
			if ok {
				c = access.TokenCaller(adminToken, d.Policy().Control.Tokens, got)
			}
			switch {
			case c == nil && ui && (r.URL.Path == "/ui/login" || r.Method == http.MethodGet && strings.HasPrefix(r.URL.Path, "/ui/static/")):
				// The sign-in page, and the pages' own style and script
				// (no memory in them): a page that refuses is styled too.
				c = access.Anonymous()
			case c == nil && ui && r.Method == http.MethodGet:
				http.Redirect(w, r, "/ui/login", http.StatusSeeOther)
				return
			case c == nil:
				writeErr(w, http.StatusUnauthorized, fmt.Errorf("missing or wrong bearer token"))
				return
			}
		} else {
			c = access.SocketCaller(r)
		}
		d.share(c, w, r.WithContext(access.WithCaller(r.Context(), c)), h)
	})
}

// forbid answers 403 with why, logging it once per client per minute.
func (d *Daemon) forbid(w http.ResponseWriter, r *http.Request, why string) {
	c := access.CallerOf(r.Context())
	msg := fmt.Sprintf("forbidden for %s: %s", c.Name, why)
	d.shares.Refused.Say(c.Name, "control API request refused", "client", c.Name, "method", r.Method, "path", r.URL.Path, "why", why)
	writeErr(w, http.StatusForbidden, fmt.Errorf("%s", msg))
}

// needRight checks that the caller holds right; otherwise it answers 403.
func (d *Daemon) needRight(w http.ResponseWriter, r *http.Request, right string) bool {
	if access.CallerOf(r.Context()).Has(right) {
		return true
	}
	d.forbid(w, r, fmt.Sprintf("it has no %s right", right))
	return false
}

// storeOf finds the store a root belongs to in the policy in force.
func (d *Daemon) storeOf(root string) *policy.Store {
	for _, s := range d.Policy().Stores {
		if s.MatchesRoot(root) {
			return s
		}
	}
	return nil
}

// needRoot turns a root a client names into the root itself: it opens it
// as every job does (OpenRoot: from its glob's fixed part, no symbolic
// link followed, as its owner) and checks that the caller reaches the
// directory it opened, with right; otherwise it answers 403 (404 for a
// root of no store, 409 for one memwatch refuses). The caller closes the
// root; what it serves is what was captured under root.ID().
func (d *Daemon) needRoot(w http.ResponseWriter, r *http.Request, path, right string) (*policy.Store, *confine.Root, bool) {
	if !d.needRight(w, r, right) {
		return nil, nil, false
	}
	path = filepath.Clean(path)
	s := d.storeOf(path)
	if s == nil {
		// A name that names nothing is the request's mistake (exit 2).
		writeErr(w, http.StatusBadRequest, fmt.Errorf("%s is %w (memwatch status lists them)", path, control.ErrNotARoot))
		return nil, nil, false
	}
	if c := access.CallerOf(r.Context()); !c.HasStore(s) && !d.foundFor(r.Context(), c, s, path) {
		// Said the same whether the directory exists or not, is another
		// user's or no root at all: no caller learns of what it may not read.
		d.forbid(w, r, fmt.Sprintf("it does not reach %s: no root of store %s it owns is there (memwatch status lists them)", path, s.Name))
		return nil, nil, false
	}
	root, err := d.openRoot(s, path)
	if err != nil {
		if layout.IsRefusal(err) {
			d.forbid(w, r, fmt.Sprintf("%s is not served: %v", path, err))
		} else {
			writeErr(w, http.StatusBadRequest, fmt.Errorf("%s (store %s): %w", path, s.Name, err))
		}
		return nil, nil, false
	}
	if !access.CallerOf(r.Context()).Reaches(s, root.ID()) {
		root.Close()
		d.forbid(w, r, fmt.Sprintf("it does not reach %s (store %s): its uid does not own that root, and no token scope names it", path, s.Name))
		return nil, nil, false
	}
	return s, root, true
}

// foundFor reports whether path is a root of store s the watcher found
// that c reaches (by the directory found there: its owner).
func (d *Daemon) foundFor(ctx context.Context, c *access.Caller, s *policy.Store, path string) bool {
	ids, err := d.watch.RootIDs(ctx)
	if err != nil {
		return false
	}
	for _, id := range ids[s.Name] {
		if id.Path == path && c.Reaches(s, id) {
			return true
		}
	}
	return false
}

// handleMetrics serves /metrics: everything to the administrator; to
// anyone else the series of the stores it reaches (and the build info).
func (d *Daemon) handleMetrics(w http.ResponseWriter, r *http.Request) {
	if !d.needRight(w, r, policy.RightRead) {
		return
	}
	caller := access.CallerOf(r.Context())
	if caller.IsAdmin() {
		promhttp.HandlerFor(d.metrics.Reg, promhttp.HandlerOpts{}).ServeHTTP(w, r)
		return
	}
	reach := map[string]bool{}
	for _, s := range d.Policy().Stores {
		if caller.HasStore(s) {
			reach[s.Name] = true
			continue
		}
		for _, id := range s.RootIDs() {
			if caller.Reaches(s, id) {
				reach[s.Name] = true
				break
			}
		}
	}
	g := prometheus.GathererFunc(func() ([]*dto.MetricFamily, error) {
		fams, err := d.metrics.Reg.Gather()
		var out []*dto.MetricFamily
		for _, f := range fams {
			if f.GetName() == "memwatch_build_info" {
				out = append(out, f)
				continue
			}
			var keep []*dto.Metric
			for _, m := range f.GetMetric() {
				for _, l := range m.GetLabel() {
					if l.GetName() == "store" && reach[l.GetValue()] {
						keep = append(keep, m)
						break
					}
				}
			}
			if len(keep) > 0 {
				f.Metric = keep
				out = append(out, f)
			}
		}
		return out, err
	})
	promhttp.HandlerFor(g, promhttp.HandlerOpts{}).ServeHTTP(w, r)
}
