package mcpserver

import (
	"context"
	"database/sql"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	_ "modernc.org/sqlite"

	"github.com/memwatch/memwatch/layout/registry"
	"github.com/memwatch/memwatch/policy"
	"github.com/memwatch/memwatch/rewrite"
	"github.com/memwatch/memwatch/state"
	"github.com/memwatch/memwatch/undo"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/")

// tree is one root of every layout, with the files their agents write.
type tree struct {
	dir, state                string
	now, facts, mh, sd, recDB string
	policy                    *policy.Policy
	db                        *state.DB
}

func write(t testing.TB, path, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

func newTree(t testing.TB, extra string) *tree {
	t.Helper()
	dir := t.TempDir()
	tr := &tree{dir: dir, state: filepath.Join(dir, "state"),
		now: filepath.Join(dir, "apps", "a1"), facts: filepath.Join(dir, "facts", "f1"), mh: filepath.Join(dir, "ws", "w1"),
		sd: filepath.Join(dir, "sessions", "s1"), recDB: filepath.Join(dir, "rec", "app.db")}
	write(t, filepath.Join(tr.now, "memory.md"), "# now\n## State | prices stable\n- runs: 3\n\n# History\n## 2026-01-15-1430 | routine check\n- nothing new\n")
	write(t, filepath.Join(tr.now, "memory", "run", "2026-01-15-1430-run.md"), "run\n")
	write(t, filepath.Join(tr.facts, "facts", "user.md"), "# User\n\n> Summary: name, language\n\n- name: Ada\n- language: en\n")
	write(t, filepath.Join(tr.facts, "episodes", "2026-02.md"), "# Episodes 2026-02\n\n## Deployed the parser\n- Date: 2026-02-03\n- Summary: parser shipped\n")
	write(t, filepath.Join(tr.mh, "MEMORY.md"), "# Memory\n\n- The user deploys with make release.\n")
	write(t, filepath.Join(tr.mh, "HISTORY.md"), "[2026-02-01 10:00] Discussed the deploy pipeline; chose blue-green.\n\n[2026-02-02 11:00] Fixed the flaky login test.\n")
	write(t, filepath.Join(tr.sd, "working-memory", "detail", "auth-design.md"), "# Auth\n\nDecided to use JWT tokens with refresh rotation.\n")
	write(t, filepath.Join(tr.sd, "messages.jsonl"), `{"role":"user","content":"how should authentication work?"}`+"\n"+
		`{"role":"assistant","content":[{"type":"tool_use","name":"Grep","input":{"pattern":"authentication"}}]}`+"\n")
	if err := os.MkdirAll(filepath.Dir(tr.recDB), 0o755); err != nil {
		t.Fatal(err)
	}
	sdb, err := sql.Open("sqlite", "file:"+tr.recDB)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := sdb.Exec(`CREATE TABLE app_memories (id INTEGER PRIMARY KEY AUTOINCREMENT, app_id TEXT NOT NULL, content TEXT NOT NULL,
		created_at DATETIME DEFAULT CURRENT_TIMESTAMP, updated_at DATETIME DEFAULT CURRENT_TIMESTAMP, source_conversation_id TEXT, metadata TEXT)`); err != nil {
		t.Fatal(err)
	}
	for i, c := range []string{"User prefers meetings after 2pm.", "User's standup is at 9:30."} {
		at := time.Date(2025, 10, i+1, 12, 0, 0, 0, time.UTC).Format("2006-01-02 15:04:05")
		if _, err := sdb.Exec(`INSERT INTO app_memories (app_id, content, created_at, updated_at) VALUES ('calendar', ?, ?, ?)`, c, at, at); err != nil {
			t.Fatal(err)
		}
	}
	sdb.Close()
	pol := fmt.Sprintf(`version: 1
%sstores:
  - name: apps
    layout: now-history
    paths: [%q]
  - name: facts
    layout: facts-episodes
    paths: [%q]
  - name: ws
    layout: memory-history
    paths: [%q]
  - name: sessions
    layout: session-detail
    paths: [%q]
  - name: records
    layout: app-records
    paths: [%q]
`, extra, filepath.Join(dir, "apps", "*"), filepath.Join(dir, "facts", "*"), filepath.Join(dir, "ws", "*"), filepath.Join(dir, "sessions", "*"), tr.recDB)
	p, err := policy.Parse("policy.yaml", []byte(pol), registry.Specs())
	if err != nil {
		t.Fatal(err)
	}
	tr.policy = p
	// The files' time is what results date a note by: the same each run.
	fixed := time.Date(2026, 1, 15, 12, 0, 0, 0, time.UTC)
	filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() {
			os.Chtimes(p, fixed, fixed)
		}
		return nil
	})
	tr.db, err = state.Open(context.Background(), tr.state)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tr.db.Close() })
	return tr
}

