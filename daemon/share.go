package daemon

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/memwatch/memwatch/access"
)

// Each client's share of the daemon.
//
// The daemon runs as root for every user of the machine; no one of them
// may take so much of it that another waits. A client is who the kernel
// says is on the socket (its uid), or its token, or its address over TCP;
// the administrator (root, memwatch's own user, the admin token) is never
// bounded here.
//
//   - Work: a request runs only with a slot of its client's
//     (DefaultClientRequests at once) and one of everyone's
//     (DefaultTotalRequests): a search, a show, a page of the journal, a
//     tool call over MCP. A request that finds none waits up to
//     DefaultShareWait, then gets 429 with Retry-After; a client that
//     leaves while its request waits or runs ends it (the request's
//     context). What one request may cost is bounded where it is asked
//     (control.MaxResults, MaxAnswer bytes): slots times that is the
//     daemon's memory for requests.
//   - Connections: at most DefaultClientConns open per client, and
//     everyone's within a share of the descriptors the process may open,
//     so jobs always find the descriptors they need (connLimit). One past
//     the bound is closed as it is accepted.
//   - Time: a request's headers within 5 s, its body within
//     requestReadTimeout, its answer within requestWriteTimeout, and an
//     idle keep-alive connection closed after idleTimeout. The event
//     streams (/mcp's GET, the review page's events) are exempt from the
//     read and write bounds: they send a heartbeat, and count as a
//     connection.

// Defaults of the shares.
const (
	DefaultClientRequests = 2
	DefaultTotalRequests  = 8
	DefaultShareWait      = 10 * time.Second
	DefaultClientConns    = 64
	// connReserve is the share of the process's descriptors connections
	// may never take (jobs, the watcher, the spool's held logs, SQLite).
	connReserve = 0.5
	// maxConns bounds everyone's connections whatever the descriptors.
	maxConns = 4096

	requestReadTimeout  = 30 * time.Second
	requestWriteTimeout = 3 * time.Minute // an undo may wait for a running job (the client waits 2 min)
	idleTimeout         = 60 * time.Second
)

// shares hands out request slots. Safe for concurrent use.
type shares struct {
	perClient int
	wait      time.Duration
	all       chan struct{}
	mu        sync.Mutex
	clients   map[string]*clientSlots
	refused   refusalLog
}

// clientSlots are one client's request slots; users counts the requests
// that hold or wait for one (the entry goes when it is 0).
type clientSlots struct {
	ch    chan struct{}
	users int
}

func newShares(perClient, total int, wait time.Duration, log *slog.Logger) *shares {
	return &shares{perClient: perClient, wait: wait, all: make(chan struct{}, total), clients: map[string]*clientSlots{}, refused: refusalLog{log: log, every: time.Minute}}
}

// acquire waits for a slot of client's and one of everyone's; ok is false
// when none came within the wait, or ctx ended.
func (s *shares) acquire(ctx context.Context, client string) (release func(), ok bool) {
	s.mu.Lock()
	cs := s.clients[client]
	if cs == nil {
		cs = &clientSlots{ch: make(chan struct{}, s.perClient)}
		s.clients[client] = cs
	}
	cs.users++
	s.mu.Unlock()
	leave := func() {
		s.mu.Lock()
		if cs.users--; cs.users == 0 {
			delete(s.clients, client)
		}
		s.mu.Unlock()
	}
	t := time.NewTimer(s.wait)
	defer t.Stop()
	select {
	case cs.ch <- struct{}{}:
	case <-ctx.Done():
		leave()
		return nil, false
	case <-t.C:
		leave()
		return nil, false
	}
	select {
	case s.all <- struct{}{}:
	case <-ctx.Done():
		<-cs.ch
		leave()
		return nil, false
	case <-t.C:
		<-cs.ch
		leave()
		return nil, false
	}
	return func() {
		<-s.all
		<-cs.ch
		leave()
	}, true
}

// isStream reports whether a request is an event stream: long-lived by
// design, kept alive by its heartbeats.
func isStream(r *http.Request) bool {
	return r.Method == http.MethodGet && (r.URL.Path == "/mcp" || r.URL.Path == "/ui/events")
}

