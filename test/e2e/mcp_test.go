package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/memwatch/memwatch/recall"
)

// mcpTree is a root of three layouts and the policy that names them.
type mcpTree struct {
	dir, state, policy string
	facts, now, sess   string
	secret             string
}

func newMCPTree(t *testing.T, extra string) *mcpTree {
	t.Helper()
	dir := t.TempDir()
	m := &mcpTree{dir: dir, state: filepath.Join(dir, "state"), facts: filepath.Join(dir, "facts", "f1"),
		now: filepath.Join(dir, "apps", "a1"), sess: filepath.Join(dir, "sessions", "s1"), secret: filepath.Join(dir, "secret.md")}
	files := map[string]string{
		filepath.Join(m.facts, "facts", "user.md"):                          "# User\n\n> Summary: name, language\n\n- name: Ada\n- language: en\n",
		filepath.Join(m.facts, "episodes", "2026-02.md"):                    "# Episodes 2026-02\n\n## Deployed the parser\n- Date: 2026-02-03\n- Summary: parser shipped\n",
		filepath.Join(m.now, "memory.md"):                                   "# now\n## State | stable\n- runs: 3\n\n# History\n## 2026-01-15-1430 | routine check\n",
		filepath.Join(m.sess, "working-memory", "detail", "auth-design.md"): "# Auth\n\nDecided to use JWT tokens with refresh rotation.\n",
		filepath.Join(m.sess, "messages.jsonl"): `{"role":"user","content":"how should authentication work?"}` + "\n" +
			`{"role":"assistant","content":[{"type":"tool_use","name":"Grep","input":{"pattern":"authentication"}}]}` + "\n",
		m.secret: "db password hunter2\n",
	}
	for p, c := range files {
		os.MkdirAll(filepath.Dir(p), 0o755)
		if err := os.WriteFile(p, []byte(c), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	m.policy = writePolicy(t, dir, fmt.Sprintf("%sstores:\n  - name: facts\n    layout: facts-episodes\n    paths: [%q]\n    settle: 50ms\n"+
		"  - name: apps\n    layout: now-history\n    paths: [%q]\n    settle: 50ms\n"+
		"  - name: sessions\n    layout: session-detail\n    paths: [%q]\n    settle: 50ms\n    summary_every: 1000000\n",
		extra, filepath.Join(dir, "facts", "*"), filepath.Join(dir, "apps", "*"), filepath.Join(dir, "sessions", "*")))
	return m
}

// cli runs the memwatch command line with the tree's state directory.
func (m *mcpTree) cli(t *testing.T, args ...string) string {
	t.Helper()
	cmd := exec.Command(memwatchFast, append(args, "--policy", m.policy)...)
	cmd.Env = append(os.Environ(), "MEMWATCH_STATE_DIR="+m.state)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("memwatch %v: %v\n%s", args, err, out)
	}
	return string(out)
}

// stdio starts memwatch mcp as an MCP client would and connects to it.
func (m *mcpTree) stdio(t *testing.T, args ...string) *mcp.ClientSession {
	t.Helper()
	cmd := exec.Command(memwatchBin, append([]string{"mcp", "--policy", m.policy, "--state-dir", m.state}, args...)...)
	cmd.Stderr = os.Stderr
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "memwatch-test"}, nil).Connect(context.Background(), &mcp.CommandTransport{Command: cmd}, nil)
	if err != nil {
		t.Fatalf("connect to memwatch mcp: %v", err)
	}
	t.Cleanup(func() { cs.Close() })
	return cs
}

func callText(t *testing.T, cs *mcp.ClientSession, name string, args map[string]any) (string, bool) {
	t.Helper()
	res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: name, Arguments: args})
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	var b strings.Builder
	for _, c := range res.Content {
		if tc, ok := c.(*mcp.TextContent); ok {
			b.WriteString(tc.Text)
		}
	}
	return b.String(), res.IsError
}