// connect starts a server bound to root ("" for every root) and returns a
// client session over the in-memory transport.
func (tr *tree) connect(t testing.TB, root string) *mcp.ClientSession {
	t.Helper()
	rw := rewrite.New(tr.db, slog.New(slog.DiscardHandler))
	s, err := New(Config{Policy: func() *policy.Policy { return tr.policy }, Root: root, Version: "test", Rewriter: rw,
		Undo: func(ctx context.Context, id int64, force, dryRun bool) (undo.Result, error) {
			return undo.Do(ctx, rw, nil, id, force, dryRun)
		},
		Now: func() time.Time { return time.Date(2026, 1, 16, 9, 5, 0, 0, time.Local) }}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	srv, err := s.MCP("")
	if err != nil {
		t.Fatal(err)
	}
	ct, st := mcp.NewInMemoryTransports()
	ctx := context.Background()
	ss, err := srv.Connect(ctx, st, nil)
	if err != nil {
		t.Fatal(err)
	}
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "test"}, nil).Connect(ctx, ct, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cs.Close(); ss.Wait() })
	return cs
}

func toolNames(t *testing.T, cs *mcp.ClientSession) []string {
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

// call calls a tool and returns its text and whether it is an error.
func call(t *testing.T, cs *mcp.ClientSession, name string, args map[string]any) (string, bool) {
	t.Helper()
	res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: name, Arguments: args})
	if err != nil {
		t.Fatalf("%s: protocol error %v", name, err)
	}
	var b strings.Builder
	for _, c := range res.Content {
		if tc, ok := c.(*mcp.TextContent); ok {
			b.WriteString(tc.Text)
		}
	}
	return b.String(), res.IsError
}

func TestToolsPerLayout(t *testing.T) {
	tr := newTree(t, "")
	tests := []struct {
		root string
		want []string
	}{
		{tr.now, []string{"memory_changes", "memory_snapshot", "memory_stamp", "memory_status", "recall_memory"}},
		{tr.facts, []string{"memory_append", "memory_changes", "memory_list", "memory_patch", "memory_read", "memory_write", "recall_memory"}},
		{tr.mh, []string{"history_search", "memory_changes", "memory_read", "recall_memory"}},
		{tr.sd, []string{"memory_changes", "recall_memory"}},
		{tr.recDB, []string{"memory_changes", "records_context", "records_list"}},
		{"", []string{"history_search", "memory_append", "memory_changes", "memory_list", "memory_patch", "memory_read", "memory_roots",
			"memory_snapshot", "memory_stamp", "memory_status", "memory_write", "recall_memory", "records_context", "records_list"}},
	}
	for _, tt := range tests {
		t.Run(filepath.Base(tt.root), func(t *testing.T) {
			got := toolNames(t, tr.connect(t, tt.root))
			if !slices.Equal(got, tt.want) {
				t.Errorf("tools: got %v, want %v", got, tt.want)
			}
		})
	}
}

func TestUndoIsOptIn(t *testing.T) {
	tr := newTree(t, "mcp:\n  allow_undo: true\n")
	if got := toolNames(t, tr.connect(t, tr.facts)); !slices.Contains(got, "memory_undo") {
		t.Errorf("with mcp.allow_undo: got %v, want memory_undo among them", got)
	}
	// A read-only binding offers no undo either, even with allow_undo.
	tr = newTree(t, "mcp:\n  read_only: true\n  allow_undo: true\n")
	for _, name := range toolNames(t, tr.connect(t, tr.facts)) {
		if slices.Contains([]string{"memory_write", "memory_append", "memory_patch", "memory_undo"}, name) {
			t.Errorf("with mcp.read_only: %s is listed", name)
		}
	}
}

