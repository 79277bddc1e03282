// Package mcpserver serves the seeds' memory tools over the Model Context
// Protocol, so any MCP-capable agent (Claude Code, Codex, Cursor, nanobot,
// OpenClaw, ...) can call them: memory_status, memory_snapshot and
// memory_stamp for a now-history memory.md; memory_list, memory_read,
// memory_write, memory_append and memory_patch for facts and episodes;
// history_search for HISTORY*.md; recall_memory for a session's notes and
// log; records_list and records_context for an app's records; and, on every
// layout, memory_changes (the journal) and, when the policy allows it,
// memory_undo.
//
// A tool is a thin shell over what the CLI runs: the same layout functions,
// the same confined root (a path outside the root, or a symlink leading out,
// is refused before anything is read), the same safe rewrite and journal for
// writes, so a tool's text output is the CLI's output. Errors are tool
// results with isError set, never a crash: a handler that panics is turned
// into an error result too.
//
// The server is bound to one root (memwatch mcp --root DIR, or /mcp?root=DIR
// on the control API), when only that root's layout's tools are listed; or it
// serves every root of the policy, when each tool takes a root argument that
// must name one of them (memory_roots lists them).
package mcpserver

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"path/filepath"
	"runtime/debug"
	"slices"
	"strings"
	"time"

	"github.com/google/jsonschema-go/jsonschema"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/memwatch/memwatch/access"
	"github.com/memwatch/memwatch/confine"
	"github.com/memwatch/memwatch/policy"
	"github.com/memwatch/memwatch/rewrite"
	"github.com/memwatch/memwatch/scope"
	"github.com/memwatch/memwatch/secrets"
	"github.com/memwatch/memwatch/spool"
	"github.com/memwatch/memwatch/undo"
	"github.com/memwatch/memwatch/versions"
)

// Config configures a Server.
type Config struct {
	// Policy returns the policy in force. It is called for every session and
	// every tool call, so a daemon's reload is seen at once.
	Policy func() *policy.Policy
	// Root binds the server to this root of the policy (an absolute path).
	Root string
	// Version is memwatch's version, sent to clients.
	Version string
	// Rewriter applies and journals writes; its journal is what
	// memory_changes reads. Nil: no write tools and no memory_changes.
	Rewriter *rewrite.Rewriter
	// Undo reverts a journal record (memory_undo). The tool is offered only
	// when Undo is set and the policy's mcp.allow_undo is true.
	Undo func(ctx context.Context, id int64, force, dryRun bool) (undo.Result, error)
	// Index is the directory of the daemon's recall index; "" searches by
	// scanning.
	Index string
	// Generation gives a session log's live generation (from the spool), so
	// recall cites a log the agent has rewritten as path@N#Lx; may be nil.
	Generation func(ctx context.Context) func(root *confine.Root, rel string) int64
	// Held gives the messages the spool holds beyond the live files
	// (recall.Options.Held); may be nil.
	Held func(ctx context.Context, root *confine.Root, fn func(rel string, gen, line int64, raw []byte) error) error
	// Versions lists the versions memwatch kept of a memory file, and
	// VersionContent returns one's content (memory_versions, read-only); nil:
	// no such tool.
	Versions       func(ctx context.Context, root *confine.Root, rel string) ([]versions.Version, error)
	VersionContent func(ctx context.Context, root *confine.Root, rel string, n int64) ([]byte, error)
	// Now is the clock of memory_stamp; nil is time.Now.
	Now func() time.Time
	// StateDir, on a central node (the policy's fleet:), is where the
	// hosts' copies are: recall_memory searches the hosts the client
	// reaches (fleet.go). "": no such tool.
	StateDir string
	// Cwd, with no Root, is the directory the server was started in (an
	// agent starts its MCP servers in its project's directory): a session
	// binds to the root it is in, or to that project's memory (scope).
	Cwd string
	// Show returns the lines a citation names of a root (the spool's,
	// else the file's): recall_show. Nil: no such tool.
	Show func(ctx context.Context, root *confine.Root, c spool.Citation) ([]spool.Shown, error)
}

// Server builds MCP servers over a policy's roots.
type Server struct {
	cfg      Config
	log      *slog.Logger
	sessions sessions // /mcp sessions open now (Handler)
	// events keeps what /mcp's streams sent, bounded, so a client that
	// lost a stream resumes it with Last-Event-ID (spec 2025-11-25).
	events *mcp.MemoryEventStore
	// scopes remembers what finding a project's files read.
	scopes scope.Cache
}

