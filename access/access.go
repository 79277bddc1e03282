// Package access says who called the daemon and what they may reach.
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
package access

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"fmt"
	"net"
	"net/http"
	"os"

	"github.com/memwatch/memwatch/confine"
	"github.com/memwatch/memwatch/control"
	"github.com/memwatch/memwatch/policy"
)

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

// HasStore reports whether c reaches store s whole (every root of it,
// whoever owns them).
func (c *Caller) HasStore(s *policy.Store) bool { return c.admin || c.stores[s.Name] }

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

// PeerContext records a unix socket peer's uid on its connection, as the
// kernel gives it (peerUID, per operating system).
func PeerContext(ctx context.Context, c net.Conn) context.Context {
	uid := control.PeerUID(c)
	if uid < 0 {
		return ctx
	}
	return context.WithValue(ctx, peerKey{}, uid)
}

// SocketCaller is the caller of a request on the unix socket.
func SocketCaller(r *http.Request) *Caller {
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

// TokenCaller finds the caller a bearer token stands for: the
// administrator's token, or one of the policy's scoped tokens (compared
// by SHA-256, in constant time).
func TokenCaller(admin string, tokens []policy.Token, got string) *Caller {
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
