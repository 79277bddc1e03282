package recall

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/memwatch/memwatch/confine"
	"github.com/memwatch/memwatch/recall/query"
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

// sessionSources are session-detail's: notes in detail/, the raw log.
var sessionSources = []Source{
	{Glob: "working-memory/detail/*.md", Kind: Text, Label: "detail", Strip: "working-memory/"},
	{Glob: "messages.jsonl", Kind: Log, Label: "messages"},
}

func openRoot(t testing.TB, dir string) *confine.Root {
	t.Helper()
	r, err := confine.Open(dir, confine.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	return r
}

// newSession builds a session directory with fixed content and mtimes.
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
	write("working-memory/detail/key-decisions.md", "# Key decisions\n\n- Postgres 15 for storage\n- Authentication via OAuth2 was rejected: too heavy for an internal tool\n- Grüße an das Team: Überprüfung der Zugänge\n", 2*time.Hour)
	lines := []string{
		`{"role":"user","content":"Hi, can you look at the auth flow?"}`,
		`{"role":"assistant","content":[{"type":"text","text":"Sure. The authentication flow uses OAuth2 today."},{"type":"tool_use","name":"Read","input":{"path":"auth/flow.go"}}]}`,
		`{"type":"user","message":{"role":"user","content":"Let's compare OAuth2 vs JWT for the refresh token."},"timestamp":"2026-01-15T10:00:00Z"}`,
		`this line is not json but mentions JWT anyway`,
		`{"role":"assistant","content":"JWT with refresh token rotation keeps the servers stateless."}`,
		`{"role":"user","content":"Ok, go with JWT. Also check the \"role\" field in users.go"}`,
		`{"role":"assistant","content":[{"type":"tool_use","name":"Grep","input":{"pattern":"tokenRefresher","path":"internal/"}}]}`,
		`{"role":"user","content":[{"type":"tool_result","content":"internal/auth/refresh.go:12: func tokenRefresher()"}]}`,
		`{"role":"user","content":"Überprüfung der Zugänge bitte"}`,
	}
	write("messages.jsonl", strings.Join(lines, "\n")+"\n", 3*time.Hour)
	return s
}

// The table of queries every search path must answer alike.
var queries = []struct{ name, query string }{
	{"word", "authentication"},
	{"words", "refresh token"},
	{"phrase", `"refresh token rotation"`},
	{"non-ascii", "überprüfung"},
	{"tool-input", "tokenrefresher"},
	{"json-key-is-not-content", "role"},
	{"none", "kubernetes"},
}

func TestGolden(t *testing.T) {
	dir := t.TempDir()
	s := newSession(t, dir)
	root := openRoot(t, s)
	for _, c := range queries {
		t.Run(c.name, func(t *testing.T) {
			q, err := ParseQuery(c.query)
			if err != nil {
				t.Fatal(err)
			}
			// Every word, newest first (--sort newest): the order every
			// search path must give alike.
			rs, _, err := Search(context.Background(), q, Options{Roots: []Root{{Root: root, Sources: sessionSources}}, Limit: 5, Sort: SortNewest})
			if err != nil {
				t.Fatal(err)
			}
			golden(t, "recall-"+c.name+".golden", Format(q, rs))
			if q.Ranked() {
				// By relevance, the default (rank.go).
				rs, _, err := Search(context.Background(), q, Options{Roots: []Root{{Root: root, Sources: sessionSources}}, Limit: 5, Explain: true})
				if err != nil {
					t.Fatal(err)
				}
				golden(t, "recall-"+c.name+"-ranked.golden", format(q, rs, true))
			}
		})
	}
	for _, scope := range []string{"detail", "messages"} {
		q, _ := ParseQuery("jwt")
		rs, _, _ := Search(context.Background(), q, Options{Roots: []Root{{Root: root, Sources: sessionSources}}, Labels: []string{scope}, Limit: 5})
		golden(t, "recall-"+scope+".golden", Format(q, rs))
	}
	// JSON uses the seed's SearchResult fields.
	q, _ := ParseQuery("jwt")
	rs, _, _ := Search(context.Background(), q, Options{Roots: []Root{{Root: root, Sources: sessionSources}}, Limit: 2})
	b, _ := json.MarshalIndent(rs, "", "  ")
	golden(t, "recall-jwt.golden.json", string(b)+"\n")
}