// grant is what one session's client may do: the roots it reaches and
// whether it may write and undo (see access.Caller). memwatch mcp on stdio
// is its user's own process: it reaches every root of the policy, and the
// kernel decides the rest.
type grant struct {
	who     string
	reaches func(*policy.Store, confine.ID) bool
	// hosts says which hosts' roots (by owner there) it reaches on a
	// central node; nil: none.
	hosts func(host string, uid int) bool
	write bool
	undo  bool
}

// everything is the grant of memwatch mcp on stdio.
var everything = grant{who: "stdio", reaches: func(*policy.Store, confine.ID) bool { return true }, hosts: func(string, int) bool { return true }, write: true, undo: true}

// accessOf is the grant of a caller of the control API.
func accessOf(c *access.Caller) grant {
	a := grant{who: c.Name, reaches: c.Reaches, write: c.Has(policy.RightWrite), undo: c.Has(policy.RightUndo)}
	if c.ReachesFleet() && c.Has(policy.RightRead) {
		a.hosts = c.ReachesHostRoot
	}
	return a
}

// New checks cfg; with cfg.Root it checks that the root is one of the
// policy's.
func New(cfg Config, log *slog.Logger) (*Server, error) {
	if cfg.Policy == nil {
		return nil, errors.New("mcp server: no policy")
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	s := &Server{cfg: cfg, log: log, events: newEventStore()}
	if cfg.Root != "" {
		abs, err := filepath.Abs(cfg.Root)
		if err != nil {
			return nil, fmt.Errorf("mcp --root %s: %w", cfg.Root, err)
		}
		s.cfg.Root = abs
		if _, _, err := s.find(cfg.Policy(), abs); err != nil {
			return nil, err
		}
	}
	return s, nil
}

// MCP builds the server for one session: bound to root (or to the
// configured root when root is ""), with the tools the policy's layouts
// offer.
func (s *Server) MCP(root string) (*mcp.Server, error) {
	return s.mcpFor(root, "", everything)
}

// mcpFor builds a session's server within what a client may do: bound to
// root, or with none, to what the directory cwd (the client's, or the
// one the server started in) is in.
func (s *Server) mcpFor(root, cwd string, a grant) (*mcp.Server, error) {
	p := s.cfg.Policy()
	if root == "" {
		root = s.cfg.Root
	}
	if cwd == "" {
		cwd = s.cfg.Cwd
	}
	b := &builder{s: s, policy: p, access: a}
	if root != "" {
		st, id, err := b.find(p, root)
		if err != nil {
			return nil, err
		}
		b.bound = &binding{store: st, path: filepath.Clean(root), id: id}
	} else if cwd != "" {
		// Started in a project's directory: the root it is in, or the
		// project's one root, is the session's.
		var cands []scope.Candidate
		for _, st := range p.Stores {
			for _, id := range st.RootIDs() {
				if a.reaches(st, id) {
					cands = append(cands, scope.Candidate{Store: st, ID: id})
				}
			}
		}
		sc := scope.Of(cands, filepath.Clean(cwd), func(c scope.Candidate) (*confine.Root, error) { return b.openRoot(c.Store, c.ID.Path, nil) }, &s.scopes)
		if sc.Kind != scope.All && len(sc.Roots) == 1 {
			r := sc.Roots[0]
			b.bound = &binding{store: r.Store, path: r.ID.Path, id: r.ID, fromCwd: true}
		}
		b.project = sc
	}
	instructions := "memwatch maintains this agent's memory files and journals every change. "
	switch {
	case b.bound != nil:
		instructions += fmt.Sprintf("These tools work on %s (a %s root).", b.bound.path, b.bound.store.Layout)
	case b.project.Kind == scope.Project:
		instructions += fmt.Sprintf("recall_memory searches %s; the other tools take a root argument: one of the roots memory_roots lists.", b.project)
	default:
		instructions += "recall_memory searches every memory root you reach; the other tools take a root argument: one of the roots memory_roots lists."
	}
	instructions += " Call recall_memory before answering a question about earlier work."
	srv := mcp.NewServer(&mcp.Implementation{Name: "memwatch", Version: s.cfg.Version},
		&mcp.ServerOptions{Instructions: instructions, Capabilities: &mcp.ServerCapabilities{}})
	b.srv = srv
	b.addTools()
	b.addFleetTool()
	b.addResources()
	srv.AddReceivingMiddleware(b.guard) // added last: the outermost
	return srv, nil
}

// Serve runs one session over t (stdio for memwatch mcp) until the client
// leaves or ctx ends.
func (s *Server) Serve(ctx context.Context, t mcp.Transport) error {
	srv, err := s.MCP("")
	if err != nil {
		return err
	}
	err = srv.Run(ctx, t)
	if ctx.Err() != nil || errors.Is(err, mcp.ErrConnectionClosed) {
		return nil
	}
	return err
}

// Handler serves MCP over Streamable HTTP (the control API's /mcp). A
// session is bound to the root named by the "root" query parameter, when
// given, else to the configured root, else serves every root the caller
// reaches. At most mcp.max_sessions sessions are open at once (a new one
// past it is refused with 503); a session idle for mcp.session_idle ends.
func (s *Server) Handler() http.Handler {
	p := s.cfg.Policy()
	s.sessions.max, s.sessions.perClient, s.sessions.log = p.MCP.MaxSessions, p.MCP.MaxSessionsPerClient, s.log
	probe := mcp.NewServer(&mcp.Implementation{Name: "memwatch", Version: s.cfg.Version}, nil)
	h := mcp.NewStreamableHTTPHandler(func(r *http.Request) *mcp.Server {
		ns, ok := r.Context().Value(newSessionKey{}).(*newSession)
		if !ok {
			return probe // a request of a session open already
		}
		if ns.srv != nil || ns.err != nil {
			return ns.srv
		}
		c := access.CallerOf(r.Context())
		q := r.URL.Query()
		srv, err := s.mcpFor(q.Get("root"), q.Get("cwd"), accessOf(c))
		if err != nil {
			ns.err = err
			s.log.Warn("mcp: refused a session", "client", c.Name, "err", err)
			return nil // 400
		}
		addReconnectionTest(srv)
		ns.srv, ns.t = srv, s.sessions.add(c.Name, srv)
		return srv
	}, &mcp.StreamableHTTPOptions{MaxRequestBodyBytes: maxRequest, SessionTimeout: p.MCP.SessionIdle, EventStore: s.events})
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c := access.CallerOf(r.Context())
		if !c.Has(policy.RightRead) {
			http.Error(w, fmt.Sprintf(`{"error":"forbidden for %s: it has no read right"}`, c.Name), http.StatusForbidden)
			return
		}
		if cwd := r.URL.Query().Get("cwd"); cwd != "" && (!filepath.IsAbs(cwd) || strings.ContainsRune(cwd, 0) || len(cwd) > 4096) {
			http.Error(w, `{"error":"cwd must be an absolute path"}`, http.StatusBadRequest)
			return
		}
		if r.Header.Get("Mcp-Session-Id") == "" && r.Method == http.MethodPost {
			if ok, why := s.sessions.admit(c.Name); !ok {
				s.sessions.refused(c.Name, why)
				http.Error(w, fmt.Sprintf(`{"error":%q}`, why), http.StatusServiceUnavailable)
				return
			}
			ns := &newSession{}
			r = r.WithContext(context.WithValue(r.Context(), newSessionKey{}, ns))
			defer func() {
				if ns.t != nil {
					s.sessions.made(ns.t)
				}
			}()
		}
		if sid := r.Header.Get("Mcp-Session-Id"); sid != "" {
			// The version the session negotiated decides how its streams
			// behave (resumable, with a priming event, from 2025-11-25),
			// whatever older version a request's header names.
			if v := s.sessions.touch(sid); v != "" && v < "2026-07-28" && r.Header.Get("Mcp-Protocol-Version") < v {
				r.Header.Set("Mcp-Protocol-Version", v)
			}
		}
		h.ServeHTTP(w, r)
	})
}

