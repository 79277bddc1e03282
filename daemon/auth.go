package daemon

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	dto "github.com/prometheus/client_model/go"

	"github.com/memwatch/memwatch/confine"
	"github.com/memwatch/memwatch/control"
	"github.com/memwatch/memwatch/layout"
	"github.com/memwatch/memwatch/policy"
)

// Who may use the control API, and for what.
//
// On the unix socket the kernel says who the peer is (SO_PEERCRED): root
// (or memwatch's own user) is the administrator, with every right on every
// store; any other user reaches the roots its uid owns (or a store acting
// as it, user:), to read, trigger and compact them and to undo memwatch's
// changes there where the store allows undo (allow_undo). Over TCP a
// request carries a bearer token: control.token_file's is the
// administrator's; each of control.tokens reaches its stores and its
// owners' roots with its rights (read, write, undo). Every route, /mcp and
// /metrics included, answers only within the caller's reach; a refusal is
// 403 naming what is missing, logged once per client and reason.

// Caller is who sent a request and what it may do.
type Caller struct {
	Name  string // for messages: "root", "uid 1001", "token alice-agent"
	admin bool
	// peer: the kernel says who it is (a socket peer), not a token.
	peer   bool
	uids   map[int]bool    // owners whose roots it reaches
	stores map[string]bool // stores it reaches whole
	rights map[string]bool
	// hosts are the hosts of the fleet it reaches on a central node: the
	// owners' uids there (-1: every owner).
	hosts map[string]map[int]bool
}

// Admin is the administrator: every store, every right.
func Admin(name string) *Caller { return &Caller{Name: name, admin: true} }

// Owner reports whether c may see the credentials its roots hold (show
// --reveal): a user the kernel names on the socket, or root; a token
// never (the page, an agent over HTTP).
func (c *Caller) Owner() bool { return c.peer }

// IsAdmin reports whether c has every right on every store.
func (c *Caller) IsAdmin() bool { return c.admin }

// Has reports whether c holds right.
func (c *Caller) Has(right string) bool { return c.admin || c.rights[right] }

// Reaches reports whether c may see and act on the root id of store s:
// its whole store, or a root one of its owners owns. id is what memwatch
// found or opened (confine.GlobRoots, confine.Open: no symbolic link
// followed below the glob's fixed part), never a path looked up again, and
// what is served for it is what was captured under that very ID.
func (c *Caller) Reaches(s *policy.Store, id confine.ID) bool {
	if c.admin || c.stores[s.Name] {
		return true
	}
	return c.uids[id.UID]
}

// ReachesHost reports whether c may see any of a host's memory on a
// central node.
func (c *Caller) ReachesHost(host string) bool {
	return c.admin || len(c.hosts[host]) > 0
}

// ReachesHostRoot reports whether c may see a root of a host that uid
// owns there (as the host recorded it).
func (c *Caller) ReachesHostRoot(host string, uid int) bool {
	return c.admin || c.hosts[host][-1] || c.hosts[host][uid]
}

// ReachesFleet reports whether c may see any host's memory.
func (c *Caller) ReachesFleet() bool { return c.admin || len(c.hosts) > 0 }

// ReachesStore reports whether c may see any of store s.
func (c *Caller) ReachesStore(s *policy.Store) bool {
	return c.admin || c.stores[s.Name] || len(c.uids) > 0
}

type callerKey struct{}

// WithCaller marks ctx with the request's caller.
func WithCaller(ctx context.Context, c *Caller) context.Context {
	return context.WithValue(ctx, callerKey{}, c)
}

// CallerOf is the caller of a request; a context without one (memwatch's
// own work, a command run in-process) is the administrator.
func CallerOf(ctx context.Context) *Caller {
	if c, ok := ctx.Value(callerKey{}).(*Caller); ok {
		return c
	}
	return Admin("memwatch")
}

type peerKey struct{}

// peerContext records a unix socket peer's uid on its connection, as the
// kernel gives it (peerUID, per operating system).
func peerContext(ctx context.Context, c net.Conn) context.Context {
	uid := PeerUID(c)
	if uid < 0 {
		return ctx
	}
	return context.WithValue(ctx, peerKey{}, uid)
}

// socketCaller is the caller of a request on the unix socket.
func socketCaller(r *http.Request) *Caller {
	uid, ok := r.Context().Value(peerKey{}).(int)
	if !ok {
		return &Caller{Name: "unknown peer"} // reaches nothing
	}
	if uid == 0 || uid == os.Geteuid() {
		c := Admin(fmt.Sprintf("uid %d", uid))
		c.peer = true
		return c
	}
	return &Caller{Name: fmt.Sprintf("uid %d", uid), peer: true, uids: map[int]bool{uid: true},
		rights: map[string]bool{policy.RightRead: true, policy.RightWrite: true, policy.RightUndo: true}}
}

