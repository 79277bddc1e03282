// Package share gives each client its share of the daemon: request
// slots, connections and time.
package share

import (
	"context"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/memwatch/memwatch/control"
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
//     so jobs always find the descriptors they need (ConnLimit). One past
//     the bound is closed as it is accepted.
//   - Time: a request's headers within 5 s, its body within
//     RequestReadTimeout, its answer within RequestWriteTimeout, and an
//     idle keep-alive connection closed after IdleTimeout. The event
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

	RequestReadTimeout  = 30 * time.Second
	RequestWriteTimeout = 3 * time.Minute // an undo may wait for a running job (the client waits 2 min)
	IdleTimeout         = 60 * time.Second
)

// Shares hands out request slots. Safe for concurrent use.
type Shares struct {
	PerClient int
	wait      time.Duration
	all       chan struct{}
	mu        sync.Mutex
	clients   map[string]*clientSlots
	Refused   RefusalLog
}

// clientSlots are one client's request slots; users counts the requests
// that hold or wait for one (the entry goes when it is 0).
type clientSlots struct {
	ch    chan struct{}
	users int
}

func New(perClient, total int, wait time.Duration, log *slog.Logger) *Shares {
	return &Shares{PerClient: perClient, wait: wait, all: make(chan struct{}, total), clients: map[string]*clientSlots{}, Refused: RefusalLog{log: log, every: time.Minute}}
}

// Acquire waits for a slot of client's and one of everyone's; ok is false
// when none came within the wait, or ctx ended.
func (s *Shares) Acquire(ctx context.Context, client string) (release func(), ok bool) {
	s.mu.Lock()
	cs := s.clients[client]
	if cs == nil {
		cs = &clientSlots{ch: make(chan struct{}, s.PerClient)}
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

// IsStream reports whether a request is an event stream: long-lived by
// design, kept alive by its heartbeats.
func IsStream(r *http.Request) bool {
	return r.Method == http.MethodGet && (r.URL.Path == "/mcp" || r.URL.Path == "/ui/events")
}

// BodyRead lifts the read deadline once the body is read whole.
type BodyRead struct {
	io.ReadCloser
	RC   *http.ResponseController
	done bool
}

func (b *BodyRead) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if err == io.EOF && !b.done {
		b.done = true
		_ = b.RC.SetReadDeadline(time.Time{})
	}
	return n, err
}

// RefusalLog says a kind of refusal once per client per period: a client
// refused a thousand times in a second is one line.
type RefusalLog struct {
	log   *slog.Logger
	every time.Duration
	mu    sync.Mutex
	last  map[string]time.Time
	count map[string]int
}

// Say logs msg for client unless it was said within the period; the line
// counts the refusals since the last.
func (l *RefusalLog) Say(client, msg string, args ...any) {
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

// ConnLimit bounds a listener's connections per client and in all: a
// connection past either is closed as it is accepted. client says whose a
// connection is ("" for the administrator, never bounded).
type ConnLimit struct {
	net.Listener
	perClient, total int
	client           func(net.Conn) string
	refused          *RefusalLog
	mu               sync.Mutex
	open             map[string]int
	all              int
}

// NewConnLimit wraps l. total is DefaultClientConns' share of the
// descriptors the process may open (connReserve kept for its work).
func NewConnLimit(l net.Listener, perClient int, client func(net.Conn) string, refused *RefusalLog) *ConnLimit {
	total := maxConns
	var rl syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &rl); err == nil && rl.Cur > 0 {
		total = min(total, max(perClient, int(float64(rl.Cur)*(1-connReserve))))
	}
	return &ConnLimit{Listener: l, perClient: perClient, total: total, client: client, refused: refused, open: map[string]int{}}
}

// Accept returns the next connection within the bounds.
func (l *ConnLimit) Accept() (net.Conn, error) {
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
			l.refused.Say(who, "connection refused: this client holds as many connections as it may",
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

// SocketClient is whose a socket connection is: its peer's uid, "" for
// the administrator's (root, memwatch's own user).
func SocketClient(self int) func(net.Conn) string {
	return func(c net.Conn) string {
		uid := control.PeerUID(c)
		if uid == 0 || uid == self {
			return ""
		}
		return "uid " + strconv.Itoa(uid)
	}
}

// AddrClient is whose a TCP connection is: its remote address's host.
func AddrClient(c net.Conn) string {
	host, _, err := net.SplitHostPort(c.RemoteAddr().String())
	if err != nil {
		return c.RemoteAddr().String()
	}
	return "address " + host
}