func TestAcrossRootsCitesTheRoot(t *testing.T) {
	dir := t.TempDir()
	s := newSession(t, dir)
	other := filepath.Join(dir, "sess-2")
	os.MkdirAll(other, 0o755)
	os.WriteFile(filepath.Join(other, "messages.jsonl"), []byte(`{"role":"user","content":"stateless too"}`+"\n"), 0o644)
	q, _ := ParseQuery("stateless")
	rs, _, _ := Search(context.Background(), q, Options{Roots: []Root{{Root: openRoot(t, s), Sources: sessionSources, Name: "sess-1"}, {Root: openRoot(t, other), Sources: sessionSources, Name: "sess-2"}}, Limit: 5})
	var cites []string
	for _, r := range rs {
		cites = append(cites, r.Citation)
	}
	// Each citation stands alone: the file's whole path.
	if got, want := strings.Join(cites, " "), s+"/detail/auth-design.md#L15 "+other+"/messages.jsonl#L1 "+s+"/messages.jsonl#L5"; got != want {
		t.Errorf("citations %q, want %q", got, want)
	}
	if len(rs) > 0 && (rs[0].Root != s || rs[0].Session != "sess-1") {
		t.Errorf("first result's root %q (%q), want %q (sess-1)", rs[0].Root, rs[0].Session, s)
	}
}

