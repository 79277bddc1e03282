package rewrite

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/memwatch/memwatch/confine"
	"github.com/memwatch/memwatch/state"
)

func newRewriter(t *testing.T) *Rewriter {
	t.Helper()
	db, err := state.Open(context.Background(), t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	w := New(db, slog.New(slog.NewTextHandler(t.Output(), nil)))
	w.Now = func() time.Time { return time.Date(2026, 1, 15, 14, 30, 0, 0, time.Local) }
	return w
}

// open opens dir as a root for the test.
func open(t testing.TB, dir string) *confine.Root {
	t.Helper()
	r, err := confine.Open(dir, confine.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	return r
}

func write(t *testing.T, p, s string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(s), 0o640); err != nil {
		t.Fatal(err)
	}
}

func read(t *testing.T, p string) string {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func constant(s string) func(context.Context, []byte) ([]byte, error) {
	return func(context.Context, []byte) ([]byte, error) { return []byte(s), nil }
}

func TestApplyArchivesAndJournals(t *testing.T) {
	w := newRewriter(t)
	root := t.TempDir()
	target := filepath.Join(root, "memory.md")
	write(t, target, "old content\n")
	rec := &state.Record{Store: "s", Rule: "compact"}
	out, err := w.Apply(context.Background(), Request{Root: open(t, root), Target: "memory.md", Archive: "memory/2026-01-15-1430.md", Compute: constant("new\n")}, rec)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := out.Status, state.Done; got != want {
		t.Fatalf("status = %q, want %q", got, want)
	}
	if got, want := read(t, target), "new\n"; got != want {
		t.Errorf("target = %q, want %q", got, want)
	}
	if got, want := read(t, filepath.Join(root, "memory/2026-01-15-1430.md")), "old content\n"; got != want {
		t.Errorf("archive = %q, want %q", got, want)
	}
	fi, _ := os.Stat(target)
	if got, want := fi.Mode().Perm(), os.FileMode(0o640); got != want {
		t.Errorf("mode = %v, want %v", got, want)
	}
	recs, err := w.DB.Journal(context.Background(), state.Filter{})
	if err != nil || len(recs) != 1 {
		t.Fatalf("journal = %v, %v; want one record", recs, err)
	}
	r := recs[0]
	if r.Outcome != state.Done || r.Archive != "memory/2026-01-15-1430.md" || r.BeforeSHA != Hash([]byte("old content\n")) || r.AfterSHA != Hash([]byte("new\n")) || r.Target != "memory.md" {
		t.Errorf("record = %+v", r)
	}
	// What it wrote is kept with the record (its diff outlives the file).
	if got, ok, err := w.DB.Written(context.Background(), r.ID); err != nil || !ok || string(got) != "new\n" {
		t.Errorf("kept with record %d: %q, %t, %v; want what it wrote", r.ID, got, ok, err)
	}
	// A second rewrite in the same minute must not overwrite the first archive.
	if _, err := w.Apply(context.Background(), Request{Root: open(t, root), Target: "memory.md", Archive: "memory/2026-01-15-1430.md", Compute: constant("other\n")}, &state.Record{Store: "s", Rule: "compact"}); err != nil {
		t.Fatal(err)
	}
	if got, want := read(t, filepath.Join(root, "memory/2026-01-15-1430.md")), "old content\n"; got != want {
		t.Errorf("first archive = %q, want %q", got, want)
	}
	if got, want := read(t, filepath.Join(root, "memory/2026-01-15-1430-2.md")), "new\n"; got != want {
		t.Errorf("second archive = %q, want %q", got, want)
	}
	if n, k, _ := w.CleanTemp(context.Background(), open(t, root), "s"); n+k != 0 {
		t.Errorf("temp files left behind: %d", n+k)
	}
}

func TestApplyUnchangedAndRejected(t *testing.T) {
	w := newRewriter(t)
	root := t.TempDir()
	write(t, filepath.Join(root, "f"), "same")
	out, err := w.Apply(context.Background(), Request{Root: open(t, root), Target: "f", Compute: constant("same")}, &state.Record{Rule: "r"})
	if err != nil || out.Status != state.Skipped {
		t.Fatalf("unchanged: %+v, %v", out, err)
	}
	out, err = w.Apply(context.Background(), Request{Root: open(t, root), Target: "f", Compute: func(context.Context, []byte) ([]byte, error) {
		return nil, &Rejected{Reason: "result lost # now"}
	}}, &state.Record{Rule: "r"})
	if err != nil || out.Status != state.Rejected {
		t.Fatalf("rejected: %+v, %v", out, err)
	}
	if got := read(t, filepath.Join(root, "f")); got != "same" {
		t.Errorf("target changed by rejected rewrite: %q", got)
	}
	recs, _ := w.DB.Journal(context.Background(), state.Filter{Outcome: state.Rejected})
	if len(recs) != 1 || recs[0].Reason != "result lost # now" {
		t.Errorf("rejected journal = %+v", recs)
	}
	if _, err := os.Stat(filepath.Join(root, DefaultArchiveDir)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("no archive should be written when nothing changes: %v", err)
	}
}

func TestApplyCarriesAppendedTail(t *testing.T) {
	w := newRewriter(t)
	root := t.TempDir()
	target := filepath.Join(root, "HISTORY.md")
	write(t, target, "a\nb\n")
	compute := func(_ context.Context, old []byte) ([]byte, error) {
		// The agent appends while we compute.
		f, _ := os.OpenFile(target, os.O_WRONLY|os.O_APPEND, 0)
		f.WriteString("c\n")
		f.Close()
		return bytes.ToUpper(old), nil
	}
	out, err := w.Apply(context.Background(), Request{Root: open(t, root), Target: "HISTORY.md", Compute: compute}, &state.Record{Rule: "r"})
	if err != nil || out.Status != state.Done {
		t.Fatalf("%+v, %v", out, err)
	}
	if got, want := read(t, target), "A\nB\nc\n"; got != want {
		t.Errorf("target = %q, want %q", got, want)
	}
	if got, want := read(t, filepath.Join(root, out.Archive)), "a\nb\nc\n"; got != want {
		t.Errorf("archive = %q, want %q", got, want)
	}
}

func TestApplyRestartsOnConflict(t *testing.T) {
	w := newRewriter(t)
	root := t.TempDir()
	target := filepath.Join(root, "memory.md")
	write(t, target, "v1")
	calls := 0
	compute := func(_ context.Context, old []byte) ([]byte, error) {
		calls++
		if calls == 1 {
			write(t, target, "v2 edited by agent") // not an append
		}
		return append([]byte("compacted:"), old...), nil
	}
	if _, err := w.Apply(context.Background(), Request{Root: open(t, root), Target: "memory.md", Compute: compute}, &state.Record{Rule: "r"}); err != nil {
		t.Fatal(err)
	}
	if got, want := read(t, target), "compacted:v2 edited by agent"; got != want {
		t.Errorf("target = %q, want %q (the agent's edit must survive)", got, want)
	}
	if calls != 2 {
		t.Errorf("compute calls = %d, want 2", calls)
	}
}

func TestSandbox(t *testing.T) {
	w := newRewriter(t)
	root := t.TempDir()
	outside := t.TempDir()
	write(t, filepath.Join(outside, "secret"), "x")
	if err := os.Symlink(filepath.Join(outside, "secret"), filepath.Join(root, "link")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(outside, filepath.Join(root, "dirlink")); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{"../x", "link", "dirlink/secret", filepath.Join(outside, "secret"), "/etc/passwd"} {
		_, err := w.Apply(context.Background(), Request{Root: open(t, root), Target: p, Compute: constant("pwned")}, &state.Record{Rule: "r"})
		if !errors.Is(err, confine.ErrOutside) {
			t.Errorf("Apply(%q) error = %v, want confine.ErrOutside", p, err)
		}
	}
	if got := read(t, filepath.Join(outside, "secret")); got != "x" {
		t.Errorf("file outside root changed: %q", got)
	}
	// An archive path may not escape either.
	write(t, filepath.Join(root, "f"), "data")
	_, err := w.Apply(context.Background(), Request{Root: open(t, root), Target: "f", Archive: "../escape", Compute: constant("n")}, &state.Record{Rule: "r"})
	if !errors.Is(err, confine.ErrOutside) {
		t.Errorf("archive escape error = %v, want confine.ErrOutside", err)
	}
	if got := read(t, filepath.Join(root, "f")); got != "data" {
		t.Errorf("target changed although its archive was refused: %q", got)
	}
}

func TestRecoverPending(t *testing.T) {
	ctx := context.Background()
	w := newRewriter(t)
	root := t.TempDir()
	write(t, filepath.Join(root, "a"), "after")
	write(t, filepath.Join(root, "b"), "before")
	write(t, filepath.Join(root, "c"), "something else")
	for _, n := range []string{"a", "b", "c"} {
		w.DB.Append(ctx, &state.Record{Root: root, Target: n, Rule: "r", Outcome: state.Pending,
			BeforeSHA: Hash([]byte("before")), AfterSHA: Hash([]byte("after")), AfterSize: 5})
	}
	if n, err := w.Recover(ctx); err != nil || n != 3 {
		t.Fatalf("Recover = %d, %v", n, err)
	}
	recs, _ := w.DB.Journal(ctx, state.Filter{})
	got := map[string]string{}
	for _, r := range recs {
		got[r.Target] = r.Outcome
	}
	want := map[string]string{"a": state.Done, "b": state.Failed, "c": state.Failed}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("outcome of %s = %q, want %q", k, got[k], v)
		}
	}
}

func TestUndo(t *testing.T) {
	ctx := context.Background()
	w := newRewriter(t)
	root := t.TempDir()
	target := filepath.Join(root, "memory.md")
	write(t, target, "original")
	out, err := w.Apply(ctx, Request{Root: open(t, root), Target: "memory.md", Archive: "memory/a.md", Compute: constant("compacted")}, &state.Record{Rule: "compact"})
	if err != nil {
		t.Fatal(err)
	}
	// The agent edits after the compaction: undo refuses.
	write(t, target, "compacted + agent edit")
	if _, err := w.Undo(ctx, out.Record, false); !errors.Is(err, ErrTargetChanged) {
		t.Fatalf("undo after agent edit: %v, want ErrTargetChanged", err)
	}
	if got := read(t, target); got != "compacted + agent edit" {
		t.Fatalf("refused undo changed the target: %q", got)
	}
	u, err := w.Undo(ctx, out.Record, true)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := read(t, target), "original"; got != want {
		t.Errorf("after undo = %q, want %q", got, want)
	}
	if got, want := read(t, filepath.Join(root, u.Archive)), "compacted + agent edit"; got != want {
		t.Errorf("forced undo archived %q, want %q", got, want)
	}
	// Undo of an append restores the prefix.
	h := filepath.Join(root, "HISTORY.md")
	write(t, h, "one\n")
	out, err = w.Apply(ctx, Request{Root: open(t, root), Target: "HISTORY.md", Compute: constant("one\ntwo\n")}, &state.Record{Rule: "mirror"})
	if err != nil || out.Archive != "" {
		t.Fatalf("append: %+v, %v (an append needs no archive)", out, err)
	}
	if _, err := w.Undo(ctx, out.Record, false); err != nil {
		t.Fatal(err)
	}
	if got, want := read(t, h), "one\n"; got != want {
		t.Errorf("after undo of append = %q, want %q", got, want)
	}
}

func TestInsertionNeedsNoArchiveAndUndoes(t *testing.T) {
	ctx := context.Background()
	w := newRewriter(t)
	root := t.TempDir()
	target := filepath.Join(root, "memory.md")
	write(t, target, "# now\n# History\n## old\n")
	out, err := w.Apply(ctx, Request{Root: open(t, root), Target: "memory.md", Compute: constant("# now\n# History\n## 2026-01-15-1430\n## old\n")}, &state.Record{Rule: "stamp"})
	if err != nil || out.Archive != "" {
		t.Fatalf("insertion: %+v, %v; want no archive", out, err)
	}
	if _, ok, _ := w.DB.Written(ctx, out.Record); ok {
		t.Errorf("an insertion kept the whole file it wrote into (its cost would grow with the file)")
	}
	if _, err := w.Undo(ctx, out.Record, false); err != nil {
		t.Fatal(err)
	}
	if got, want := read(t, target), "# now\n# History\n## old\n"; got != want {
		t.Errorf("after undo = %q, want %q", got, want)
	}
}

// TestUndoOfACreationRemovesTheFile: the file an action created is taken
// out again, into the archive, not left empty.
func TestUndoOfACreationRemovesTheFile(t *testing.T) {
	ctx := context.Background()
	w := newRewriter(t)
	root := t.TempDir()
	out, err := w.Apply(ctx, Request{Root: open(t, root), Target: "facts/new.md", AllowCreate: true, Compute: constant("# New\n")}, &state.Record{Rule: "memory-write"})
	if err != nil {
		t.Fatal(err)
	}
	u, err := w.Undo(ctx, out.Record, false)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(root, "facts/new.md")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("after undo of its creation, facts/new.md: %v, want it gone", err)
	}
	if got, want := read(t, filepath.Join(root, u.Archive)), "# New\n"; got != want {
		t.Errorf("archive %s holds %q, want %q", u.Archive, got, want)
	}
	if _, err := w.Undo(ctx, out.Record, false); err == nil {
		t.Errorf("a second undo of the creation: no error")
	}
}