func listTools(t *testing.T, cs *mcp.ClientSession) []string {
	t.Helper()
	res, err := cs.ListTools(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, tl := range res.Tools {
		names = append(names, tl.Name)
	}
	slices.Sort(names)
	return names
}

// TestMCPOverStdioAnswersLikeTheCLI drives the real binary over stdio, as
// Claude Code or Codex start it: each tool's text is the CLI's output for
// the same request, a path outside the root is refused, and a write is
// journaled and undone with memwatch undo.
func TestMCPOverStdioAnswersLikeTheCLI(t *testing.T) {
	m := newMCPTree(t, "")
	facts := m.stdio(t, "--root", m.facts)
	if got, want := listTools(t, facts), []string{"memory_append", "memory_changes", "memory_list", "memory_patch", "memory_read", "memory_write", "recall_memory", "recall_show"}; !slices.Equal(got, want) {
		t.Errorf("facts tools: got %v, want %v", got, want)
	}
	now := m.stdio(t, "--root", m.now)
	sess := m.stdio(t, "--root", m.sess)
	memFile := filepath.Join(m.now, "memory.md")
	for _, tt := range []struct {
		cs   *mcp.ClientSession
		tool string
		args map[string]any
		cli  []string
	}{
		{facts, "memory_list", nil, []string{"index", m.facts}},
		{facts, "memory_read", map[string]any{"path": "facts/user.md"}, []string{"read", m.facts, "facts/user.md"}},
		{now, "memory_status", nil, []string{"status", memFile}},
		{now, "memory_snapshot", nil, []string{"snapshot", memFile}},
		{now, "memory_snapshot", map[string]any{"variant": "structure"}, []string{"snapshot", "--variant", "structure", memFile}},
		{sess, "recall_memory", map[string]any{"query": "authentication"}, []string{"recall", "--policy", m.policy, "--dir", m.sess, "--json", "authentication"}},
		{sess, "recall_memory", map[string]any{"query": "jwt", "scope": "detail", "limit": 1}, []string{"recall", "--policy", m.policy, "--dir", m.sess, "--scope", "detail", "--limit", "1", "--json", "jwt"}},
	} {
		got, isErr := callText(t, tt.cs, tt.tool, tt.args)
		want := m.cli(t, tt.cli...)
		if tt.tool == "recall_memory" {
			// The tool gives session-detail's format of the results the CLI
			// finds (which prints them for a person, or as JSON).
			var rs []recall.Result
			if err := json.Unmarshal([]byte(want), &rs); err != nil {
				t.Fatalf("recall --json: %v\n%s", err, want)
			}
			q, _ := recall.ParseQuery(tt.args["query"].(string))
			want = recall.Format(q, rs)
		}
		if isErr || got != want {
			t.Errorf("%s %v (error %v):\ngot  %q\nwant %q (memwatch %s)", tt.tool, tt.args, isErr, got, want, strings.Join(tt.cli, " "))
		}
	}
	// Refused: out of the root, by .., by an absolute path, by a symlink.
	os.Symlink(m.secret, filepath.Join(m.facts, "facts", "ext.md"))
	for _, p := range []string{"../../secret.md", m.secret, "facts/ext.md"} {
		got, isErr := callText(t, facts, "memory_read", map[string]any{"path": p})
		if !isErr || strings.Contains(got, "hunter2") {
			t.Errorf("memory_read %s: got %q (error %v), want a refusal", p, got, isErr)
		}
	}
	// A write is journaled; memwatch undo reverts it.
	got, isErr := callText(t, facts, "memory_write", map[string]any{"path": "facts/user.md", "content": "# User\n\n- name: Grace\n"})
	if isErr || !strings.Contains(got, "journal record") {
		t.Fatalf("memory_write: %q (error %v)", got, isErr)
	}
	var recs []struct {
		ID     int64
		Rule   string
		Target string
	}
	if err := json.Unmarshal([]byte(m.cli(t, "log", "--json")), &recs); err != nil || len(recs) == 0 || recs[0].Rule != "memory-write" || recs[0].Target != "facts/user.md" {
		t.Fatalf("journal after memory_write: %+v %v", recs, err)
	}
	if changes, _ := callText(t, facts, "memory_changes", nil); !strings.Contains(changes, "memory-write") {
		t.Errorf("memory_changes: %q", changes)
	}
	m.cli(t, "undo", fmt.Sprint(recs[0].ID))
	if b, _ := os.ReadFile(filepath.Join(m.facts, "facts", "user.md")); !strings.Contains(string(b), "name: Ada") {
		t.Errorf("after undo: %q", b)
	}
	// Unbound, the root argument picks the root and must be one.
	all := m.stdio(t)
	if got, _ := callText(t, all, "memory_read", map[string]any{"root": m.facts, "path": "facts/user.md"}); !strings.Contains(got, "name: Ada") {
		t.Errorf("unbound memory_read: %q", got)
	}
	if got, isErr := callText(t, all, "memory_read", map[string]any{"root": m.dir, "path": "secret.md"}); !isErr || strings.Contains(got, "hunter2") {
		t.Errorf("unbound memory_read of a non-root: %q (error %v)", got, isErr)
	}
	// A --root that is not a root of the policy is a usage error.
	cmd := exec.Command(memwatchFast, "mcp", "--policy", m.policy, "--state-dir", m.state, "--root", m.dir)
	if out, err := cmd.CombinedOutput(); exitCode(err) != 2 || !strings.Contains(string(out), "not a root") {
		t.Errorf("mcp --root %s: exit %d, %s", m.dir, exitCode(err), out)
	}
}

// TestMCPOnTheDaemonSocket: the running daemon serves the same tools over
// Streamable HTTP at /mcp on its control socket; ?root= binds a session.
func TestMCPOnTheDaemonSocket(t *testing.T) {
	m := newMCPTree(t, "mcp:\n  allow_undo: true\n")
	p := start(t, "--policy", m.policy, "--state-dir", m.state)
	p.waitLog("ready", 10*time.Second)
	sock := filepath.Join(m.state, "memwatch.sock")
	hc := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "unix", sock)
	}}}
	connect := func(root string) *mcp.ClientSession {
		t.Helper()
		endpoint := "http://localhost/mcp"
		if root != "" {
			endpoint += "?root=" + url.QueryEscape(root)
		}
		cs, err := mcp.NewClient(&mcp.Implementation{Name: "memwatch-test"}, nil).Connect(context.Background(),
			&mcp.StreamableClientTransport{Endpoint: endpoint, HTTPClient: hc}, nil)
		if err != nil {
			t.Fatalf("connect to /mcp: %v", err)
		}
		t.Cleanup(func() { cs.Close() })
		return cs
	}
	facts := connect(m.facts)
	if got := listTools(t, facts); !slices.Contains(got, "memory_undo") || !slices.Contains(got, "memory_write") || !slices.Contains(got, "recall_memory") || slices.Contains(got, "history_search") {
		t.Errorf("tools of a facts root with allow_undo: %v", got)
	}
	got, isErr := callText(t, facts, "memory_write", map[string]any{"path": "facts/project.md", "content": "# Project\n\n> Summary: project name\n\n- name: memwatch\n"})
	if isErr {
		t.Fatalf("memory_write: %s", got)
	}
	var id int64
	fmt.Sscanf(got[strings.Index(got, "journal record ")+len("journal record "):], "%d", &id)
	if got, isErr := callText(t, facts, "memory_undo", map[string]any{"id": id}); isErr || !strings.Contains(got, "removed facts/project.md") {
		t.Errorf("memory_undo %d: %q (error %v)", id, got, isErr)
	}
	if _, err := os.Stat(filepath.Join(m.facts, "facts", "project.md")); err == nil {
		t.Errorf("facts/project.md is still there after the undo of its creation")
	}
	all := connect("")
	if got, _ := callText(t, all, "recall_memory", map[string]any{"root": m.sess, "query": "authentication"}); !strings.Contains(got, "Found 2 result(s)") {
		t.Errorf("recall_memory through the daemon: %q", got)
	}
	// A session bound to a directory that is no root is refused.
	resp, err := hc.Post("http://localhost/mcp?root="+url.QueryEscape(m.dir), "application/json",
		strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"x","version":"1"}}}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadRequest {
		t.Errorf("/mcp?root=%s: got %s, want 400", m.dir, resp.Status)
	}
	p.stop(30 * time.Second)
}

