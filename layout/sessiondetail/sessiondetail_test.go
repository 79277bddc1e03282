package sessiondetail_test

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/memwatch/memwatch/compact/llmtest"
	"github.com/memwatch/memwatch/confine"
	"github.com/memwatch/memwatch/daemon/daemontest"
	"github.com/memwatch/memwatch/layout/sessiondetail"
	"github.com/memwatch/memwatch/session"
	"github.com/memwatch/memwatch/spool"
	"github.com/memwatch/memwatch/state"
)

var update = flag.Bool("update", false, "rewrite golden files")

func golden(t *testing.T, name, got string) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		os.WriteFile(path, []byte(got), 0o644)
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (go test -update creates it)", err)
	}
	if got != string(want) {
		t.Errorf("%s differs from the golden file:\n%s", name, got)
	}
}

// session builds a session directory with fixed content and mtimes.
func newSession(t *testing.T, dir string) string {
	t.Helper()
	s := filepath.Join(dir, "sess-1")
	os.MkdirAll(filepath.Join(s, "working-memory", "detail"), 0o755)
	write := func(rel, content string, age time.Duration) {
		p := filepath.Join(s, rel)
		os.WriteFile(p, []byte(content), 0o644)
		at := time.Date(2026, 1, 15, 12, 0, 0, 0, time.UTC).Add(-age)
		os.Chtimes(p, at, at)
	}
	write("working-memory/overview.md", "# Working Memory\n\n## Current Task\nauth refactor\n", 0)
	write("working-memory/detail/auth-design.md", "# Authentication Design\n\n<!--\nMETA:\ncreated: 2024-01-15T10:30:00Z\nkeywords: [\"authentication\", \"jwt\"]\n-->\n\n## Decision\n\nUsing JWT (JSON Web Tokens) for authentication with refresh token rotation.\n\n## Rationale\n\n- Stateless: no server-side session storage needed\n", time.Hour)
	write("working-memory/detail/key-decisions.md", "# Key decisions\n\n- Postgres 15 for storage\n- Authentication via OAuth2 was rejected: too heavy for an internal tool\n", 2*time.Hour)
	lines := []string{
		`{"role":"user","content":"Hi, can you look at the auth flow?"}`,
		`{"role":"assistant","content":[{"type":"text","text":"Sure. The authentication flow uses OAuth2 today."},{"type":"tool_use","name":"Read","input":{"path":"auth/flow.go"}}]}`,
		`{"type":"user","message":{"role":"user","content":"Let's compare OAuth2 vs JWT for the refresh token."},"timestamp":"2026-01-15T10:00:00Z"}`,
		`this line is not json but mentions JWT anyway`,
		`{"role":"assistant","content":"JWT with refresh token rotation keeps the servers stateless."}`,
		`{"role":"user","content":"Ok, go with JWT. Also check the \"role\" field in users.go"}`,
	}
	write("messages.jsonl", strings.Join(lines, "\n")+"\n", 3*time.Hour)
	return s
}

func TestRecallGolden(t *testing.T) {
	dir := t.TempDir()
	s := newSession(t, dir)
	cases := []struct{ name, query, scope string }{
		{"word", "authentication", "all"},
		{"words", "refresh token", "all"},
		{"phrase", `"refresh token rotation"`, "all"},
		{"detail", "jwt", "detail"},
		{"messages", "jwt", "messages"},
		{"json-key-is-not-content", "role", "messages"},
		{"none", "kubernetes", "all"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			q, err := sessiondetail.ParseQuery(c.query)
			if err != nil {
				t.Fatal(err)
			}
			rs, err := sessiondetail.Recall(q, sessiondetail.Options{Roots: []string{s}, Scope: c.scope, Limit: 5})
			if err != nil {
				t.Fatal(err)
			}
			golden(t, "recall-"+c.name+".golden", sessiondetail.Format(q, rs))
		})
	}
	// JSON uses the seed's SearchResult fields.
	q, _ := sessiondetail.ParseQuery("jwt")
	rs, _ := sessiondetail.Recall(q, sessiondetail.Options{Roots: []string{s}, Scope: "all", Limit: 2})
	b, _ := json.MarshalIndent(rs, "", "  ")
	golden(t, "recall-jwt.golden.json", string(b)+"\n")
}

func TestRecallAcrossSessionsCitesSession(t *testing.T) {
	dir := t.TempDir()
	s := newSession(t, dir)
	q, _ := sessiondetail.ParseQuery("stateless")
	rs, _ := sessiondetail.Recall(q, sessiondetail.Options{Roots: []string{s}, Scope: "all", Limit: 5, Session: true})
	if len(rs) != 2 || rs[0].Citation != "sess-1/detail/auth-design.md#L15" || rs[1].Citation != "sess-1/messages.jsonl#L5" {
		t.Errorf("results = %+v", rs)
	}
}