// A huge content field and invalid UTF-8 do not break recall, and memory
// stays bounded.
func TestHugeLineAndInvalidUTF8(t *testing.T) {
	dir := t.TempDir()
	big := strings.Repeat("lorem ipsum ", 1<<20/12) + "NEEDLE in the middle " + strings.Repeat("dolor sit ", 6<<20/10)
	content := fmt.Sprintf(`{"role":"user","content":%q}`+"\n", big) + "\xff\xfe broken \xc3 NEEDLE bytes\n" + `{"role":"assistant","content":"after"}` + "\n"
	os.WriteFile(filepath.Join(dir, "messages.jsonl"), []byte(content), 0o644)
	q, _ := ParseQuery("needle")
	rs, _, err := Search(context.Background(), q, Options{Roots: []Root{{Root: openRoot(t, dir), Sources: sessionSources}}, Limit: 5, MaxLine: 2 << 20})
	if err != nil {
		t.Fatal(err)
	}
	if len(rs) != 2 {
		t.Fatalf("got %d results, want 2: %+v", len(rs), rs)
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

// corpus writes sessions of generated notes and logs: common and rare
// words, tool calls, non-ASCII text, lines without a final newline.
func corpus(t testing.TB, dir string, sessions, lines int) []string {
	t.Helper()
	rng := rand.New(rand.NewPCG(1, 2))
	words := strings.Fields("deploy build failed migration schema rolled back retried fixed handler tests auth token refresh Grüße Überprüfung café naïve")
	var roots []string
	for s := range sessions {
		d := filepath.Join(dir, fmt.Sprintf("s%02d", s))
		os.MkdirAll(filepath.Join(d, "working-memory", "detail"), 0o755)
		var log, note strings.Builder
		for i := range lines {
			var text strings.Builder
			for range 8 + rng.IntN(10) {
				text.WriteString(words[rng.IntN(len(words))] + " ")
			}
			if rng.IntN(2500) == 0 {
				text.WriteString("zebrafinch ")
			}
			switch rng.IntN(4) {
			case 0:
				fmt.Fprintf(&log, `{"role":"assistant","content":[{"type":"tool_use","name":"Bash","input":{"command":"grep -r %s ."}}]}`+"\n", strings.Fields(text.String())[0])
			case 1:
				fmt.Fprintf(&log, "not json %s\n", text.String())
			default:
				fmt.Fprintf(&log, `{"role":"user","content":%q}`+"\n", fmt.Sprintf("%d %s", i, text.String()))
			}
			if i%5 == 0 {
				fmt.Fprintf(&note, "- note %d: %s\n", i, text.String())
			}
		}
		logText := log.String()
		if s%2 == 1 {
			logText = strings.TrimSuffix(logText, "\n") // no final newline
		}
		os.WriteFile(filepath.Join(d, "messages.jsonl"), []byte(logText), 0o644)
		os.WriteFile(filepath.Join(d, "working-memory", "detail", "notes.md"), []byte(note.String()), 0o644)
		at := time.Date(2026, 1, 1, 0, 0, s, 0, time.UTC)
		os.Chtimes(filepath.Join(d, "messages.jsonl"), at, at)
		os.Chtimes(filepath.Join(d, "working-memory", "detail", "notes.md"), at, at)
		roots = append(roots, d)
	}
	return roots
}

// TestIndexAnswersLikeTheScan: for a table of queries and limits, a search
// through the index returns exactly what the scan returns, in the same
// order, with the same citations, also after the files grew.
func TestIndexAnswersLikeTheScan(t *testing.T) {
	dir := t.TempDir()
	dirs := corpus(t, dir, 4, 3000)
	idx := filepath.Join(dir, "index")
	var roots []Root
	for i, d := range dirs {
		roots = append(roots, Root{Root: openRoot(t, d), Sources: sessionSources, Name: fmt.Sprintf("s%02d", i)})
	}
	build := func(verify bool) {
		for _, r := range roots {
			for _, src := range r.Sources {
				ms, _ := r.Root.Glob(src.Glob)
				for _, m := range ms {
					if _, err := IndexFile(idx, r.Root, m, src.Kind, IndexOptions{BlockSize: 4096, Verify: verify}); err != nil {
						t.Fatal(err)
					}
				}
			}
		}
	}
	compare := func(stage string) {
		for _, c := range append(queries, struct{ name, query string }{"rare", "zebrafinch"}, struct{ name, query string }{"short", "gr"}, struct{ name, query string }{"common", "deploy"}) {
			for _, limit := range []int{1, 10, 1000} {
				q, _ := ParseQuery(c.query)
				scan, _, err := Search(context.Background(), q, Options{Roots: roots, Limit: limit})
				if err != nil {
					t.Fatal(err)
				}
				fast, st, err := Search(context.Background(), q, Options{Roots: roots, Limit: limit, Index: idx})
				if err != nil {
					t.Fatal(err)
				}
				if i, diff := firstDiff(scan, fast); diff {
					t.Errorf("%s %q limit %d: the index answers differently from result %d (%d vs %d results)\nscan  %s\nindex %s", stage, c.query, limit, i, len(scan), len(fast), at(scan, i), at(fast, i))
				}
				if c.name == "rare" && limit == 1000 && st.Indexed > 0 && st.BlocksRead*4 > st.Blocks {
					t.Errorf("%s: a rare word read %d of %d blocks", stage, st.BlocksRead, st.Blocks)
				}
			}
		}
	}
	build(false)
	compare("indexed")
	// The files grow; the index lags until rebuilt and must still agree.
	for _, d := range dirs[:2] {
		f, _ := os.OpenFile(filepath.Join(d, "messages.jsonl"), os.O_WRONLY|os.O_APPEND, 0)
		fmt.Fprintln(f, `{"role":"user","content":"zebrafinch deploy after the index"}`)
		f.Close()
	}
	compare("grown")
	build(false)
	compare("reindexed")
	// A file rewritten in place makes its index stale, never wrong.
	os.WriteFile(filepath.Join(dirs[0], "messages.jsonl"), []byte(`{"role":"user","content":"deploy zebrafinch only"}`+"\n"), 0o644)
	compare("rewritten")
	// Corrupt indexes (cut short, a block header overwritten) are not used;
	// a filter overwritten is found by the daemon's verification; the next
	// build replaces them all.
	build(false)
	corrupt := func(at int64, cut bool) {
		ents, _ := os.ReadDir(idx)
		for _, e := range ents {
			p := filepath.Join(idx, e.Name())
			fi, _ := os.Stat(p)
			if cut {
				os.Truncate(p, fi.Size()/2)
				continue
			}
			f, _ := os.OpenFile(p, os.O_WRONLY, 0)
			f.WriteAt(bytes.Repeat([]byte{0xff}, 8), at)
			f.Close()
		}
	}
	corrupt(0, true)
	compare("cut short")
	build(false)
	corrupt(headerSize, false)
	compare("a block header overwritten")
	build(false)
	corrupt(headerSize+37+2, false)
	build(true)
	compare("a filter overwritten, then verified")
	q, _ := ParseQuery("zebrafinch")
	if _, st, _ := Search(context.Background(), q, Options{Roots: roots, Limit: 10, Index: idx}); st.Indexed == 0 {
		t.Errorf("after a rebuild no index was used: %+v", st)
	}
}

// firstDiff finds the first result where a and b differ.
func firstDiff(a, b []Result) (int, bool) {
	for i := range max(len(a), len(b)) {
		if at(a, i) != at(b, i) {
			return i, true
		}
	}
	return 0, false
}

func at(rs []Result, i int) string {
	if i >= len(rs) {
		return "(none)"
	}
	b, _ := json.Marshal(rs[i])
	return string(b)
}

// FuzzReadIndex: whatever an index file holds, reading it fails cleanly or
// gives blocks within the file.
func FuzzReadIndex(f *testing.F) {
	dir := f.TempDir()
	root := openRoot(f, dir)
	var log strings.Builder
	for i := range 400 {
		fmt.Fprintf(&log, `{"role":"user","content":"line %d about deploys"}`+"\n", i)
	}
	os.WriteFile(filepath.Join(dir, "m.jsonl"), []byte(log.String()), 0o644)
	idxDir := filepath.Join(dir, "idx")
	if _, err := IndexFile(idxDir, root, "m.jsonl", Log, IndexOptions{BlockSize: 1024}); err != nil {
		f.Fatal(err)
	}
	seed, _ := os.ReadFile(indexPath(idxDir, root.Path(), "m.jsonl"))
	f.Add(seed)
	f.Add(seed[:100])
	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) < headerSize {
			return
		}
		idx, err := decodeHeader(data[:headerSize])
		if err != nil || int64(len(data)) < idx.blocksEnd {
			return
		}
		idx.data = data[:idx.blocksEnd]
		if idx.parse(true) != nil {
			return
		}
		for _, b := range idx.blocks {
			b.mayHold([]uint32{1, 2, 3})
		}
	})
}