func TestSchemas(t *testing.T) {
	tr := newTree(t, "")
	res, err := tr.connect(t, tr.sd).ListTools(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := json.Marshal(res.Tools[slices.IndexFunc(res.Tools, func(t *mcp.Tool) bool { return t.Name == "recall_memory" })].InputSchema)
	var s struct {
		Properties map[string]struct {
			Default any   `json:"default"`
			Enum    []any `json:"enum"`
		} `json:"properties"`
		Required []string `json:"required"`
	}
	if err := json.Unmarshal(b, &s); err != nil {
		t.Fatal(err)
	}
	// session-detail (5.1 in its design): query required; scope all|detail|messages (and the
	// other layouts' sources) default all; limit default 5.
	if !slices.Equal(s.Required, []string{"query"}) {
		t.Errorf("required: got %v, want [query]", s.Required)
	}
	enum := fmt.Sprint(s.Properties["scope"].Enum)
	if got := fmt.Sprintf("%v %v", s.Properties["scope"].Default, s.Properties["limit"].Default); got != "all 5" || !strings.HasPrefix(enum, "[all ") || !strings.Contains(enum, " detail ") || !strings.Contains(enum, " messages") {
		t.Errorf("scope enum, scope default, limit default: got %s %s, want all, detail and messages among them, all 5", enum, got)
	}
	// Unbound, every tool takes the root first; recall_memory searches
	// every root the client reaches without one.
	res, err = tr.connect(t, "").ListTools(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, tl := range res.Tools {
		b, _ := json.Marshal(tl.InputSchema)
		if tl.Name != "memory_roots" && tl.Name != "recall_memory" && !strings.Contains(string(b), `"required":["root"`) {
			t.Errorf("%s: unbound schema %s does not require root", tl.Name, b)
		}
	}
}

// TestGolden calls every tool once on its root and compares the text with
// testdata/<tool>.golden (the temporary directory written as $DIR).
func TestGolden(t *testing.T) {
	tr := newTree(t, "mcp:\n  allow_undo: true\n")
	tests := []struct {
		name, root string
		args       map[string]any
	}{
		{"memory_status", tr.now, nil},
		{"memory_snapshot", tr.now, nil},
		{"memory_snapshot_structure", tr.now, map[string]any{"variant": "structure"}},
		{"memory_stamp", tr.now, nil},
		{"memory_list", tr.facts, nil},
		{"memory_read", tr.facts, map[string]any{"path": "facts/user.md"}},
		{"memory_write", tr.facts, map[string]any{"path": "facts/project.md", "content": "# Project\n\n- name: memwatch\n"}},
		{"memory_append", tr.facts, map[string]any{"path": "episodes/2026-02.md", "entry": "## Released 1.0\n- Date: 2026-02-10\n- Summary: first release\n", "summary": "parser, release"}},
		{"memory_patch", tr.facts, map[string]any{"path": "facts/user.md", "patches": []map[string]any{{"oldText": "Ada", "newText": "Ada Lovelace"}}}},
		{"memory_read_history", tr.mh, map[string]any{"path": "MEMORY.md"}},
		{"history_search", tr.mh, map[string]any{"query": "deploy"}},
		{"recall_memory", tr.sd, map[string]any{"query": "authentication"}},
		{"recall_memory_detail", tr.sd, map[string]any{"query": "JWT", "scope": "detail", "limit": 1}},
		{"records_list", tr.recDB, map[string]any{"app": "calendar"}},
		{"records_context", tr.recDB, map[string]any{"app": "calendar", "limit": 1}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tool, _, _ := strings.Cut(tt.name, "_snapshot_")
			if tool == tt.name {
				tool = strings.TrimSuffix(strings.TrimSuffix(strings.TrimSuffix(tt.name, "_history"), "_detail"), "_structure")
			} else {
				tool += "_snapshot"
			}
			got, isErr := call(t, tr.connect(t, tt.root), tool, tt.args)
			if isErr {
				t.Fatalf("%s: error result %q", tool, got)
			}
			got = strings.ReplaceAll(got, tr.dir, "$DIR")
			golden := filepath.Join("testdata", tt.name+".golden")
			if *update {
				os.WriteFile(golden, []byte(got), 0o644)
			}
			want, err := os.ReadFile(golden)
			if err != nil {
				t.Fatal(err)
			}
			if got != string(want) {
				t.Errorf("%s: got\n%s\nwant\n%s", tool, got, want)
			}
		})
	}
}

// TestRefusals: whatever the arguments, a call outside the sandbox is an
// error result with a clear message, and nothing is read or written.
func TestRefusals(t *testing.T) {
	tr := newTree(t, "")
	outside := filepath.Join(tr.dir, "secret.md")
	write(t, outside, "db password hunter2\n")
	if err := os.Symlink(outside, filepath.Join(tr.facts, "facts", "ext.md")); err != nil {
		t.Fatal(err)
	}
	bound := tr.connect(t, tr.facts)
	free := tr.connect(t, "")
	tests := []struct {
		name string
		cs   *mcp.ClientSession
		tool string
		args map[string]any
		want string // in the error text
	}{
		{"dotdot", bound, "memory_read", map[string]any{"path": "../../secret.md"}, "outside"},
		{"absolute", bound, "memory_read", map[string]any{"path": outside}, ""},
		{"symlink out", bound, "memory_read", map[string]any{"path": "facts/ext.md"}, ""},
		{"write dotdot", bound, "memory_write", map[string]any{"path": "../x.md", "content": "x"}, ""},
		{"write not markdown", bound, "memory_write", map[string]any{"path": "facts/x.sh", "content": "x"}, "not a memory file"},
		{"write through symlink", bound, "memory_write", map[string]any{"path": "facts/ext.md", "content": "owned"}, ""},
		{"missing argument", bound, "memory_read", map[string]any{}, "path"},
		{"wrong type", bound, "memory_write", map[string]any{"path": 3, "content": "x"}, "path"},
		{"oversize content", bound, "memory_write", map[string]any{"path": "facts/big.md", "content": strings.Repeat("x", maxContent+1)}, "the most memwatch takes"},
		{"no root", free, "memory_read", map[string]any{"path": "facts/user.md"}, "root"},
		{"unknown root", free, "memory_read", map[string]any{"root": tr.dir, "path": "secret.md"}, "not a root"},
		{"relative root", free, "memory_read", map[string]any{"root": "facts/f1", "path": "facts/user.md"}, "absolute"},
		{"other layout's root", free, "memory_list", map[string]any{"root": tr.now}, "facts-episodes"},
		{"bad scope", free, "recall_memory", map[string]any{"root": tr.sd, "query": "x", "scope": "everything"}, "scope"},
		{"bad limit", free, "recall_memory", map[string]any{"root": tr.sd, "query": "x", "limit": "ten"}, "limit"},
		{"oversize query", free, "recall_memory", map[string]any{"root": tr.sd, "query": strings.Repeat("q", maxQuery+1)}, "query"},
		{"unknown journal record", free, "memory_changes", map[string]any{"root": tr.facts, "limit": 0}, "limit"},
		{"missing app db table", free, "records_list", map[string]any{"root": tr.recDB}, "app"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, isErr := call(t, tt.cs, tt.tool, tt.args)
			if !isErr {
				t.Fatalf("%s %v: got success %q, want an error result", tt.tool, tt.args, got)
			}
			if !strings.Contains(got, tt.want) {
				t.Errorf("%s: got error %q, want it to mention %q", tt.tool, got, tt.want)
			}
			if strings.Contains(got, "hunter2") {
				t.Errorf("%s: the error carries the outside file's content: %q", tt.tool, got)
			}
			if len(got) > maxError+10 {
				t.Errorf("%s: error of %d bytes", tt.tool, len(got))
			}
		})
	}
	if b, _ := os.ReadFile(outside); string(b) != "db password hunter2\n" {
		t.Errorf("the file outside the root changed: %q", b)
	}
	for _, p := range []string{filepath.Join(tr.facts, "facts", "big.md"), filepath.Join(tr.dir, "x.md"), filepath.Join(tr.facts, "facts", "x.sh")} {
		if _, err := os.Stat(p); err == nil {
			t.Errorf("%s was created", p)
		}
	}
}