// A 1 MiB content field and invalid UTF-8 do not break recall.
func TestRecallHugeLineAndInvalidUTF8(t *testing.T) {
	dir := t.TempDir()
	s := filepath.Join(dir, "s")
	os.MkdirAll(s, 0o755)
	big := strings.Repeat("lorem ipsum ", 1<<20/12) + "NEEDLE in the middle " + strings.Repeat("dolor sit ", 1<<20/10)
	content := fmt.Sprintf(`{"role":"user","content":%q}`+"\n", big) + "\xff\xfe broken \xc3 NEEDLE bytes\n" + `{"role":"assistant","content":"after"}` + "\n"
	os.WriteFile(filepath.Join(s, "messages.jsonl"), []byte(content), 0o644)
	q, _ := sessiondetail.ParseQuery("needle")
	rs, err := sessiondetail.Recall(q, sessiondetail.Options{Roots: []string{s}, Scope: "all", Limit: 5})
	if err != nil {
		t.Fatal(err)
	}
	if len(rs) != 2 {
		t.Fatalf("got %d results, want 2", len(rs))
	}
	for _, r := range rs {
		if n := len([]rune(r.Text)); n > 300 || !strings.Contains(strings.ToLower(r.Text), "needle") {
			t.Errorf("snippet of %d characters without the match: %q", n, r.Text[:min(80, len(r.Text))])
		}
	}
	if rs[0].LineNumber != 2 || rs[1].LineNumber != 1 {
		t.Errorf("line numbers %d, %d; want 2, 1 (newest first)", rs[0].LineNumber, rs[1].LineNumber)
	}
}

func FuzzRecall(f *testing.F) {
	f.Add([]byte(`{"role":"user","content":"JWT"}`+"\n"), "jwt")
	f.Add([]byte("a\nb\xffJ\n"), `"b j"`)
	f.Fuzz(func(t *testing.T, content []byte, query string) {
		q, err := sessiondetail.ParseQuery(query)
		if err != nil {
			return
		}
		dir := t.TempDir()
		os.WriteFile(filepath.Join(dir, "messages.jsonl"), content, 0o644)
		rs, err := sessiondetail.Recall(q, sessiondetail.Options{Roots: []string{dir}, Scope: "all", Limit: 1000})
		if err != nil {
			t.Fatal(err)
		}
		lines := int64(strings.Count(string(content), "\n") + 1)
		for _, r := range rs {
			if r.LineNumber < 1 || r.LineNumber > lines || len([]rune(r.Text)) > 300 {
				t.Fatalf("bad result %+v (file has %d lines)", r, lines)
			}
		}
	})
}

func runDaemon(t *testing.T, src, stateDir string) func() {
	t.Helper()
	return daemontest.Run(t, src, stateDir).Stop
}

func appendMessages(t *testing.T, path string, from, n int) {
	f, _ := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	defer f.Close()
	for i := from; i < from+n; i++ {
		if i%2 == 0 {
			fmt.Fprintf(f, `{"role":"user","content":"Please update handler%d.go for the billing migration."}`+"\n", i)
		} else {
			fmt.Fprintf(f, `{"role":"assistant","content":[{"type":"text","text":"Updated handler%d.go; billing migration step %d done."},{"type":"tool_use","name":"Edit","input":{}}]}`+"\n", i-1, i)
		}
	}
}

func detailFiles(s string) []string {
	ms, _ := filepath.Glob(filepath.Join(s, "working-memory", "detail", "*-summary*.md"))
	return ms
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	daemontest.WaitFor(t, what, 8*time.Second, cond)
}

func policyFor(glob, llm string) string {
	compactor := "heuristic"
	if llm != "" {
		compactor = "llm"
		llm = fmt.Sprintf("llm:\n  default:\n    base_url: %s\n    model: fake\n    timeout: 2s\n", llm)
	}
	return fmt.Sprintf("version: 1\n%sstores:\n  - name: sessions\n    layout: session-detail\n    paths: [%q]\n    compactor: %s\n    settle: 50ms\n    summary_every: 20\n    session_idle: 2s\n    overview_max_size: 100B\n", llm, glob, compactor)
}

func TestHeuristicSummariesEveryNAndOnIdle(t *testing.T) {
	dir := t.TempDir()
	s := filepath.Join(dir, "sess-a")
	os.MkdirAll(filepath.Join(s, "working-memory"), 0o755)
	runDaemon(t, policyFor(filepath.Join(dir, "*"), ""), t.TempDir())
	appendMessages(t, filepath.Join(s, "messages.jsonl"), 0, 45)
	waitFor(t, "two summaries of 20 lines", func() bool { return len(detailFiles(s)) == 2 })
	waitFor(t, "the idle summary of the rest", func() bool { return len(detailFiles(s)) == 3 })
	var all string
	for _, f := range detailFiles(s) {
		b, _ := os.ReadFile(f)
		all += string(b)
	}
	for _, want := range []string{"messages.jsonl#L1-20 range:", "messages.jsonl#L21-40 range:", "messages.jsonl#L41-45 range:", "## Content", "META:", "- keywords: [", "User requests:", "Tools used: Edit (", "handler0.go", "billing"} {
		if !strings.Contains(all, want) {
			t.Errorf("summaries lack %q", want)
		}
	}
}