func FuzzSearch(f *testing.F) {
	f.Add([]byte(`{"role":"user","content":"JWT"}`+"\n"), "jwt")
	f.Add([]byte("a\nb\xffJ\n"), `"b j"`)
	f.Fuzz(func(t *testing.T, content []byte, query string) {
		q, err := ParseQuery(query)
		if err != nil {
			return
		}
		dir := t.TempDir()
		os.WriteFile(filepath.Join(dir, "messages.jsonl"), content, 0o644)
		rs, _, err := Search(context.Background(), q, Options{Roots: []Root{{Root: openRoot(t, dir), Sources: sessionSources}}, Limit: 1000})
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

// The scan finds candidates by the query's longest run of bytes JSON
// writers never escape, searching for its byte rarest in the data itself:
// a term with punctuation is one anchor, a term that JSON escapes in part
// (a slash, non-ASCII) is still found in its escaped form, and the byte
// chosen follows the corpus (one on every line of this log is not it).
func TestAnchorsSurviveJSONAndFollowTheData(t *testing.T) {
	dir := t.TempDir()
	var b strings.Builder
	for i := range 20000 {
		fmt.Fprintf(&b, `{"role":"user","content":"bb bzb step %d of the rollout, %s"}`+"\n", i, []string{"qq", "zz"}[i%2])
	}
	b.WriteString(`{"role":"assistant","content":"zanzibar-quokka found deploy\/web-3 and caf\u00e9 ok"}` + "\n")
	os.WriteFile(filepath.Join(dir, "messages.jsonl"), []byte(b.String()), 0o644)
	root := openRoot(t, dir)
	for _, tt := range []struct{ query, anchor string }{
		{"zanzibar-quokka", "zanzibar-quokka"},
		{"deploy/web-3", "deploy"},
		{"café", "caf"},
		{"ZANZIBAR-Quokka", "zanzibar-quokka"},
	} {
		q, err := ParseQuery(tt.query)
		if err != nil {
			t.Fatal(err)
		}
		if string(q.Anchor) != tt.anchor {
			t.Errorf("%q: anchor %q, want %q", tt.query, q.Anchor, tt.anchor)
		}
		rs, _, err := Search(context.Background(), q, Options{Roots: []Root{{Root: root, Sources: []Source{{Glob: "messages.jsonl", Kind: Log, Label: "messages"}}}}, Limit: 5})
		if err != nil || len(rs) != 1 || rs[0].LineNumber != 20001 {
			t.Errorf("%q: got %+v (%v), want line 20001", tt.query, rs, err)
		}
	}
	// 'z' and 'q' fill this log; 'k' (of quokka) does not.
	q, _ := ParseQuery("zanzibar-quokka")
	sample, _ := os.ReadFile(filepath.Join(dir, "messages.jsonl"))
	if got := q.Anchor[query.RareFor(q.Anchor, sample[:64<<10])]; got != 'k' && got != '-' {
		t.Errorf("byte chosen: %q, want one rare in the data (k or -)", got)
	}
}

// TestQueriesWithTheDecodedMarks: a query may hold what recall prints of a
// message and its raw line does not (the role label, the marks of tool
// calls and results); such lines are still candidates.
func TestQueriesWithTheDecodedMarks(t *testing.T) {
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "s.jsonl"), []byte(
		`{"type":"user","message":{"role":"user","content":[{"type":"tool_result","content":"(Bash completed with no output)"}]}}`+"\n"+
			`{"type":"assistant","message":{"role":"assistant","content":[{"type":"tool_use","name":"Bash","input":{"command":"ls -la"}}]}}`+"\n"+
			`{"role":"user","content":"deploy at noon"}`+"\n"), 0o644)
	root := openRoot(t, dir)
	for _, tt := range []struct {
		query string
		line  int64
	}{
		{`"[tool result] (Bash completed with no output)"`, 1},
		{`"[tool: Bash] {"`, 2},
		{`"user: deploy at"`, 3},
		{`"[tool result]"`, 1},
	} {
		q, err := ParseQuery(tt.query)
		if err != nil {
			t.Fatal(err)
		}
		rs, _, err := Search(context.Background(), q, Options{Roots: []Root{{Root: root, Sources: []Source{{Glob: "s.jsonl", Kind: Log, Label: "messages"}}}}, Limit: 5})
		if err != nil || len(rs) != 1 || rs[0].LineNumber != tt.line {
			t.Errorf("%s: got %+v (%v), want line %d", tt.query, rs, err, tt.line)
		}
	}
}