// TestWriteIsJournaledAndUndoable: a memory_write shows in memory_changes
// and in the journal, and memory_undo restores the old content.
func TestWriteIsJournaledAndUndoable(t *testing.T) {
	tr := newTree(t, "mcp:\n  allow_undo: true\n")
	cs := tr.connect(t, tr.facts)
	user := filepath.Join(tr.facts, "facts", "user.md")
	old, _ := os.ReadFile(user)
	if got, isErr := call(t, cs, "memory_write", map[string]any{"path": "facts/user.md", "content": "# User\n\n- name: Grace\n"}); isErr {
		t.Fatal(got)
	}
	recs, err := tr.db.Journal(context.Background(), state.Filter{Root: tr.facts})
	if err != nil || len(recs) != 1 || recs[0].Rule != "memory-write" || recs[0].Outcome != state.Done || recs[0].Archive == "" {
		t.Fatalf("journal: got %+v, %v; want one done memory-write with an archive", recs, err)
	}
	changes, _ := call(t, cs, "memory_changes", nil)
	if !strings.Contains(changes, "memory-write") || !strings.Contains(changes, "facts/user.md") {
		t.Errorf("memory_changes: got %q, want the memory-write of facts/user.md", changes)
	}
	// Another root's record is not this root's to undo.
	nowCS := tr.connect(t, tr.now)
	if got, isErr := call(t, nowCS, "memory_undo", map[string]any{"id": recs[0].ID}); !isErr || !strings.Contains(got, "not a change of") {
		t.Errorf("undo from another root: got %q (error %v), want a refusal", got, isErr)
	}
	got, isErr := call(t, cs, "memory_undo", map[string]any{"id": recs[0].ID})
	if isErr || !strings.HasPrefix(got, "restored facts/user.md") {
		t.Fatalf("memory_undo: got %q (error %v)", got, isErr)
	}
	if now, _ := os.ReadFile(user); string(now) != string(old) {
		t.Errorf("after undo: got %q, want %q", now, old)
	}
}