// share runs a request within its client's share (see above): the
// administrator's as they come, an event stream with no deadline, any
// other request once it has a slot, or 429.
func (d *Daemon) share(c *access.Caller, w http.ResponseWriter, r *http.Request, h http.Handler) {
	rc := http.NewResponseController(w)
	if isStream(r) {
		// Deadlines of their own: the stream's heartbeat fails on a
		// client that is gone.
		_ = rc.SetReadDeadline(time.Time{})
		_ = rc.SetWriteDeadline(time.Time{})
		h.ServeHTTP(w, r)
		return
	}
	_ = rc.SetWriteDeadline(time.Now().Add(requestWriteTimeout))
	if r.Body != nil && r.Body != http.NoBody {
		// The body within requestReadTimeout (a POST whose body never
		// comes holds nothing longer); then no deadline, so a request
		// that runs long is not cancelled by one (net/http cancels a
		// request whose connection's read fails).
		_ = rc.SetReadDeadline(time.Now().Add(requestReadTimeout))
		r.Body = &bodyRead{ReadCloser: r.Body, rc: rc}
	}
	if c.IsAdmin() {
		h.ServeHTTP(w, r)
		return
	}
	release, ok := d.shares.acquire(r.Context(), c.Name)
	if !ok {
		if r.Context().Err() != nil {
			return // the client left
		}
		d.shares.refused.say(c.Name, "control API request refused: this client runs as many requests at once as it may",
			"client", c.Name, "path", r.URL.Path, "at_once", d.shares.perClient)
		w.Header().Set("Retry-After", "1")
		writeErr(w, http.StatusTooManyRequests, fmt.Errorf("%s runs %d requests at once already (and memwatch serves every user): try again in a moment", c.Name, d.shares.perClient))
		return
	}
	defer release()
	h.ServeHTTP(w, r)
}

// bodyRead lifts the read deadline once the body is read whole.
type bodyRead struct {
	io.ReadCloser
	rc   *http.ResponseController
	done bool
}

func (b *bodyRead) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if err == io.EOF && !b.done {
		b.done = true
		_ = b.rc.SetReadDeadline(time.Time{})
	}
	return n, err
}

// refusalLog says a kind of refusal once per client per period: a client
// refused a thousand times in a second is one line.
type refusalLog struct {
	log   *slog.Logger
	every time.Duration
	mu    sync.Mutex
	last  map[string]time.Time
	count map[string]int
}

// say logs msg for client unless it was said within the period; the line
// counts the refusals since the last.
func (l *refusalLog) say(client, msg string, args ...any) {
	l.mu.Lock()
	now := time.Now()
	if l.last == nil {
		l.last, l.count = map[string]time.Time{}, map[string]int{}
	}
	if len(l.last) > 10_000 {
		clear(l.last) // a flood of names: said again, never held without bound
		clear(l.count)
	}
	key := client + "\x00" + msg
	l.count[key]++
	if now.Sub(l.last[key]) < l.every {
		l.mu.Unlock()
		return
	}
	n := l.count[key]
	l.last[key], l.count[key] = now, 0
	l.mu.Unlock()
	if l.log != nil {
		l.log.Warn(msg, append(args, "refused", n, "said_once_per", l.every)...)
	}
}

// connLimit bounds a listener's connections per client and in all: a
// connection past either is closed as it is accepted. client says whose a
// connection is ("" for the administrator, never bounded).
type connLimit struct {
	net.Listener
	perClient, total int
	client           func(net.Conn) string
	refused          *refusalLog
	mu               sync.Mutex
	open             map[string]int
	all              int
}

// newConnLimit wraps l. total is DefaultClientConns' share of the
// descriptors the process may open (connReserve kept for its work).
func newConnLimit(l net.Listener, perClient int, client func(net.Conn) string, refused *refusalLog) *connLimit {
	total := maxConns
	var rl syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &rl); err == nil && rl.Cur > 0 {
		total = min(total, max(perClient, int(float64(rl.Cur)*(1-connReserve))))
	}
	return &connLimit{Listener: l, perClient: perClient, total: total, client: client, refused: refused, open: map[string]int{}}
}

// Accept returns the next connection within the bounds.
func (l *connLimit) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		who := l.client(c)
		if who == "" {
			return c, nil // the administrator's
		}
		l.mu.Lock()
		over := l.open[who] >= l.perClient || l.all >= l.total
		if !over {
			l.open[who]++
			l.all++
		}
		l.mu.Unlock()
		if over {
			c.Close()
			l.refused.say(who, "connection refused: this client holds as many connections as it may",
				"client", who, "per_client", l.perClient, "total", l.total)
			continue
		}
		return &limitedConn{Conn: c, done: func() {
			l.mu.Lock()
			if l.open[who]--; l.open[who] <= 0 {
				delete(l.open, who)
			}
			l.all--
			l.mu.Unlock()
		}}, nil
	}
}

// limitedConn gives its place back once, when closed.
type limitedConn struct {
	net.Conn
	once sync.Once
	done func()
}

// NetConn is the connection it wraps (control.PeerUID asks the kernel
// about it).
func (c *limitedConn) NetConn() net.Conn { return c.Conn }

func (c *limitedConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(c.done)
	return err
}

// socketClient is whose a socket connection is: its peer's uid, "" for
// the administrator's (root, memwatch's own user).
func socketClient(self int) func(net.Conn) string {
	return func(c net.Conn) string {
		uid := PeerUID(c)
		if uid == 0 || uid == self {
			return ""
		}
		return "uid " + strconv.Itoa(uid)
	}
}

// addrClient is whose a TCP connection is: its remote address's host.
func addrClient(c net.Conn) string {
	host, _, err := net.SplitHostPort(c.RemoteAddr().String())
	if err != nil {
		return c.RemoteAddr().String()
	}
	return "address " + host
}