// maxEventBytes bounds the events kept for streams to resume (Last-Event-ID):
// a client that lost its stream gets what it missed while it is within this.
const maxEventBytes = 4 << 20

// newEventStore is the store of the events of /mcp's streams.
func newEventStore() *mcp.MemoryEventStore {
	es := mcp.NewMemoryEventStore(nil)
	es.SetMaxBytes(maxEventBytes)
	return es
}

// addReconnectionTest adds test_reconnection, the tool the MCP conformance
// suite (scenario server-sse-polling) calls to check that a client can
// resume a stream: it closes the call's stream, asking the client to come
// back in retryAfter, and answers after it has (the answer reaches the
// client through the event store, on its GET with Last-Event-ID).
func addReconnectionTest(srv *mcp.Server) {
	mcp.AddTool(srv, &mcp.Tool{Name: "test_reconnection", Description: "Checks that this client resumes an interrupted stream: the server closes the stream of this call, and the answer arrives after the client reconnects. Changes nothing."},
		func(ctx context.Context, req *mcp.CallToolRequest, _ struct{}) (*mcp.CallToolResult, any, error) {
			if extra := req.Extra; extra != nil && extra.CloseSSEStream != nil {
				extra.CloseSSEStream(mcp.CloseSSEStreamArgs{RetryAfter: retryAfter})
				select {
				case <-time.After(2 * retryAfter):
				case <-ctx.Done():
					return nil, nil, ctx.Err()
				}
			}
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "reconnected: this answer came after the stream was closed"}}}, nil, nil
		})
}