func TestResources(t *testing.T) {
	tr := newTree(t, "")
	outside := filepath.Join(tr.dir, "secret.md")
	write(t, outside, "db password hunter2\n")
	os.Symlink(outside, filepath.Join(tr.facts, "facts", "ext.md"))
	cs := tr.connect(t, tr.facts)
	ctx := context.Background()
	res, err := cs.ListResources(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, r := range res.Resources {
		names = append(names, r.Name)
	}
	if want := []string{"episodes/2026-02.md", "facts/user.md"}; !slices.Equal(names, want) {
		t.Errorf("resources: got %v, want %v", names, want)
	}
	rr, err := cs.ReadResource(ctx, &mcp.ReadResourceParams{URI: res.Resources[1].URI})
	if err != nil || len(rr.Contents) != 1 || !strings.Contains(rr.Contents[0].Text, "name: Ada") {
		t.Errorf("read %s: got %+v, %v", res.Resources[1].URI, rr, err)
	}
	for _, uri := range []string{fileURI(outside), fileURI(filepath.Join(tr.facts, "facts", "ext.md")), fileURI(filepath.Join(tr.facts, "..", "..", "secret.md")), "file:///etc/passwd"} {
		rr, err := cs.ReadResource(ctx, &mcp.ReadResourceParams{URI: uri})
		if err == nil {
			t.Errorf("read %s: got %+v, want an error", uri, rr)
		}
	}
}

// FuzzToolCall sends arbitrary arguments to every tool: each call ends in a
// result (an error result for bad input), never a protocol failure or a
// crash, and nothing outside the roots is touched.
func FuzzToolCall(f *testing.F) {
	tools := []string{"memory_roots", "memory_status", "memory_snapshot", "memory_stamp", "memory_list", "memory_read", "memory_write",
		"memory_append", "memory_patch", "history_search", "recall_memory", "records_list", "records_context", "memory_changes", "memory_undo"}
	for i, seed := range []string{`{}`, `null`, `{"path":"../x.md"}`, `{"query":"\"unclosed","limit":-1}`, `{"root":"/","path":"etc/passwd"}`,
		`{"patches":[{"oldText":"","newText":"x"}],"path":"facts/user.md"}`, `{"variant":"full"}`, `{"id":1,"force":true}`, `{"app":"calendar","limit":1e99}`} {
		f.Add(uint8(i), []byte(seed))
	}
	tr := newTree(f, "mcp:\n  allow_undo: true\n")
	outside := filepath.Join(tr.dir, "outside.md")
	write(f, outside, "untouched\n")
	bound, free := tr.connect(f, tr.facts), tr.connect(f, "")
	f.Fuzz(func(t *testing.T, which uint8, args []byte) {
		tool := tools[int(which)%len(tools)]
		for _, cs := range []*mcp.ClientSession{bound, free} {
			// Arguments that are not a JSON object are the client's to
			// reject; what reaches the server must never break it.
			_, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: tool, Arguments: json.RawMessage(args)})
			if err != nil && json.Valid(args) && strings.Contains(err.Error(), "connection closed") {
				t.Fatalf("%s %s: the server went away: %v", tool, args, err)
			}
		}
		if b, _ := os.ReadFile(outside); string(b) != "untouched\n" {
			t.Fatalf("%s %s changed a file outside the roots: %q", tool, args, b)
		}
	})
}

// TestCalledTurnsAPanicIntoAnError: a tool that panics answers an error
// naming the tool, and the server goes on.
func TestCalledTurnsAPanicIntoAnError(t *testing.T) {
	b := &builder{s: &Server{log: slog.New(slog.NewTextHandler(io.Discard, nil))}}
	call := func() (res *mcp.CallToolResult, err error) {
		defer b.called("recall_memory", time.Now(), &res, &err)
		panic("a bug")
	}
	res, err := call()
	if res != nil || err == nil || !strings.Contains(err.Error(), "recall_memory failed inside memwatch") {
		t.Errorf("a panicking tool: got %v, %v; want an error naming it", res, err)
	}
}
