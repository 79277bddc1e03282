package factsepisodes_test

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/memwatch/memwatch/compact/llmtest"
	"github.com/memwatch/memwatch/confine"
	"github.com/memwatch/memwatch/daemon/daemontest"
	"github.com/memwatch/memwatch/layout/factsepisodes"
	"github.com/memwatch/memwatch/rewrite"
	"github.com/memwatch/memwatch/state"
)

var update = flag.Bool("update", false, "rewrite golden files")

// copyTree copies testdata/memory to a fresh root.
func copyTree(t *testing.T) string {
	t.Helper()
	root := filepath.Join(t.TempDir(), "memory")
	filepath.WalkDir("testdata/memory", func(p string, d os.DirEntry, err error) error {
		rel, _ := filepath.Rel("testdata/memory", p)
		if d.IsDir() {
			return os.MkdirAll(filepath.Join(root, rel), 0o755)
		}
		b, _ := os.ReadFile(p)
		return os.WriteFile(filepath.Join(root, rel), b, 0o644)
	})
	return root
}

// openRoot opens a test root.
func openRoot(t *testing.T, dir string) *confine.Root {
	t.Helper()
	r, err := confine.Open(dir, confine.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	return r
}

func TestIndexGolden(t *testing.T) {
	root := copyTree(t)
	es, _, err := factsepisodes.Index(openRoot(t, root), "INDEX.md")
	if err != nil {
		t.Fatal(err)
	}
	got := factsepisodes.FormatIndex(es)
	if *update {
		os.WriteFile("testdata/index.golden", []byte(got), 0o644)
	}
	want, _ := os.ReadFile("testdata/index.golden")
	if got != string(want) {
		t.Errorf("index:\n%s\nwant:\n%s", got, want)
	}
}

func TestSummaryLine(t *testing.T) {
	src := []byte("# Project Facts\n\n- Stack: Bun\n- Conventions: tabs\n")
	d := factsepisodes.Parse(src, false)
	if got, want := d.HeuristicSummary(10, false), "stack, conventions"; got != want {
		t.Errorf("summary = %q, want %q", got, want)
	}
	if got, want := string(d.WithSummary("stack, conventions")), "# Project Facts\n\n> Summary: stack, conventions\n\n- Stack: Bun\n- Conventions: tabs\n"; got != want {
		t.Errorf("inserted:\n%q\nwant\n%q", got, want)
	}
	ep := factsepisodes.Parse([]byte("# E\n\n> Summary: old\n\n## A\n- Summary: one two three four five six\n## B\n- Summary: seven eight nine ten eleven\n"), true)
	// Over the budget: whole phrases, the newest first, none cut.
	if got, want := ep.HeuristicSummary(10, true), "seven eight nine ten eleven"; got != want {
		t.Errorf("episode summary = %q, want %q", got, want)
	}
	var many strings.Builder
	many.WriteString("# Fixes\n\n")
	for i := 1; i <= 15; i++ {
		fmt.Fprintf(&many, "## Fix %d\n- Summary: thing %d fixed\n", i, i)
	}
	if got, want := factsepisodes.Parse([]byte(many.String()), true).HeuristicSummary(10, true), "thing 15 fixed, thing 14 fixed, thing 13 fixed"; got != want {
		t.Errorf("15 entries in 10 words: got %q, want %q", got, want)
	}
	if got, want := string(ep.WithSummary("new")), "# E\n\n> Summary: new\n\n## A\n- Summary: one two three four five six\n## B\n- Summary: seven eight nine ten eleven\n"; got != want {
		t.Errorf("replaced = %q", got)
	}
}

func TestSandbox(t *testing.T) {
	dir := copyTree(t)
	root := openRoot(t, dir)
	outside := filepath.Join(filepath.Dir(dir), "secret")
	os.WriteFile(outside, []byte("s"), 0o644)
	os.Symlink("/etc/passwd", filepath.Join(dir, "facts", "passwd.md"))
	os.Symlink(outside, filepath.Join(dir, "facts", "secret.md"))
	rw := rewrite.New(nil, slog.New(slog.DiscardHandler))
	ctx := context.Background()
	for _, p := range []string{"../secret", outside, "facts/passwd.md", "facts/secret.md", "facts/../../secret"} {
		if _, err := factsepisodes.Read(root, p); !errors.Is(err, confine.ErrOutside) {
			t.Errorf("read %q: %v, want ErrOutside", p, err)
		}
		if _, err := factsepisodes.Append(ctx, rw, root, "", p, []byte("x"), ""); !errors.Is(err, confine.ErrOutside) && !errors.Is(err, factsepisodes.ErrNotMemory) {
			t.Errorf("append %q: %v, want ErrOutside", p, err)
		}
		if _, err := factsepisodes.Write(ctx, rw, root, "", p, []byte("x")); !errors.Is(err, confine.ErrOutside) && !errors.Is(err, factsepisodes.ErrNotMemory) {
			t.Errorf("write %q: %v, want ErrOutside", p, err)
		}
		if _, _, err := factsepisodes.ApplyPatches(ctx, rw, root, "", p, []factsepisodes.Patch{{Old: "root", New: "pwned"}}); !errors.Is(err, confine.ErrOutside) {
			t.Errorf("patch %q: %v, want ErrOutside", p, err)
		}
	}
	if b, _ := os.ReadFile(outside); string(b) != "s" {
		t.Error("a file outside the root changed")
	}
	es, skipped, err := factsepisodes.Index(root, "INDEX.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range es {
		if strings.Contains(e.Path, "secret") || strings.Contains(e.Path, "passwd") {
			t.Errorf("index lists %s, a symlink leading outside the root", e.Path)
		}
	}
	if len(skipped) != 2 {
		t.Errorf("skipped = %v, want the two symlinks leading out", skipped)
	}
}

func TestPatch(t *testing.T) {
	dir := copyTree(t)
	root := openRoot(t, dir)
	rw := rewrite.New(nil, slog.New(slog.DiscardHandler))
	ctx := context.Background()
	orig, _ := os.ReadFile(filepath.Join(dir, "facts/user.md"))
	if _, _, err := factsepisodes.ApplyPatches(ctx, rw, root, "", "facts/user.md", []factsepisodes.Patch{{Old: "Zhang San", New: "Li Si"}, {Old: "nowhere", New: "x"}}); !errors.Is(err, factsepisodes.ErrPatch) {
		t.Errorf("absent old text: %v", err)
	}
	if _, _, err := factsepisodes.ApplyPatches(ctx, rw, root, "", "facts/user.md", []factsepisodes.Patch{{Old: "- ", New: "* "}}); !errors.Is(err, factsepisodes.ErrPatch) || !strings.Contains(err.Error(), "ambiguous") {
		t.Errorf("ambiguous old text: %v", err)
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "facts/user.md")); string(b) != string(orig) {
		t.Fatal("a failed patch wrote")
	}
	n, _, err := factsepisodes.ApplyPatches(ctx, rw, root, "", "facts/user.md", []factsepisodes.Patch{{Old: "Zhang San", New: "Li Si"}, {Old: "Full-stack", New: "Backend"}})
	if err != nil || n != 2 {
		t.Fatalf("patch: %d, %v", n, err)
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "facts/user.md")); !strings.Contains(string(b), "- Name: Li Si") || !strings.Contains(string(b), "Backend developer") {
		t.Errorf("after patch: %s", b)
	}
}

