package mcpserver

import (
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// sessions counts the /mcp sessions open now, by client (a uid on the
// socket, a token): each session has its own server, which holds its one
// session while it is open. No client holds more than perClient at once:
// its new session past that ends its least recently used one. Past max in
// all, the client holding the most gives up its least recently used when
// it holds more than an even share; else the new session is refused. So
// one user's flood of sessions costs only that user's. Safe for
// concurrent use.
type sessions struct {
	mu             sync.Mutex
	max, perClient int
	servers        []*tracked
	// said is when each client's refusal or eviction was last logged
	// (once a minute), count how many came since.
	said  map[string]time.Time
	count map[string]int
	log   *slog.Logger
}

type tracked struct {
	srv    *mcp.Server
	client string
	at     time.Time // made
	used   time.Time // its last request
	// evicted: ended to make room; a session that connects after is
	// ended as its first request ends (ended).
	evicted bool
}

// sessionGrace is how long a new server counts before its session shows.
const sessionGrace = 10 * time.Second

// open reports whether t's session is open (or about to be).
func (t *tracked) open(now time.Time) bool {
	if now.Sub(t.at) < sessionGrace {
		return true
	}
	for range t.srv.Sessions() {
		return true
	}
	return false
}

// close ends t's session.
func (t *tracked) close() {
	for sess := range t.srv.Sessions() {
		sess.Close()
	}
}

// admit reports whether client may open a new session, ending one to make
// room where its share allows (see sessions); why says why not.
func (ss *sessions) admit(client string) (ok bool, why string) {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	now := time.Now()
	live := ss.servers[:0]
	for _, t := range ss.servers {
		if t.open(now) {
			live = append(live, t)
		}
	}
	clear(ss.servers[len(live):])
	ss.servers = live
	held := map[string]int{}
	for _, t := range ss.servers {
		held[t.client]++
	}
	switch {
	case ss.perClient > 0 && held[client] >= ss.perClient:
		ss.evict(client)
	case ss.max > 0 && len(ss.servers) >= ss.max:
		most := ""
		for c, n := range held {
			if n > held[most] {
				most = c
			}
		}
		if fair := max(1, ss.max/max(1, len(held))); held[most] <= fair {
			return false, fmt.Sprintf("memwatch serves at most %d MCP sessions at once (mcp.max_sessions), each client an even share of them; close one, or wait for an idle one to end", ss.max)
		}
		ss.evict(most)
	}
	return true, ""
}

// evict ends the session client used least recently. Called with mu held.
func (ss *sessions) evict(client string) {
	k := -1
	for i, t := range ss.servers {
		if t.client == client && (k < 0 || t.used.Before(ss.servers[k].used)) {
			k = i
		}
	}
	if k < 0 {
		return
	}
	t := ss.servers[k]
	ss.servers = append(ss.servers[:k], ss.servers[k+1:]...)
	t.evicted = true
	t.close()
	ss.say(client, "mcp: a session ended to make room: the client holds its share of sessions, or the most of them", "share", ss.perClient, "max_sessions", ss.max)
}

// add counts a new session's server as client's.
func (ss *sessions) add(client string, srv *mcp.Server) *tracked {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	now := time.Now()
	t := &tracked{srv: srv, client: client, at: now, used: now}
	ss.servers = append(ss.servers, t)
	return t
}

// made ends t's session if it was evicted while it connected.
func (ss *sessions) made(t *tracked) {
	ss.mu.Lock()
	evicted := t.evicted
	ss.mu.Unlock()
	if evicted {
		t.close()
	}
}

// newSession is the request that opens a session: the server made for it
// (the SDK asks for the server twice while it opens one, and once more for
// every later request, where the probe serves: it only reads the protocol
// versions every server shares).
type newSession struct {
	srv *mcp.Server
	t   *tracked
	err error
}

type newSessionKey struct{}

// touch marks session sid used now and returns the protocol version it
// negotiated ("": not found).
func (ss *sessions) touch(sid string) string {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	for _, t := range ss.servers {
		for sess := range t.srv.Sessions() {
			if sess.ID() == sid {
				t.used = time.Now()
				if ip := sess.InitializeParams(); ip != nil {
					return ip.ProtocolVersion
				}
				return ""
			}
		}
	}
	return ""
}

// refused logs a refused session, once a minute per client.
func (ss *sessions) refused(client, why string) {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	ss.say(client, "mcp: session refused", "why", why)
}

// say logs msg about client once a minute per client and message, with
// how many times it happened since. Called with mu held.
func (ss *sessions) say(client, msg string, args ...any) {
	if ss.said == nil || len(ss.said) > 10_000 {
		ss.said, ss.count = map[string]time.Time{}, map[string]int{}
	}
	key := client + "\x00" + msg
	ss.count[key]++
	now := time.Now()
	if now.Sub(ss.said[key]) < time.Minute {
		return
	}
	n := ss.count[key]
	ss.said[key], ss.count[key] = now, 0
	if ss.log != nil {
		ss.log.Warn(msg, append([]any{"client", client, "times", n, "said_once_per", time.Minute}, args...)...)
	}
}