// retryAfter is the reconnection delay a closed stream asks for.
const retryAfter = 500 * time.Millisecond

// maxRequest bounds one MCP request over HTTP; over stdio the SDK bounds a
// frame the same way.
const maxRequest = 8 << 20

// binding is a root a session works on: its store, and the directory
// discovery found at its path (a session bound to a root serves that
// directory only, not another that takes its path later).
type binding struct {
	store *policy.Store
	path  string
	id    confine.ID
	// fromCwd: the root was found from the directory the server started
	// in, not named (recall searches the project's memory, which may be
	// some of the root's files).
	fromCwd bool
}

// find returns the store of a root of the policy, and the root's ID as
// discovery finds it (no symbolic link followed).
func (s *Server) find(p *policy.Policy, root string) (*policy.Store, confine.ID, error) {
	if !filepath.IsAbs(root) {
		return nil, confine.ID{}, fmt.Errorf("root %q: give the root's absolute path (memory_roots lists them)", clip(root))
	}
	root = filepath.Clean(root)
	for _, st := range p.Stores {
		if !st.MatchesRoot(root) {
			continue
		}
		for _, id := range st.RootIDs() {
			if id.Path == root {
				return st, id, nil
			}
		}
	}
	return nil, confine.ID{}, fmt.Errorf("root %q is not a root of any store of the policy (memory_roots lists them)", clip(root))
}

// find is Server.find within what the session's client reaches: a root it
// does not reach is answered like one that is no root at all.
func (b *builder) find(p *policy.Policy, root string) (*policy.Store, confine.ID, error) {
	st, id, err := b.s.find(p, root)
	if err != nil {
		return nil, id, err
	}
	if !b.access.reaches(st, id) {
		return nil, id, fmt.Errorf("root %q is not a root %s may use (memory_roots lists them)", clip(root), b.access.who)
	}
	return st, id, nil
}

// openRoot opens a root as every job does (policy.Store.OpenRoot) and serves it
// only if the directory it opened is one the client reaches and, with
// want, the very directory the session found (want's device and inode):
// the decision is made on what was opened, never on a path looked up again.
func (b *builder) openRoot(st *policy.Store, path string, want *confine.ID) (*confine.Root, error) {
	root, err := st.OpenRoot(path)
	if err != nil {
		return nil, err
	}
	id := root.ID()
	if !b.access.reaches(st, id) || want != nil && id != *want {
		root.Close()
		return nil, fmt.Errorf("root %q is not a root %s may use: the directory there is not the one it was (memory_roots lists them)", clip(path), b.access.who)
	}
	return root, nil
}

// builder adds the tools of one session's server.
type builder struct {
	s      *Server
	policy *policy.Policy
	access grant
	bound  *binding
	// project is the scope of the directory the server started in (Kind
	// "" when it was given none).
	project scope.Scope
	srv     *mcp.Server
}

// serves says whether a tool for these layouts belongs on this server: the
// bound root's layout, or any layout of the policy.
func (b *builder) serves(layouts []string) bool {
	if layouts == nil {
		return true
	}
	if b.bound != nil {
		return slices.Contains(layouts, b.bound.store.Layout)
	}
	for _, st := range b.policy.Stores {
		if slices.Contains(layouts, st.Layout) {
			return true
		}
	}
	return false
}

// target is the root a tool call works on, opened with its store's checks.
type target struct {
	store *policy.Store
	path  string
	root  *confine.Root
}