func TestLLMSummaryAndExactlyOnce(t *testing.T) {
	srv := llmtest.New(t, llmtest.Step{Content: `{"title":"Billing migration","summary":"Migrated the billing handlers one by one.","keywords":["billing","migration","handlers"]}`, Tokens: 321})
	dir := t.TempDir()
	s := filepath.Join(dir, "sess-b")
	os.MkdirAll(filepath.Join(s, "working-memory", "detail"), 0o755)
	log := filepath.Join(s, "messages.jsonl")
	appendMessages(t, log, 0, 40)
	// As left by a memwatch killed after writing the first summary but
	// before committing its progress.
	stateDir := t.TempDir()
	marker := crashedRange(t, s, stateDir, "messages.jsonl", 20)
	os.WriteFile(filepath.Join(s, "working-memory", "detail", "2026-01-01-0000-summary.md"), []byte("# Earlier\n\n## Content\nx\n"+marker+"\n"), 0o644)
	runDaemon(t, policyFor(filepath.Join(dir, "*"), srv.BaseURL()), stateDir)
	waitFor(t, "the second summary", func() bool { return len(detailFiles(s)) == 2 })
	time.Sleep(300 * time.Millisecond)
	if srv.Calls() != 1 {
		t.Errorf("LLM calls = %d, want 1 (L1-20 was already summarized)", srv.Calls())
	}
	var second string
	for _, f := range detailFiles(s) {
		if b, _ := os.ReadFile(f); strings.Contains(string(b), "#L21-40 range:") {
			second = string(b)
		}
	}
	for _, want := range []string{"# Billing migration", `- keywords: ["billing","migration","handlers"]`, "Migrated the billing handlers", "Source: messages.jsonl#L21-40"} {
		if !strings.Contains(second, want) {
			t.Errorf("summary lacks %q:\n%s", want, second)
		}
	}
}

func TestOverviewGuardWarnsOnce(t *testing.T) {
	dir := t.TempDir()
	s := filepath.Join(dir, "sess-c")
	os.MkdirAll(filepath.Join(s, "working-memory"), 0o755)
	big := "# Working Memory\n\n" + strings.Repeat("- a long line of agent state\n", 10)
	os.WriteFile(filepath.Join(s, "working-memory", "overview.md"), []byte(big), 0o644)
	stateDir := t.TempDir()
	stop := runDaemon(t, policyFor(filepath.Join(dir, "*"), ""), stateDir)
	time.Sleep(500 * time.Millisecond)
	stop()
	out, _ := os.ReadFile(filepath.Join(s, "working-memory", "overview.md"))
	if string(out) != big {
		t.Error("memwatch rewrote the agent's overview")
	}
	// Journaled once, and not again after a restart on the same content.
	stop = runDaemon(t, policyFor(filepath.Join(dir, "*"), ""), stateDir)
	time.Sleep(500 * time.Millisecond)
	stop()
	db, err := state.Open(context.Background(), stateDir)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	recs, _ := db.Journal(context.Background(), state.Filter{Rule: sessiondetail.RuleOverview})
	if len(recs) != 1 || recs[0].Outcome != state.Skipped || !strings.Contains(recs[0].Reason, "over overview_max_size 100") {
		t.Errorf("overview warnings in the journal = %+v, want exactly one", recs)
	}
}

// crashedRange captures rel into the spool of stateDir and returns the
// marker a summary of its first n messages carries.
func crashedRange(t *testing.T, dir, stateDir, rel string, n int) string {
	t.Helper()
	ctx := context.Background()
	sp, err := spool.Open(ctx, stateDir)
	if err != nil {
		t.Fatal(err)
	}
	defer sp.Close()
	root, err := confine.Open(dir, confine.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer root.Close()
	if _, err := sp.Capture(ctx, root, rel, spool.Options{IsMessage: session.IsMessage}); err != nil {
		t.Fatal(err)
	}
	st, _, _ := sp.Find(ctx, root.Path(), rel)
	var lines []spool.Line
	sp.Read(ctx, st.ID, 0, int64(n), func(l spool.Line) error { lines = append(lines, l); return nil })
	return fmt.Sprintf("<!-- memwatch: %s range:%s -->", spool.Cite(rel, lines), spool.RangeID(rel, lines))
}