// tokenCaller finds the caller a bearer token stands for: the
// administrator's token, or one of the policy's scoped tokens (compared
// by SHA-256, in constant time).
func tokenCaller(admin string, tokens []policy.Token, got string) *Caller {
	if admin != "" && subtle.ConstantTimeCompare([]byte(got), []byte(admin)) == 1 {
		return Admin("admin token")
	}
	sum := sha256.Sum256([]byte(got))
	h := hex.EncodeToString(sum[:])
	var found *policy.Token
	for i := range tokens {
		if subtle.ConstantTimeCompare([]byte(h), []byte(tokens[i].SHA256)) == 1 {
			found = &tokens[i]
		}
	}
	if found == nil {
		return nil
	}
	c := &Caller{Name: "token " + found.Name, uids: map[int]bool{}, stores: map[string]bool{}, rights: map[string]bool{}}
	for _, s := range found.Stores {
		c.stores[s] = true
	}
	for _, o := range found.Owners {
		if uid, err := policy.OwnerUID(o); err == nil {
			c.uids[uid] = true
		}
	}
	for _, h := range found.Hosts {
		host, uid, err := policy.HostScope(h)
		if err != nil {
			continue
		}
		if c.hosts == nil {
			c.hosts = map[string]map[int]bool{}
		}
		if c.hosts[host] == nil {
			c.hosts[host] = map[int]bool{}
		}
		if uid >= 0 || len(found.Owners) == 0 {
			c.hosts[host][uid] = true
			continue
		}
		// A host with the token's owners: their roots there.
		for o := range c.uids {
			c.hosts[host][o] = true
		}
	}
	for _, r := range found.Rights {
		c.rights[r] = true
	}
	return c
}

// UITokenCookie holds a browser's token for the review pages (/ui/) on
// the TCP listener: a browser cannot send a bearer header on its own, so
// the pages' login form keeps the token in this cookie (HttpOnly,
// SameSite=Strict, path /ui/). Only /ui/ reads it: the JSON API still
// wants the header, so no other site can drive it with the cookie.
const UITokenCookie = "memwatch_token"

// Anonymous is the caller of a request that proved nothing: it reaches
// nothing and holds no right (the review pages' login form is all it gets).
func Anonymous() *Caller { return &Caller{Name: "anonymous"} }

// authenticate wraps the API: every request but /healthz gets its caller
// (from the socket peer, or from its bearer token over TCP).
func (d *Daemon) authenticate(tcp bool, adminToken string, h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/healthz" {
			h.ServeHTTP(w, r)
			return
		}
		var c *Caller
		if tcp {
			ui := strings.HasPrefix(r.URL.Path, "/ui/")
			got, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
			if !ok && ui {
				if ck, err := r.Cookie(UITokenCookie); err == nil {
					got, ok = ck.Value, true
				}
			}
			if ok {
				c = tokenCaller(adminToken, d.Policy().Control.Tokens, got)
			}
			switch {
			case c == nil && ui && (r.URL.Path == "/ui/login" || r.Method == http.MethodGet && strings.HasPrefix(r.URL.Path, "/ui/static/")):
				// The sign-in page, and the pages' own style and script
				// (no memory in them): a page that refuses is styled too.
				c = Anonymous()
			case c == nil && ui && r.Method == http.MethodGet:
				http.Redirect(w, r, "/ui/login", http.StatusSeeOther)
				return
			case c == nil:
				writeErr(w, http.StatusUnauthorized, fmt.Errorf("missing or wrong bearer token"))
				return
			}
		} else {
			c = socketCaller(r)
		}
		d.share(c, w, r.WithContext(WithCaller(r.Context(), c)), h)
	})
}

// forbid answers 403 with why, logging it once per client per minute.
func (d *Daemon) forbid(w http.ResponseWriter, r *http.Request, why string) {
	c := CallerOf(r.Context())
	msg := fmt.Sprintf("forbidden for %s: %s", c.Name, why)
	d.shares.refused.say(c.Name, "control API request refused", "client", c.Name, "method", r.Method, "path", r.URL.Path, "why", why)
	writeErr(w, http.StatusForbidden, fmt.Errorf("%s", msg))
}

// needRight checks that the caller holds right; otherwise it answers 403.
func (d *Daemon) needRight(w http.ResponseWriter, r *http.Request, right string) bool {
	if CallerOf(r.Context()).Has(right) {
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
	if c := CallerOf(r.Context()); !c.IsAdmin() && !c.stores[s.Name] && !d.foundFor(r.Context(), c, s, path) {
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
	if !CallerOf(r.Context()).Reaches(s, root.ID()) {
		root.Close()
		d.forbid(w, r, fmt.Sprintf("it does not reach %s (store %s): its uid does not own that root, and no token scope names it", path, s.Name))
		return nil, nil, false
	}
	return s, root, true
}

// foundFor reports whether path is a root of store s the watcher found
// that c reaches (by the directory found there: its owner).
func (d *Daemon) foundFor(ctx context.Context, c *Caller, s *policy.Store, path string) bool {
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
	caller := CallerOf(r.Context())
	if caller.IsAdmin() {
		promhttp.HandlerFor(d.metrics.reg, promhttp.HandlerOpts{}).ServeHTTP(w, r)
		return
	}
	reach := map[string]bool{}
	for _, s := range d.Policy().Stores {
		if caller.stores[s.Name] {
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
		fams, err := d.metrics.reg.Gather()
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