// open resolves a call's root: the bound one, or the root argument, which
// must be a root of the policy whose layout the tool serves.
func (b *builder) open(args json.RawMessage, tool string, layouts []string) (*target, error) {
	st, path := (*policy.Store)(nil), ""
	var want *confine.ID
	if b.bound != nil {
		st, path, want = b.bound.store, b.bound.path, &b.bound.id
	} else {
		var a struct {
			Root string `json:"root"`
		}
		_ = json.Unmarshal(args, &a) // the schema has checked the arguments
		if a.Root == "" {
			return nil, errors.New("root is required: one of the roots memory_roots lists")
		}
		var err error
		if st, _, err = b.find(b.s.cfg.Policy(), a.Root); err != nil {
			return nil, err
		}
		path = filepath.Clean(a.Root)
	}
	if layouts != nil && !slices.Contains(layouts, st.Layout) {
		return nil, fmt.Errorf("%s works on %s roots; %s is a %s root", tool, strings.Join(layouts, " and "), path, st.Layout)
	}
	root, err := b.openRoot(st, path, want)
	if err != nil {
		return nil, err
	}
	return &target{store: st, path: path, root: root}, nil
}

// handler is a tool's work on its target: the text the agent reads, and
// the structured result when the tool has one.
type handler[In, Out any] func(ctx context.Context, t *target, in In) (string, Out, error)

// add registers a tool whose input schema comes from In (with the root
// argument when the server is not bound) and whose output schema comes
// from Out (none when Out is any).
func add[In, Out any](b *builder, t *mcp.Tool, layouts []string, schema func(*jsonschema.Schema), h handler[In, Out]) {
	if !b.serves(layouts) {
		return
	}
	in, err := jsonschema.For[In](nil)
	if err != nil {
		panic(fmt.Sprintf("mcp tool %s: input schema: %v", t.Name, err)) // a programming error, caught by every test
	}
	if schema != nil {
		schema(in)
	}
	if b.bound == nil {
		if in.Properties == nil {
			in.Properties = map[string]*jsonschema.Schema{}
		}
		in.Properties["root"] = &jsonschema.Schema{Type: "string", Description: "The memory root to work on: an absolute path, one of those memory_roots lists."}
		in.Required = append([]string{"root"}, in.Required...)
	}
	t.InputSchema = in
	name := t.Name
	mcp.AddTool(b.srv, t, func(ctx context.Context, req *mcp.CallToolRequest, input In) (res *mcp.CallToolResult, out Out, err error) {
		defer b.called(name, time.Now(), &res, &err)
		tg, err := b.open(req.Params.Arguments, name, layouts)
		if err != nil {
			return nil, out, err
		}
		defer tg.root.Close()
		text, out, err := h(ctx, tg, input)
		if err != nil {
			return nil, out, err
		}
		// No tool hands an agent (and its model provider) a credential.
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: secrets.Masked(text)}}}, out, nil
	})
}

// called ends a tool call (deferred by its handler): a panic is logged
// and answered as an error, an error is clipped, the call is logged.
func (b *builder) called(name string, start time.Time, res **mcp.CallToolResult, err *error) {
	if p := recover(); p != nil {
		b.s.log.Error("mcp: tool panicked", "tool", name, "panic", p, "stack", string(debug.Stack()))
		*res, *err = nil, fmt.Errorf("%s failed inside memwatch (a bug; the log has the details): %v", name, p)
	}
	if *err != nil {
		*err = errors.New(clipError((*err).Error()))
	}
	b.s.log.Debug("mcp: tool call", "tool", name, "took", time.Since(start), "err", *err)
}

// guard keeps one request from taking the server down: a call with no
// arguments gets {} (the SDK applies schema defaults into the arguments
// object and panics on a missing one), and a panic anywhere in handling a
// request is logged and answered as an error.
func (b *builder) guard(next mcp.MethodHandler) mcp.MethodHandler {
	return func(ctx context.Context, method string, req mcp.Request) (res mcp.Result, err error) {
		if r, ok := req.(*mcp.CallToolRequest); ok && r.Params != nil {
			if a := bytes.TrimSpace(r.Params.Arguments); len(a) == 0 || string(a) == "null" {
				r.Params.Arguments = json.RawMessage("{}")
			}
		}
		defer func() {
			if p := recover(); p != nil {
				b.s.log.Error("mcp: request panicked", "method", method, "panic", p, "stack", string(debug.Stack()))
				res, err = nil, fmt.Errorf("%s failed inside memwatch (a bug; the log has the details)", method)
			}
		}()
		return next(ctx, method, req)
	}
}

// maxError bounds an error message: it never carries much of what the
// client sent.
const maxError = 1024

func clipError(s string) string {
	if len(s) <= maxError {
		return s
	}
	return strings.ToValidUTF8(s[:maxError], "") + "…"
}

// clip bounds an argument quoted in a message.
func clip(s string) string {
	if len(s) <= 200 {
		return s
	}
	return strings.ToValidUTF8(s[:200], "") + "…"
}