func TestRemove(t *testing.T) {
	w := newRewriter(t)
	root := t.TempDir()
	write(t, filepath.Join(root, "memory/run/2020-01-01-0000-run.md"), "old run")
	rec := &state.Record{Rule: "run-retention"}
	if err := w.Remove(context.Background(), open(t, root), "memory/run/2020-01-01-0000-run.md", "", rec); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(root, "memory/run/2020-01-01-0000-run.md")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("file still there: %v", err)
	}
	if rec.Outcome != state.Done || rec.BeforeSize != 7 {
		t.Errorf("record = %+v", rec)
	}
	if got := read(t, filepath.Join(root, rec.Archive)); got != "old run" {
		t.Errorf("archived %q", got)
	}
	if err := w.Remove(context.Background(), open(t, root), "../outside", "", &state.Record{}); !errors.Is(err, confine.ErrOutside) {
		t.Errorf("remove outside root: %v", err)
	}
}

func BenchmarkApply100KiB(b *testing.B) {
	db, err := state.Open(context.Background(), b.TempDir())
	if err != nil {
		b.Fatal(err)
	}
	defer db.Close()
	w := New(db, slog.New(slog.DiscardHandler))
	dir := b.TempDir()
	root, err := confine.Open(dir, confine.Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer root.Close()
	big := bytes.Repeat([]byte("## 2026-01-15-1430 | routine check\n"), 3000)
	b.SetBytes(int64(len(big)))
	for i := 0; b.Loop(); i++ {
		os.WriteFile(filepath.Join(dir, "memory.md"), big, 0o644)
		if _, err := w.Apply(context.Background(), Request{Root: root, Target: "memory.md", Compute: constant("# now\n")}, &state.Record{Rule: "bench"}); err != nil {
			b.Fatal(err)
		}
	}
}

// A removal interrupted by a kill is settled by whether the file is gone,
// and an archived removal undoes without --force.
func TestRemovalRecoveryAndUndo(t *testing.T) {
	ctx := context.Background()
	w := newRewriter(t)
	root := t.TempDir()
	write(t, filepath.Join(root, "gone.md"), "x")
	write(t, filepath.Join(root, "kept.md"), "y")
	for _, n := range []string{"gone.md", "kept.md"} {
		w.DB.Append(ctx, &state.Record{Root: root, Target: n, Rule: "run-retention", Outcome: state.Pending,
			BeforeSHA: Hash([]byte(map[string]string{"gone.md": "x", "kept.md": "y"}[n])), AfterSHA: RemovedSHA})
	}
	os.Remove(filepath.Join(root, "gone.md")) // the removal happened before the kill
	if _, err := w.Recover(ctx); err != nil {
		t.Fatal(err)
	}
	recs, _ := w.DB.Journal(ctx, state.Filter{})
	for _, r := range recs {
		want := map[string]string{"gone.md": state.Done, "kept.md": state.Failed}[r.Target]
		if r.Outcome != want {
			t.Errorf("%s: outcome %s, want %s", r.Target, r.Outcome, want)
		}
	}
	write(t, filepath.Join(root, "episodes/2025-01.md"), "old month")
	rec := &state.Record{Rule: "episode-summarize"}
	if err := w.Remove(ctx, open(t, root), "episodes/2025-01.md", "episodes/archive/2025-01.md", rec); err != nil {
		t.Fatal(err)
	}
	if _, err := w.Undo(ctx, rec.ID, false); err != nil {
		t.Fatalf("undo of an archived removal: %v", err)
	}
	if got := read(t, filepath.Join(root, "episodes/2025-01.md")); got != "old month" {
		t.Errorf("restored %q", got)
	}
}

// TestUndoLeavesAReplacedRootAlone: the agent moved its root away and put
// another directory at its path; undo of a change made in the old one
// touches neither.
func TestUndoLeavesAReplacedRootAlone(t *testing.T) {
	ctx := context.Background()
	w := newRewriter(t)
	base := t.TempDir()
	dir := filepath.Join(base, "root")
	os.Mkdir(dir, 0o755)
	write(t, filepath.Join(dir, "memory.md"), strings.Repeat("line\n", 10))
	out, err := w.Apply(ctx, Request{Root: open(t, dir), Target: "memory.md", Compute: keepNewest(2)}, &state.Record{Rule: "compact"})
	if err != nil || out.Status != state.Done {
		t.Fatalf("Apply = %+v, %v", out, err)
	}
	os.Rename(dir, dir+".moved")
	os.Mkdir(dir, 0o755)
	write(t, filepath.Join(dir, "memory.md"), "another directory's file\n")
	if _, err := w.Undo(ctx, out.Record, true); !errors.Is(err, ErrRootReplaced) {
		t.Errorf("Undo = %v, want ErrRootReplaced", err)
	}
	if got := read(t, filepath.Join(dir, "memory.md")); got != "another directory's file\n" {
		t.Errorf("the directory now at the root's path was changed: %q", got)
	}
}