// TestMCPConformance runs the MCP conformance suite's scenarios (npm
// @modelcontextprotocol/conformance, under Node 24, installed by make
// mcp-e2e into test/mcp-node; MEMWATCH_CONFORMANCE names that directory)
// against /mcp of the real daemon, through a proxy that adds the bearer
// token the suite's client cannot send. server-sse-polling must pass
// without a warning: streams carry event ids, a priming event and retry,
// and a client that lost a stream resumes it with Last-Event-ID; the
// scenarios the daemon passed before must still pass.
func TestMCPConformance(t *testing.T) {
	suite := os.Getenv("MEMWATCH_CONFORMANCE")
	if suite == "" {
		t.Skip("MEMWATCH_CONFORMANCE is not set: make mcp-e2e installs the MCP conformance suite and runs this test")
	}
	dir := t.TempDir()
	os.MkdirAll(filepath.Join(dir, "ws", "a", "working-memory", "detail"), 0o755)
	os.WriteFile(filepath.Join(dir, "ws", "a", "messages.jsonl"), []byte(`{"role":"user","content":"hi"}`+"\n"), 0o644)
	token := "conformance-" + strings.Repeat("k", 32)
	tokenFile := filepath.Join(dir, "token")
	os.WriteFile(tokenFile, []byte(token), 0o600)
	addr := freeAddr(t)
	pol := writePolicy(t, dir, fmt.Sprintf("control:\n  tcp: %s\n  token_file: %s\nstores:\n  - name: s\n    layout: session-detail\n    paths: [%q]\n", addr, tokenFile, filepath.Join(dir, "ws", "*")))
	p := start(t, "--policy", pol, "--state-dir", filepath.Join(dir, "state"))
	p.waitLog("ready", 10*time.Second)
	var proxyLog syncBuffer
	target, _ := url.Parse("http://" + addr)
	proxy := &httputil.ReverseProxy{
		Rewrite: func(r *httputil.ProxyRequest) {
			r.SetURL(target)
			r.Out.Header.Set("Authorization", "Bearer "+token)
		},
		FlushInterval: -1, // server-sent events as they come
		// What the proxy saw go wrong (a stream it had to cut because
		// the daemon's side broke), reported with a failure.
		ErrorLog: log.New(&proxyLog, "proxy: ", log.Lmicroseconds),
	}
	front := httptest.NewServer(proxy)
	defer front.Close()
	run := func(scenario string) string {
		t.Helper()
		cmd := exec.Command(filepath.Join(suite, "node_modules", ".bin", "node"), filepath.Join(suite, "node_modules", "@modelcontextprotocol", "conformance", "dist", "index.js"),
			"server", "--url", front.URL+"/mcp", "--scenario", scenario)
		out, _ := cmd.CombinedOutput()
		return regexp.MustCompile("\x1b\\[[0-9;]*m").ReplaceAllString(string(out), "")
	}
	// The scenario's exception (its check ServerSSEPollingTest, printed
	// "Error: Error: ..."): the suite's client lost a connection, once in
	// CI ("terminated", a stream cut between the suite, the proxy and the
	// daemon) and never in 60 runs here. Such an attempt is logged, with
	// what the proxy saw, and run again, twice at most; a check that
	// fails (no priming event, no retry, no resumed answer) fails the
	// test at once.
	for attempt := 1; ; attempt++ {
		out := run("server-sse-polling")
		if strings.Contains(out, "Passed: 3/3, 0 failed, 0 warnings") {
			break
		}
		if !strings.Contains(out, "Error: Error: ") || attempt == 3 {
			t.Errorf("server-sse-polling (attempt %d):\n%s\nthe proxy's log:\n%s", attempt, out, proxyLog.String())
			break
		}
		t.Logf("server-sse-polling, attempt %d, lost its connection (run again):\n%s\nthe proxy's log:\n%s", attempt, out, proxyLog.String())
	}
	for _, sc := range []string{"server-initialize", "logging-set-level", "ping", "tools-list"} {
		if out := run(sc); !strings.Contains(out, "0 failed") {
			t.Errorf("%s:\n%s", sc, out)
		}
	}
}
