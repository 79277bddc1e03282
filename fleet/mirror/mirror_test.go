package mirror

import (
	"context"
	"database/sql"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/memwatch/memwatch/confine"
	"github.com/memwatch/memwatch/fleet/hostname"
	"github.com/memwatch/memwatch/recall"
	"github.com/memwatch/memwatch/session"
	"github.com/memwatch/memwatch/spool"
	"github.com/memwatch/memwatch/versions"
)

// host is a host's agent directory and its state, as the central node
// restores it (here written directly).
type host struct {
	agent, state string
	root         *confine.Root
	sp           *spool.Spool
	vs           *versions.Store
}

func newHost(t *testing.T) *host {
	t.Helper()
	ctx := context.Background()
	h := &host{agent: t.TempDir(), state: t.TempDir()}
	os.MkdirAll(filepath.Join(h.agent, "sessions"), 0o755)
	var err error
	if h.root, err = confine.Open(h.agent, confine.Options{}); err != nil {
		t.Fatal(err)
	}
	if h.sp, err = spool.Open(ctx, h.state); err != nil {
		t.Fatal(err)
	}
	if h.vs, err = versions.Open(ctx, h.state); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.sp.Close(); h.vs.Close(); h.root.Close() })
	return h
}

func (h *host) write(t *testing.T, rel, content string, appending bool) {
	t.Helper()
	flag := os.O_WRONLY | os.O_CREATE | os.O_TRUNC
	if appending {
		flag = os.O_WRONLY | os.O_CREATE | os.O_APPEND
	}
	f, err := os.OpenFile(filepath.Join(h.agent, rel), flag, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	f.WriteString(content)
	f.Close()
	ctx := context.Background()
	if strings.HasSuffix(rel, ".jsonl") {
		if _, err := h.sp.Capture(ctx, h.root, rel, spool.Options{IsMessage: session.IsMessage}); err != nil {
			t.Fatal(err)
		}
		return
	}
	if _, _, _, err := h.vs.Capture(ctx, h.root, rel, func(string) (string, int64) { return "agent", 0 }); err != nil {
		t.Fatal(err)
	}
}

func msg(role, text string) string {
	return fmt.Sprintf(`{"role":%q,"content":%q}`+"\n", role, text)
}

const meta = `{"_type":"metadata","updated_at":"x"}` + "\n"

// search asks the host's copy as a central node does.
func search(t *testing.T, hostDir, query string) []recall.Result {
	t.Helper()
	roots, done, err := Roots(hostDir, "box-1", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer done()
	q, err := recall.ParseQuery(query)
	if err != nil {
		t.Fatal(err)
	}
	res, _, err := recall.Search(context.Background(), q, recall.Options{Roots: roots, NameRoots: true, Limit: 20})
	if err != nil {
		t.Fatal(err)
	}
	return res
}

func citations(res []recall.Result) []string {
	var out []string
	for _, r := range res {
		out = append(out, r.Citation)
	}
	return out
}

func update(t *testing.T, c *Copy) Stats {
	t.Helper()
	st, err := c.Update(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return st
}

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

func TestCopyIsCitedAsTheHostCitesIt(t *testing.T) {
	h := newHost(t)
	h.write(t, "sessions/a.jsonl", meta+msg("user", "the deploy key is kumquat")+meta+msg("assistant", "noted kumquat"), false)
	h.write(t, "MEMORY.md", "# Memory\n\n- staging runs on port 8443\n", false)

	c, err := New("box-1", h.state, quiet)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if st := update(t, c); st.Lines != 2 || st.Files != 1 {
		t.Errorf("first update: got %+v, want 2 lines, 1 file", st)
	}
	log := h.agent + "/sessions/a.jsonl"
	got := strings.Join(citations(search(t, h.state, "kumquat")), " ")
	if want := "box-1:" + log + "#L4 box-1:" + log + "#L2"; got != want {
		t.Errorf("kumquat: got %s, want %s", got, want)
	}
	res := search(t, h.state, "8443")
	if len(res) != 1 || res[0].Citation != "box-1:"+h.agent+"/MEMORY.md#L3" || res[0].Host != "box-1" || res[0].Root != h.agent || res[0].Source != "memory" {
		t.Errorf("8443: got %+v, want MEMORY.md#L3 of box-1", res)
	}

	// Appended lines: only they are copied.
	h.write(t, "sessions/a.jsonl", msg("user", "rotate the kumquat key on friday"), true)
	if st := update(t, c); st.Lines != 1 {
		t.Errorf("second update copied %d lines, want 1", st.Lines)
	}
	if st := update(t, c); st.Lines != 0 || st.Indexed != 0 {
		t.Errorf("an update with nothing new: got %+v, want nothing", st)
	}
	if got := citations(search(t, h.state, "friday")); len(got) != 1 || got[0] != "box-1:"+log+"#L5" {
		t.Errorf("friday: got %v, want L5", got)
	}

	// Rewritten shorter: a new generation, cited as one.
	h.write(t, "sessions/a.jsonl", msg("user", "a fresh start with pomelo"), false)
	h.write(t, "MEMORY.md", "# Memory\n\n- staging moved to port 9443\n", false)
	update(t, c)
	if got := citations(search(t, h.state, "pomelo")); len(got) != 1 || got[0] != "box-1:"+log+"@2#L1" {
		t.Errorf("pomelo: got %v, want @2#L1", got)
	}
	// Trimmed to its last message and a new one: the kept one is carried
	// (cited where it was captured), the new one is line 2 of generation 3.
	h.write(t, "sessions/a.jsonl", msg("user", "a fresh start with pomelo")+msg("assistant", "the quince is ripe"), false)
	h.write(t, "sessions/a.jsonl", msg("assistant", "the quince is ripe")+msg("user", "and the tamarind too"), false)
	update(t, c)
	for q, want := range map[string]string{"pomelo": log + "@2#L1", "quince": log + "@2#L2", "tamarind": log + "@3#L2", "friday": log + "#L5"} {
		if got := citations(search(t, h.state, q)); len(got) != 1 || got[0] != "box-1:"+want {
			t.Errorf("%s after a trim: got %v, want %s", q, got, want)
		}
	}
	if got := citations(search(t, h.state, "8443")); len(got) != 0 {
		t.Errorf("the old version of MEMORY.md is still found: %v", got)
	}
	if got := citations(search(t, h.state, "9443")); len(got) != 1 {
		t.Errorf("the new version of MEMORY.md: got %v", got)
	}
}

func TestCopyRecoversFromACrash(t *testing.T) {
	h := newHost(t)
	var b strings.Builder
	for i := range 50 {
		b.WriteString(msg("user", fmt.Sprintf("line %d about persimmon", i)))
	}
	h.write(t, "sessions/a.jsonl", b.String(), false)
	c, err := New("box-1", h.state, quiet)
	if err != nil {
		t.Fatal(err)
	}
	update(t, c)
	c.Close()
	// Killed after a write the manifest does not know of: the file is
	// longer than it says.
	var gen string
	filepath.Walk(filepath.Join(h.state, Dir), func(p string, fi os.FileInfo, err error) error {
		if err == nil && strings.HasSuffix(p, "a.jsonl") {
			gen = p
		}
		return nil
	})
	f, _ := os.OpenFile(gen, os.O_WRONLY|os.O_APPEND, 0)
	f.WriteString(msg("user", "half written persimmon"))
	f.Close()

	c, err = New("box-1", h.state, quiet)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	h.write(t, "sessions/a.jsonl", msg("user", "line 50 about persimmon"), true)
	if st := update(t, c); st.Lines != 1 {
		t.Errorf("after the crash: copied %d lines, want the one new line", st.Lines)
	}
	res := search(t, h.state, "persimmon")
	if len(res) != 20 || strings.Contains(res[0].Text, "half written") || !strings.HasSuffix(res[0].Citation, "#L51") {
		t.Errorf("after the crash: got %d results, first %+v; want 20, the newest line 51", len(res), res[0])
	}
	// A copy that lost its end (a power loss): copied again whole.
	c.Close()
	fi, _ := os.Stat(gen)
	os.Truncate(gen, fi.Size()/2)
	if c, err = New("box-1", h.state, quiet); err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if st := update(t, c); st.Lines != 51 {
		t.Errorf("after a power loss: copied %d lines, want all 51 again", st.Lines)
	}
	if res := search(t, h.state, "persimmon"); len(res) != 20 || !strings.HasSuffix(res[0].Citation, "#L51") {
		t.Errorf("after a power loss: first %+v; want the newest line 51", res[0])
	}
}

func TestLocalRel(t *testing.T) {
	for _, tc := range []struct {
		rel  string
		want bool
	}{
		{"sessions/a.jsonl", true},
		{"openclaw.db#conv-1", true},
		{"../etc/passwd", false},
		{"/etc/passwd", false},
		{"a/../../b", false},
		{"", false},
		{"a\x00b", false},
		{"x" + confine.TempMarker + "1", false},
		{strings.Repeat("a", maxRel+1), false},
	} {
		if got := localRel(tc.rel); got != tc.want {
			t.Errorf("localRel(%q) = %v, want %v", tc.rel, got, tc.want)
		}
	}
}

// citationRE is the expression splitCitation replaced.
var citationRE = regexp.MustCompile(`^([A-Za-z0-9][A-Za-z0-9._-]{0,127}):(/.*)$`)

// FuzzCitations: what a user or a client passes as a host's path or
// citation never panics, and what is taken names a host and an absolute
// path; a copy's citation maps into the generation holding its line.
func FuzzCitations(f *testing.F) {
	f.Add("box-1:/home/a/s.jsonl#L5")
	f.Add("box-1:/home/a/s.jsonl@3#L5-9")
	f.Add("../x:/etc")
	f.Add("h:/p/log#L0")
	f.Add("box-1:/a\nb")
	f.Add("box-1:a")
	f.Fuzz(func(t *testing.T, s string) {
		if host, path, ok := SplitHostPath(s); ok && (!hostname.Valid(host) || !filepath.IsAbs(path)) {
			t.Fatalf("SplitHostPath(%q) = %q, %q", s, host, path)
		}
		// splitCitation reads what the expression it replaced read.
		host, cite, ok := splitCitation(s)
		if m := citationRE.FindStringSubmatch(s); ok != (m != nil) || ok && (host != m[1] || cite != m[2]) {
			t.Fatalf("splitCitation(%q) = %q, %q, %v; the expression: %q", s, host, cite, ok, m)
		}
		gens := map[string][]genCopy{"log": {{Gen: 1, Start: 1, Lines: 3}, {Gen: 2, Start: 4, Lines: 5}}}
		if c, line, ok := recite("h:/p/", gens, s); ok {
			if line < 1 || !strings.HasPrefix(c, "h:/p/log") {
				t.Fatalf("recite(%q) = %q, %d", s, c, line)
			}
		}
	})
}

// TestHostileHostStaysInItsCopy: a host's replicated state is the host's
// to write, and a compromised host can write anything there. Names that
// leave the copy, and a line number far past the last, are not copied:
// nothing is written outside the copy, and the copy stays small; a line
// of 20 MB is never read.
func TestHostileHostStaysInItsCopy(t *testing.T) {
	h := newHost(t)
	h.write(t, "sessions/a.jsonl", msg("user", "an honest line about figs"), false)
	h.write(t, "sessions/b.jsonl", msg("user", "a line about plums"), false)
	h.write(t, "sessions/c.jsonl", msg("user", "a line about dates"), false)
	h.write(t, "MEMORY.md", "# Memory\n\n- a fact about limes\n", false)
	ctx := context.Background()
	// The host's state, rewritten as a hostile host would.
	for _, db := range []struct{ file, q string }{
		{spool.FileName, `UPDATE logs SET path='../../../escaped.jsonl' WHERE path='sessions/b.jsonl'`},
		{spool.FileName, `UPDATE lines SET line=line+1000000000 WHERE log=(SELECT id FROM logs WHERE path='sessions/c.jsonl')`},
		{spool.FileName, `INSERT INTO lines (log, seq, gen, line, hash, msg, size, time, data) SELECT log, seq+1, gen, line+1, 0, 1, 1, 0, zeroblob(20000000) FROM lines WHERE log=(SELECT id FROM logs WHERE path='sessions/a.jsonl')`},
		{versions.FileName, `UPDATE files SET path='../../escaped.md'`},
	} {
		sdb, err := sql.Open("sqlite", filepath.Join(h.state, db.file))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := sdb.ExecContext(ctx, db.q); err != nil {
			t.Fatal(err)
		}
		sdb.Close()
	}
	c, err := New("box-1", h.state, quiet)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	st := update(t, c)
	if st.Lines != 1 || st.Skipped != 3 {
		t.Errorf("copied %d lines, skipped %d; want the honest line, three skipped", st.Lines, st.Skipped)
	}
	var outside []string
	filepath.Walk(filepath.Dir(h.state), func(p string, fi os.FileInfo, err error) error {
		if err == nil && strings.Contains(fi.Name(), "escaped") {
			outside = append(outside, p)
		}
		return nil
	})
	var size int64
	filepath.Walk(filepath.Join(h.state, Dir), func(p string, fi os.FileInfo, err error) error {
		if err == nil && !fi.IsDir() {
			size += fi.Size()
		}
		return nil
	})
	if len(outside) > 0 || size > 1<<20 {
		t.Errorf("files a hostile host named: %v; the copy is %d bytes", outside, size)
	}
	if got := citations(search(t, h.state, "figs")); len(got) != 1 {
		t.Errorf("the honest line: %v", got)
	}
}