// TestPatchCRLF: an LF patch applies to a CRLF file, which keeps CRLF.
func TestPatchCRLF(t *testing.T) {
	dir := t.TempDir()
	os.MkdirAll(filepath.Join(dir, "facts"), 0o755)
	src := "# User\r\n\r\n- Name: Zhang San\r\n- Role: dev\r\n"
	os.WriteFile(filepath.Join(dir, "facts/user.md"), []byte(src), 0o644)
	rw := rewrite.New(nil, slog.New(slog.DiscardHandler))
	n, _, err := factsepisodes.ApplyPatches(context.Background(), rw, openRoot(t, dir), "", "facts/user.md",
		[]factsepisodes.Patch{{Old: "- Name: Zhang San\n- Role: dev", New: "- Name: Li Si\n- Role: lead"}})
	if err != nil || n != 1 {
		t.Fatalf("patch: %d, %v", n, err)
	}
	got, _ := os.ReadFile(filepath.Join(dir, "facts/user.md"))
	if want := "# User\r\n\r\n- Name: Li Si\r\n- Role: lead\r\n"; string(got) != want {
		t.Errorf("got %q, want %q", got, want)
	}
}

// TestWriteJournaledAndUndoable: memory_write creates and overwrites a fact
// file; the overwrite is archived and undo restores it.
func TestWriteJournaledAndUndoable(t *testing.T) {
	dir := t.TempDir()
	ctx := context.Background()
	db, err := state.Open(ctx, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	rw := rewrite.New(db, slog.New(slog.DiscardHandler))
	root := openRoot(t, dir)
	if _, err := factsepisodes.Write(ctx, rw, root, "", "facts/team/alice.md", []byte("# Alice\n- Role: lead\n")); err != nil {
		t.Fatal(err)
	}
	out, err := factsepisodes.Write(ctx, rw, root, "", "facts/team/alice.md", []byte("# Alice\n- Role: CTO\n"))
	if err != nil || out.Archive == "" {
		t.Fatalf("overwrite: %+v, %v", out, err)
	}
	if _, err := rw.Undo(ctx, out.Record, false); err != nil {
		t.Fatal(err)
	}
	if got := read(filepath.Join(dir, "facts/team/alice.md")); got != "# Alice\n- Role: lead\n" {
		t.Errorf("after undo: %q", got)
	}
	for _, bad := range []string{"facts/x.txt", ".memwatch/x.md", "episodes/archive/x.md"} {
		if _, err := factsepisodes.Write(ctx, rw, root, "", bad, []byte("x")); !errors.Is(err, factsepisodes.ErrNotMemory) {
			t.Errorf("write %s: %v, want ErrNotMemory", bad, err)
		}
	}
}

func runDaemon(t *testing.T, root, extra, stateDir string) func() {
	t.Helper()
	src := fmt.Sprintf("version: 1\nstores:\n  - name: mem\n    layout: facts-episodes\n    paths: [%q]\n    settle: 50ms\n    cooldown: 100ms\n%s", root, extra)
	return daemontest.Run(t, src, stateDir).Stop
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	daemontest.WaitFor(t, what, 5*time.Second, cond)
}

func read(p string) string { b, _ := os.ReadFile(p); return string(b) }

func summaryRecords(t *testing.T, stateDir string) int {
	db, err := state.Open(context.Background(), stateDir)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	recs, _ := db.Journal(context.Background(), state.Filter{Rule: factsepisodes.RuleSummary, Outcome: state.Done})
	return len(recs)
}

func TestSummariesAndIndexFollowChanges(t *testing.T) {
	root := copyTree(t)
	stateDir := t.TempDir()
	stop := runDaemon(t, root, "", stateDir)
	// project.md has no summary line: memwatch writes one; the index follows.
	waitFor(t, "project summary", func() bool {
		return strings.Contains(read(filepath.Join(root, "facts/project.md")), "> Summary: stack, conventions\n")
	})
	waitFor(t, "INDEX.md", func() bool {
		return strings.Contains(read(filepath.Join(root, "INDEX.md")), "- facts/project.md (") && strings.Contains(read(filepath.Join(root, "INDEX.md")), "): stack, conventions\n")
	})
	if got, _ := exec(root); read(filepath.Join(root, "INDEX.md")) != got {
		t.Errorf("INDEX.md differs from memwatch index:\n%s\nvs\n%s", read(filepath.Join(root, "INDEX.md")), got)
	}
	// The hand-written summary of user.md survives an unrelated edit.
	user := filepath.Join(root, "facts/user.md")
	os.WriteFile(user, []byte(strings.Replace(read(user), "Zhang San", "Zhang San (张三)", 1)), 0o644)
	time.Sleep(400 * time.Millisecond)
	if !strings.Contains(read(user), "> Summary: user name, language, role\n") {
		t.Errorf("hand-written summary replaced after an edit that kept the same facts:\n%s", read(user))
	}
	// A new episode entry changes the set: the summary is regenerated.
	ep := filepath.Join(root, "episodes/2026-02.md")
	f, _ := os.OpenFile(ep, os.O_WRONLY|os.O_APPEND, 0)
	f.WriteString("\n## Config refactor\n- Summary: config.ts → zod schema\n- Date: 2026-02-25\n")
	f.Close()
	waitFor(t, "regenerated episode summary", func() bool {
		return strings.Contains(read(ep), "> Summary: config.ts → zod schema, UUID → 16-char hex short ID\n")
	})
	time.Sleep(300 * time.Millisecond)
	stop()
	n := summaryRecords(t, stateDir)
	// A second, identical event writes nothing.
	os.Chtimes(ep, time.Now(), time.Now())
	os.WriteFile(ep, []byte(read(ep)), 0o644)
	stop = runDaemon(t, root, "", stateDir)
	time.Sleep(500 * time.Millisecond)
	stop()
	if m := summaryRecords(t, stateDir); m != n || n != 2 {
		t.Errorf("summary rewrites: %d, then %d after an identical event and a restart; want 2 and 2", n, m)
	}
}

func exec(dir string) (string, error) {
	root, err := confine.Open(dir, confine.Options{})
	if err != nil {
		return "", err
	}
	defer root.Close()
	es, _, err := factsepisodes.Index(root, "INDEX.md")
	return factsepisodes.FormatIndex(es), err
}

func TestWeekSplitKeepsEveryEntryOnce(t *testing.T) {
	root := copyTree(t)
	ep := filepath.Join(root, "episodes/2026-03.md")
	var b strings.Builder
	b.WriteString("# 2026-03 Episodes\n\n> Summary: lots\n")
	for d := 1; d <= 31; d++ {
		fmt.Fprintf(&b, "\n## Task %d\n- Summary: task %d done\n- Date: 2026-03-%02d\n- Detail: %s\n", d, d, d, strings.Repeat("x", 60))
	}
	b.WriteString("\n## Undated note\n- Summary: no date here\n")
	os.WriteFile(ep, []byte(b.String()), 0o644)
	runDaemon(t, root, "    episodes_max_size: 1KiB\n", t.TempDir())
	waitFor(t, "split", func() bool { return !strings.Contains(read(ep), "## Task 1\n") })
	waitFor(t, "summary lines on every week file", func() bool {
		weeks, _ := filepath.Glob(filepath.Join(root, "episodes", "2026-03-W*.md"))
		for _, w := range weeks {
			if !strings.Contains(read(w), "> Summary: task ") {
				return false
			}
		}
		return len(weeks) == 6
	})
	weeks, _ := filepath.Glob(filepath.Join(root, "episodes", "2026-03-W*.md"))
	if len(weeks) != 6 {
		t.Errorf("week files = %v, want 6 (March 2026 spans ISO weeks 09-14)", weeks)
	}
	all := read(ep)
	for _, w := range weeks {
		all += read(w)
		if !strings.Contains(read(w), "> Summary: task ") {
			t.Errorf("%s has no summary line", w)
		}
	}
	for d := 1; d <= 31; d++ {
		if n := strings.Count(all, fmt.Sprintf("## Task %d\n", d)); n != 1 {
			t.Errorf("Task %d present %d times", d, n)
		}
	}
	if !strings.Contains(read(ep), "## Undated note") {
		t.Error("the undated entry left the month file")
	}
	archives, _ := filepath.Glob(filepath.Join(root, "episodes", "archive", "2026-03-*.md"))
	if len(archives) != 1 || read(archives[0]) != b.String() {
		t.Errorf("archive = %v; want the original month", archives)
	}
}

func FuzzParse(f *testing.F) {
	f.Add([]byte("# T\n\n> Summary: a\n\n## E\n- Summary: s\n- Date: 2026-02-24\n"), true)
	f.Add([]byte("- Name: x\n* y\n> Summary:"), false)
	f.Fuzz(func(t *testing.T, src []byte, episodes bool) {
		d := factsepisodes.Parse(src, episodes)
		out := d.WithSummary("s")
		again := factsepisodes.Parse(out, episodes)
		if again.Summary != "s" {
			t.Fatalf("summary line not found after WithSummary: %q", out)
		}
	})
}

func TestOldEpisodesSummarizedWithLLM(t *testing.T) {
	srv := llmtest.New(t, llmtest.Step{Content: "## 2025-01\n- Summary: logger, IDs, config → stable\n- Lessons:\n  - pino workers cannot load .ts", Tokens: 200})
	root := copyTree(t)
	old := "# 2025-01 Episodes\n\n> Summary: old work\n\n## Old task\n- Summary: did it\n- Date: 2025-01-10\n"
	os.WriteFile(filepath.Join(root, "episodes/2025-01.md"), []byte(old), 0o644)
	extra := fmt.Sprintf("    compactor: llm\n    summarize_after: 300d\nllm:\n  default:\n    base_url: %s\n    model: fake\n", srv.BaseURL())
	runDaemon(t, root, extra, t.TempDir())
	waitFor(t, "year summary", func() bool {
		return strings.Contains(read(filepath.Join(root, "episodes/2025-summary.md")), "## 2025-01\n- Summary: logger, IDs")
	})
	waitFor(t, "month archived", func() bool { _, err := os.Stat(filepath.Join(root, "episodes/2025-01.md")); return os.IsNotExist(err) })
	if got := read(filepath.Join(root, "episodes/archive/2025-01.md")); got != old {
		t.Errorf("archive = %q", got)
	}
	months := 0
	for _, r := range srv.Requests() {
		if strings.Contains(r.Messages[0].Content, "compress one month") {
			months++
			if !strings.Contains(r.Messages[1].Content, "2025-01.md") {
				t.Errorf("a month other than 2025-01 was compressed")
			}
		}
	}
	if months != 1 {
		t.Errorf("month compressions = %d, want 1 (2026-02 is recent)", months)
	}
	if _, err := os.Stat(filepath.Join(root, "episodes/2026-02.md")); err != nil {
		t.Error("a recent month was archived")
	}
}
