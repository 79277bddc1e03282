package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"sync"
	"syscall"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/memwatch/memwatch/control"
)

// memwatch mcp for a user of a daemon whose state is not theirs (the
// system service's, root's and 0700): the daemon serves the tools, over
// its control socket, within what the kernel says this user is (her
// roots only, as every request of hers), bound to the root or project of
// the directory the agent started the server in. This process is a
// proxy: a server on stdio offering what the daemon's session offers,
// each call sent on to it.

// mcpProxy is one stdio session's link to the daemon's /mcp.
type mcpProxy struct {
	ctl      *control.Client
	endpoint string
	log      *slog.Logger
	// hc dials as the control client dials (it refuses a socket another
	// user answers), with no overall timeout: a tool call is bounded by
	// the daemon. One for the proxy's life: a session made again reuses
	// its connections, not a new transport's.
	hc *http.Client

	mu   sync.Mutex // guards sess: replaced when the daemon ended it
	sess *mcp.ClientSession
}

// newMCPProxy opens a session with the daemon on ctl's socket, bound to
// root (when given) or to what cwd is in.
func newMCPProxy(ctx context.Context, ctl *control.Client, root, cwd string, log *slog.Logger) (*mcpProxy, error) {
	q := url.Values{}
	if root != "" {
		q.Set("root", root)
	} else if cwd != "" {
		q.Set("cwd", cwd)
	}
	socket := ctl.Socket
	hc := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return control.Dial(ctx, socket)
	}}}
	p := &mcpProxy{ctl: ctl, endpoint: "http://memwatch/mcp?" + q.Encode(), log: log, hc: hc}
	sess, err := p.connect(ctx)
	if err != nil {
		return nil, err
	}
	p.sess = sess
	return p, nil
}

// connect opens a session with the daemon.
func (p *mcpProxy) connect(ctx context.Context) (*mcp.ClientSession, error) {
	t := &mcp.StreamableClientTransport{Endpoint: p.endpoint, HTTPClient: p.hc, DisableStandaloneSSE: true, MaxRetries: 2}
	c := mcp.NewClient(&mcp.Implementation{Name: "memwatch-mcp", Version: version}, nil)
	sess, err := c.Connect(ctx, t, nil)
	if err != nil {
		var op *net.OpError
		if errors.As(err, &op) {
			return nil, fmt.Errorf("%w (no answer on %s): %v", control.ErrNoDaemon, p.ctl.Socket, err)
		}
		return nil, fmt.Errorf("the daemon on %s refused the MCP session: %w", p.ctl.Socket, err)
	}
	return sess, nil
}

// session is the daemon's session now.
func (p *mcpProxy) session() *mcp.ClientSession {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.sess
}

// again opens a new session once the daemon ended old (it restarted, or
// ended this user's least recently used session for a new one).
func (p *mcpProxy) again(ctx context.Context, old *mcp.ClientSession) (*mcp.ClientSession, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.sess != old {
		return p.sess, nil
	}
	sess, err := p.connect(ctx)
	if err != nil {
		return nil, err
	}
	old.Close()
	p.sess = sess
	p.log.Debug("mcp: a new session with the daemon", "endpoint", p.endpoint)
	return sess, nil
}

// call runs fn on the daemon's session, on a new one if the daemon
// ended it.
func call[T any](ctx context.Context, p *mcpProxy, fn func(*mcp.ClientSession) (T, error)) (T, error) {
	sess := p.session()
	res, err := fn(sess)
	if errors.Is(err, mcp.ErrSessionMissing) || errors.Is(err, mcp.ErrConnectionClosed) {
		if sess, err = p.again(ctx, sess); err != nil {
			return res, err
		}
		res, err = fn(sess)
	}
	return res, err
}

// server is the stdio server: the daemon session's instructions, tools
// and resources, each call sent on.
func (p *mcpProxy) server(ctx context.Context) (*mcp.Server, error) {
	sess := p.session()
	init := sess.InitializeResult()
	opts := &mcp.ServerOptions{Capabilities: &mcp.ServerCapabilities{}}
	if init != nil {
		opts.Instructions = init.Instructions
	}
	srv := mcp.NewServer(&mcp.Implementation{Name: "memwatch", Version: version}, opts)
	for tool, err := range sess.Tools(ctx, nil) {
		if err != nil {
			return nil, fmt.Errorf("list the daemon's MCP tools: %w", err)
		}
		name := tool.Name
		if err := addProxyTool(srv, tool, func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			return call(ctx, p, func(s *mcp.ClientSession) (*mcp.CallToolResult, error) {
				return s.CallTool(ctx, &mcp.CallToolParams{Name: name, Arguments: req.Params.Arguments})
			})
		}); err != nil {
			return nil, err
		}
	}
	if init != nil && init.Capabilities != nil && init.Capabilities.Resources != nil {
		for res, err := range sess.Resources(ctx, nil) {
			if err != nil {
				break // the tools are what matters; resources are a convenience
			}
			uri := res.URI
			srv.AddResource(res, func(ctx context.Context, req *mcp.ReadResourceRequest) (*mcp.ReadResourceResult, error) {
				return call(ctx, p, func(s *mcp.ClientSession) (*mcp.ReadResourceResult, error) {
					return s.ReadResource(ctx, &mcp.ReadResourceParams{URI: uri})
				})
			})
		}
	}
	return srv, nil
}

// addProxyTool adds a tool as the daemon describes it (a schema the SDK
// refuses is said, not a crash).
func addProxyTool(srv *mcp.Server, t *mcp.Tool, h mcp.ToolHandler) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("the daemon's MCP tool %s: %v", t.Name, p)
		}
	}()
	srv.AddTool(t, h)
	return nil
}

// Close ends the daemon's session.
func (p *mcpProxy) Close() error {
	return p.session().Close()
}

// stateIsOthers reports whether the state directory belongs to another
// user than this process's (the system service's, as a user): its
// journal and spool are the daemon's to read.
func stateIsOthers(dir string) bool {
	fi, err := os.Stat(dir)
	if err != nil {
		return false
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	return ok && int(st.Uid) != os.Geteuid()
}
