package rewrite

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/memwatch/memwatch/confine"
	"github.com/memwatch/memwatch/rewrite/writertest"
	"github.com/memwatch/memwatch/state"
)

// TestMain re-executes this binary as a writer when asked to.
func TestMain(m *testing.M) {
	writertest.Main()
	os.Exit(m.Run())
}

// keepNewest is a compaction: it keeps the newest lines, dropping the rest
// (which the archive keeps).
func keepNewest(n int) func(context.Context, []byte) ([]byte, error) {
	return func(_ context.Context, old []byte) ([]byte, error) {
		lines := strings.SplitAfter(string(old), "\n")
		if lines[len(lines)-1] == "" {
			lines = lines[:len(lines)-1]
		}
		if len(lines) <= n {
			return nil, ErrUnchanged
		}
		return []byte(strings.Join(lines[len(lines)-n:], "")), nil
	}
}

// keepEntries is a compaction of "## " entries: it keeps the newest n.
func keepEntries(n int) func([]byte) []byte {
	return func(old []byte) []byte {
		parts := strings.SplitAfter(string(old), "\n\n")
		if len(parts) <= n {
			return old
		}
		return []byte(strings.Join(parts[len(parts)-n:], ""))
	}
}

// TestWritersLoseNothing runs each kind of writer against the real rewrite,
// compacting the file back to back (cooldown 0), and checks that every
// entry the writer wrote is afterwards in the live file, unless one of the
// compactions took it out (it is then in that compaction's archive).
func TestWritersLoseNothing(t *testing.T) {
	for _, wk := range writertest.Kinds {
		t.Run(wk.Name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			w := newRewriter(t)
			w.Log = discard()
			dir := t.TempDir()
			target := filepath.Join(dir, "memory.md")
			write(t, target, "")
			n := wk.N * writertest.Scale()
			done := writertest.Start(t, writertest.Run{Kind: wk.Name, Path: target, N: n, Every: wk.Every, Body: 300})
			root := open(t, dir)
			compact := keepEntries(5)
			var count struct{ done, conflict, busy, skipped int }
			for running := true; running; {
				select {
				case err := <-done:
					if err != nil {
						t.Fatalf("writer: %v", err)
					}
					running = false
					continue
				default:
				}
				out, err := w.Apply(ctx, Request{Root: root, Target: "memory.md", Archive: "memory/archive.md", Compute: func(_ context.Context, old []byte) ([]byte, error) {
					if strings.Count(string(old), "\n\n") <= 10 {
						return nil, ErrUnchanged
					}
					return compact(old), nil
				}}, &state.Record{Rule: "compact"})
				switch {
				case errors.Is(err, ErrConflict):
					count.conflict++
				case errors.Is(err, ErrBusy):
					count.busy++
				case err != nil:
					t.Fatalf("apply: %v", err)
				case out.Status == state.Done:
					count.done++
				default:
					count.skipped++
				}
				time.Sleep(2 * time.Millisecond)
			}
			// What is left to put back goes back, as the daemon does on the next change.
			if _, err := w.Restore(ctx, root, "memory.md", ""); err != nil {
				t.Fatal(err)
			}
			removed := map[int]bool{}
			recs, _ := w.DB.Journal(ctx, state.Filter{Rule: "compact", Outcome: state.Done})
			for _, r := range recs {
				for i := range writertest.RemovedBy([]byte(read(t, filepath.Join(dir, r.Archive))), wk.Name, compact) {
					removed[i] = true
				}
			}
			var kept [][]byte
			keptFiles, _ := filepath.Glob(filepath.Join(dir, DefaultArchiveDir, "*kept*"))
			for _, k := range keptFiles {
				kept = append(kept, []byte(read(t, k)))
			}
			a := writertest.Check([]byte(read(t, target)), wk.Name, n, removed, kept)
			t.Logf("%s: %d writes, %d compactions, %d conflicts, %d deferred (busy), %d skipped, %d kept; %d live, %d removed by compactions, missing %d",
				wk.Name, n, count.done, count.conflict, count.busy, count.skipped, len(keptFiles), a.Live, a.Removed, len(a.Missing))
			if len(a.Missing) != 0 {
				t.Fatalf("%d of %d writes are missing from the live file (%d of them only in a kept copy), first %v", len(a.Missing), n, a.InKept, a.Missing[:min(len(a.Missing), 5)])
			}
			if wk.Held && count.busy == 0 {
				t.Errorf("a writer holding the file open was never seen (no deferral)")
			}
			if !wk.Held && count.done == 0 {
				t.Errorf("no compaction overlapped the writer; the test did not exercise the race")
			}
		})
	}
}

func discard() *slog.Logger { return slog.New(slog.DiscardHandler) }

// TestSwapRaces acts as an agent at the two instants around the exchange
// and checks each classification of the protocol (steps 10 to 12):
// nothing the agent wrote is lost, the agent's version wins, and no temp
// file is left behind.
func TestSwapRaces(t *testing.T) {
	old := strings.Repeat("old line\n", 30)
	tests := []struct {
		name     string
		before   func(t *testing.T, target string) *os.File
		after    func(t *testing.T, target string, f *os.File)
		wantErr  error
		want     func(n string) string // the target's content, given memwatch's result n
		wantKept string                // content expected in a kept file
	}{
		{
			name:    "an append through a descriptor opened before the exchange puts the agent's file back",
			before:  func(t *testing.T, target string) *os.File { return openT(t, target, os.O_WRONLY|os.O_APPEND) },
			after:   func(t *testing.T, target string, f *os.File) { f.WriteString("tail\n"); f.Close() },
			wantErr: ErrConflict,
			want:    func(string) string { return old + "tail\n" },
		},
		{
			name:   "a descriptor held across the exchange puts the agent's file back, and its writes land there",
			before: func(t *testing.T, target string) *os.File { return openT(t, target, os.O_WRONLY|os.O_APPEND) },
			after: func(t *testing.T, target string, f *os.File) {
				t.Cleanup(func() { f.WriteString("later\n"); f.Close() })
			},
			wantErr: ErrBusy,
			want:    func(string) string { return old },
		},
		{
			name: "an append by path after the exchange lands in memwatch's result",
			after: func(t *testing.T, target string, f *os.File) {
				a := openT(t, target, os.O_WRONLY|os.O_APPEND)
				a.WriteString("appended A\n")
				a.Close()
			},
			want: func(n string) string { return n + "appended A\n" },
		},
		{
			name: "a file renamed onto the target just before the exchange wins",
			before: func(t *testing.T, target string) *os.File {
				renameOnto(t, target, "agent version E\n", time.Now())
				return nil
			},
			wantErr: ErrConflict,
			want:    func(string) string { return "agent version E\n" },
		},
		{
			name:   "an in-place rewrite through a descriptor opened before wins",
			before: func(t *testing.T, target string) *os.File { return openT(t, target, os.O_WRONLY) },
			after: func(t *testing.T, target string, f *os.File) {
				f.Truncate(0)
				f.WriteAt([]byte("rewritten D\n"), 0)
				f.Close()
			},
			wantErr: ErrConflict,
			want:    func(string) string { return "rewritten D\n" },
		},
		{
			name:  "a file renamed onto the target after the exchange replaces memwatch's",
			after: func(t *testing.T, target string, f *os.File) { renameOnto(t, target, "agent version F\n", time.Now()) },
			want:  func(string) string { return "agent version F\n" },
		},
		{
			name: "renamed before and after: the newer stays, the older is kept",
			before: func(t *testing.T, target string) *os.File {
				renameOnto(t, target, "agent version E\n", time.Now().Add(-time.Minute))
				return nil
			},
			after:    func(t *testing.T, target string, f *os.File) { renameOnto(t, target, "agent version F\n", time.Now()) },
			wantErr:  ErrConflict,
			want:     func(string) string { return "agent version F\n" },
			wantKept: "agent version E\n",
		},
		{
			name:   "bytes appended to memwatch's result before it is put back are carried",
			before: func(t *testing.T, target string) *os.File { return openT(t, target, os.O_WRONLY) },
			after: func(t *testing.T, target string, f *os.File) {
				f.Truncate(0)
				f.WriteAt([]byte("rewritten D\n"), 0)
				f.Close()
				a := openT(t, target, os.O_WRONLY|os.O_APPEND) // by path: memwatch's result
				a.WriteString("appended A\n")
				a.Close()
			},
			wantErr:  ErrConflict,
			want:     func(string) string { return "rewritten D\nappended A\n" },
			wantKept: strings.Repeat("old line\n", 3) + "appended A\n",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w := newRewriter(t)
			w.MaxAttempts = 1
			dir := t.TempDir()
			target := filepath.Join(dir, "memory.md")
			write(t, target, old)
			var f *os.File
			w.hook = func(step string) {
				switch {
				case step == "before-exchange" && tt.before != nil:
					f = tt.before(t, target)
				case step == "after-exchange" && tt.after != nil:
					tt.after(t, target, f)
				}
			}
			_, err := w.Apply(context.Background(), Request{Root: open(t, dir), Target: "memory.md", Archive: "memory/a.md", Compute: keepNewest(3)}, &state.Record{Rule: "compact"})
			if tt.wantErr == nil && err != nil || tt.wantErr != nil && !errors.Is(err, tt.wantErr) {
				t.Fatalf("Apply = %v, want %v", err, tt.wantErr)
			}
			n := strings.Repeat("old line\n", 3)
			if got, want := read(t, target), tt.want(n); got != want {
				t.Errorf("target = %q, want %q", got, want)
			}
			if got := read(t, filepath.Join(dir, "memory/a.md")); got != old {
				t.Errorf("archive = %q, want the pre-image", got)
			}
			kept, _ := filepath.Glob(filepath.Join(dir, DefaultArchiveDir, "*kept*"))
			switch {
			case tt.wantKept == "" && len(kept) > 0:
				t.Errorf("kept %v, want nothing kept", kept)
			case tt.wantKept != "" && (len(kept) != 1 || read(t, kept[0]) != tt.wantKept):
				t.Errorf("kept %v, want one file holding %q", kept, tt.wantKept)
			}
			temps, _ := filepath.Glob(filepath.Join(dir, "*"+TempMarker+"*"))
			if len(temps) > 0 {
				t.Errorf("temp files left: %v", temps)
			}
		})
	}
}

func openT(t *testing.T, p string, flag int) *os.File {
	t.Helper()
	f, err := os.OpenFile(p, flag, 0)
	if err != nil {
		t.Fatal(err)
	}
	return f
}

// renameOnto replaces target by rename, as editors and agents save.
func renameOnto(t *testing.T, target, content string, mtime time.Time) {
	t.Helper()
	tmp := target + ".agent"
	if err := os.WriteFile(tmp, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	os.Chtimes(tmp, mtime, mtime)
	if err := os.Rename(tmp, target); err != nil {
		t.Fatal(err)
	}
}

// TestCleanTempClassifies: after a kill, a leftover temp file is removed
// only when it is provably memwatch's result or an archived pre-image; an
// agent's tail in it is carried into the target first; anything else is
// kept in the archive directory.
func TestCleanTempClassifies(t *testing.T) {
	ctx := context.Background()
	w := newRewriter(t)
	dir := t.TempDir()
	write(t, filepath.Join(dir, "memory.md"), "result N\n")
	id, err := w.DB.Append(ctx, &state.Record{Root: dir, Target: "memory.md", Rule: "compact", Outcome: state.Pending,
		BeforeSHA: Hash([]byte("pre S\n")), BeforeSize: 6, AfterSHA: Hash([]byte("result N\n")), AfterSize: 9})
	if err != nil {
		t.Fatal(err)
	}
	tmp := func(tag, content string) string {
		name := ".memory.md" + TempMarker + tag
		write(t, filepath.Join(dir, name), content)
		return name
	}
	ours := tmp(fmt.Sprintf("r%d-aaa", id), "result N\n")
	pre := tmp(fmt.Sprintf("r%d-bbb", id), "pre S\n")
	tail := tmp(fmt.Sprintf("r%d-ccc", id), "pre S\nagent tail\n")
	agent := tmp(fmt.Sprintf("r%d-ddd", id), "something the agent wrote\n")
	archiveCopy := tmp("aeee", "pre S\n")
	unknown := tmp("zfff", "who knows\n")
	removed, kept, err := w.CleanTemp(ctx, open(t, dir), "s")
	if err != nil {
		t.Fatal(err)
	}
	if removed != 3 || kept != 3 {
		t.Errorf("removed %d, kept %d; want 3 and 3", removed, kept)
	}
	for _, n := range []string{ours, pre, tail, agent, archiveCopy, unknown} {
		if _, err := os.Stat(filepath.Join(dir, n)); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("%s still in place", n)
		}
	}
	if got, want := read(t, filepath.Join(dir, "memory.md")), "result N\nagent tail\n"; got != want {
		t.Errorf("target = %q, want %q (the agent's tail carried)", got, want)
	}
	var all string
	filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() {
			all += read(t, p)
		}
		return nil
	})
	for _, l := range []string{"something the agent wrote", "who knows", "pre S\nagent tail"} {
		if !strings.Contains(all, l) {
			t.Errorf("%q was lost", l)
		}
	}
	recs, _ := w.DB.Journal(ctx, state.Filter{Rule: RuleKept})
	if len(recs) != 3 {
		t.Errorf("journaled %d kept files, want 3", len(recs))
	}
}

// TestAgentThatReadTheResultLosesNothing is the one interleaving the
// protocol cannot prevent: the agent writes w1 into the pre-image just
// before the exchange, reads memwatch's result in the instant it is in
// place, and later writes its next version from that result (w2), which
// lacks w1. memwatch puts w1 back. An agent that deletes its own line from
// its own version is left alone.
func TestAgentThatReadTheResultLosesNothing(t *testing.T) {
	old := "# notes\n" + strings.Repeat("old line\n", 30)
	tests := []struct {
		name       string
		next       func(read, x string) string // what the agent writes after the conflict
		want       func(read, x string) string
		fromResult bool
	}{
		{
			name:       "a version written from the result gets w1 back",
			fromResult: true,
			next:       func(read, x string) string { return read + "w2\n" },
			want:       func(read, x string) string { return read + "w1\n" + "w2\n" },
		},
		{
			name: "a version written from its own file, without w1, stays as the agent wrote it",
			next: func(read, x string) string { return old + "w2\n" },
			want: func(read, x string) string { return old + "w2\n" },
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx := context.Background()
			w := newRewriter(t)
			w.MaxAttempts = 1
			dir := t.TempDir()
			target := filepath.Join(dir, "memory.md")
			write(t, target, old)
			var read string
			w.hook = func(step string) {
				switch step {
				case "before-exchange":
					f := openT(t, target, os.O_WRONLY|os.O_APPEND) // in place: the pre-image's inode
					f.WriteString("w1\n")
					f.Close()
				case "after-exchange":
					read = readT(t, target) // memwatch's result, in the instant it is there
				}
			}
			root := open(t, dir)
			_, err := w.Apply(ctx, Request{Root: root, Target: "memory.md", Archive: "memory/a.md", Compute: keepNewest(3)}, &state.Record{Rule: "compact"})
			if !errors.Is(err, ErrConflict) {
				t.Fatalf("Apply = %v, want a conflict", err)
			}
			x := readT(t, target)
			if x != old+"w1\n" {
				t.Fatalf("after the conflict the target = %q, want the agent's version with w1", x)
			}
			w.hook = nil
			write(t, target, tt.next(read, x))
			if _, err := w.Restore(ctx, root, "memory.md", "s"); err != nil {
				t.Fatal(err)
			}
			if got, want := readT(t, target), tt.want(read, x); got != want {
				t.Errorf("target = %q, want %q", got, want)
			}
			// Built on memwatch's result, the compaction took effect: its
			// record says done; otherwise it stays a conflict.
			recs, _ := w.DB.Journal(ctx, state.Filter{Rule: "compact"})
			wantOutcome := state.Failed
			if tt.fromResult {
				wantOutcome = state.Done
			}
			if len(recs) != 1 || recs[0].Outcome != wantOutcome {
				t.Errorf("compaction records %+v, want one %s", recs, wantOutcome)
			}
		})
	}
}

// TestAWriterHoldingTheResult: an agent appends to the pre-image during
// the swap (a conflict), and another opens memwatch's result in the
// instant it is in place and holds it. That file goes live again (the
// writer's next lines go there), and the line the first agent wrote is
// put back into it. If the writer built on the result (it appends to
// it), the rewrite took effect: its record says done, and its archive
// has what it removed. If it wrote a version of its own over it (read
// before the swap, written in place), the agent's version is live and
// the record says conflict, as when the agent's own file stays.
func TestAWriterHoldingTheResult(t *testing.T) {
	var old strings.Builder
	for i := range 20 {
		fmt.Fprintf(&old, "line %d\n", i)
	}
	tests := []struct {
		name    string
		write   func(f *os.File) // what the writer holding the result writes
		done    bool
		want    []string
		notWant []string
	}{
		{
			name:    "built on the result",
			write:   func(f *os.File) { f.Seek(0, io.SeekEnd); f.WriteString("w2\n") },
			done:    true,
			want:    []string{"line 17\n", "line 19\n", "w1\n", "w2\n"},
			notWant: []string{"line 0\n"},
		},
		{
			name:  "a version of its own",
			write: func(f *os.File) { f.Truncate(0); f.WriteAt([]byte(old.String()+"w2\n"), 0) },
			want:  []string{"line 0\n", "line 19\n", "w1\n", "w2\n"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx := context.Background()
			w := newRewriter(t)
			w.MaxAttempts = 1
			dir := t.TempDir()
			target := filepath.Join(dir, "memory.md")
			write(t, target, old.String())
			var held *os.File
			w.hook = func(step string) {
				switch step {
				case "before-exchange":
					f := openT(t, target, os.O_WRONLY|os.O_APPEND) // the pre-image's inode
					f.WriteString("w1\n")
					f.Close()
				case "after-exchange":
					held = openT(t, target, os.O_WRONLY) // memwatch's result
					tt.write(held)
				}
			}
			root := open(t, dir)
			out, err := w.Apply(ctx, Request{Root: root, Target: "memory.md", Archive: "memory/a.md", Compute: keepNewest(3)}, &state.Record{Rule: "compact"})
			if held == nil {
				t.Fatal("the swap never reached its exchange")
			}
			held.Close()
			w.hook = nil
			if tt.done && (err != nil || out.Status != state.Done) {
				t.Fatalf("Apply = %+v, %v; want done (the live file is built on the result)", out, err)
			}
			if !tt.done && !errors.Is(err, ErrConflict) {
				t.Fatalf("Apply = %+v, %v; want a conflict (the agent's version is live)", out, err)
			}
			if _, err := w.Restore(ctx, root, "memory.md", "s"); err != nil {
				t.Fatal(err)
			}
			got := readT(t, target)
			for _, l := range tt.want {
				if !strings.Contains(got, l) {
					t.Errorf("target = %q, want %q in it", got, l)
				}
			}
			for _, l := range tt.notWant {
				if strings.Contains(got, l) {
					t.Errorf("target = %q, want no %q in it", got, l)
				}
			}
			recs, _ := w.DB.Journal(ctx, state.Filter{Rule: "compact"})
			want := state.Failed
			if tt.done {
				want = state.Done
			}
			if len(recs) != 1 || recs[0].Outcome != want {
				t.Fatalf("compaction records %+v, want one %s", recs, want)
			}
			if !tt.done {
				return
			}
			arch, err := os.ReadFile(filepath.Join(dir, "memory", "a.md"))
			if err != nil {
				t.Fatal(err)
			}
			if p, ok := Unpack(arch); ok {
				arch = p
			}
			if !strings.Contains(string(arch), "line 0\n") {
				t.Errorf("archive = %q, want the removed lines", arch)
			}
		})
	}
}

// TestCarriedLinesSurviveAStaleWrite: an agent appends to the pre-image
// during the swap (a conflict) and another appends to memwatch's result in
// the instant it is live; the exchange back carries that line into the
// agent's version. A read-modify-write agent that read the file before it
// was carried writes its next version without it: the line goes back, as
// a line put back after a conflict does (make stress lost such a line).
func TestCarriedLinesSurviveAStaleWrite(t *testing.T) {
	ctx := context.Background()
	w := newRewriter(t)
	w.MaxAttempts = 1
	dir := t.TempDir()
	target := filepath.Join(dir, "memory.md")
	old := "# notes\n" + strings.Repeat("old line\n", 30)
	write(t, target, old)
	w.hook = func(step string) {
		switch step {
		case "before-exchange":
			f := openT(t, target, os.O_WRONLY|os.O_APPEND) // the pre-image's inode
			f.WriteString("w1\n")
			f.Close()
		case "after-exchange":
			f := openT(t, target, os.O_WRONLY|os.O_APPEND) // memwatch's result
			f.WriteString("w2\n")
			f.Close()
		}
	}
	root := open(t, dir)
	if _, err := w.Apply(ctx, Request{Root: root, Target: "memory.md", Archive: "memory/a.md", Compute: keepNewest(3)}, &state.Record{Rule: "compact"}); !errors.Is(err, ErrConflict) {
		t.Fatalf("Apply = %v, want a conflict", err)
	}
	w.hook = nil
	if got, want := readT(t, target), old+"w1\nw2\n"; got != want {
		t.Fatalf("after the conflict the target = %q, want %q (w2 carried)", got, want)
	}
	// The agent read the file before w2 was carried, and writes from it.
	write(t, target, old+"w1\nw3\n")
	if out, err := w.Restore(ctx, root, "memory.md", "s"); err != nil || out.Status != state.Done {
		t.Fatalf("Restore = %+v, %v; want done", out, err)
	}
	if got := readT(t, target); !strings.Contains(got, "w2\n") || !strings.Contains(got, "w3\n") {
		t.Errorf("target = %q, want w2 put back beside w3", got)
	}
	// A version written after that keeps it: nothing more to watch.
	write(t, target, readT(t, target)+"w4\n")
	if out, err := w.Restore(ctx, root, "memory.md", "s"); err != nil || out.Status == state.Done {
		t.Errorf("Restore = %+v, %v; want nothing to do", out, err)
	}
	if got := w.RiskTargets(ctx, root.Path()); len(got) != 0 {
		t.Errorf("RiskTargets = %v, want none left", got)
	}
}

// TestPutBackSurvivesAStaleWrite: a put-back is a rewrite like any other.
// A read-modify-write agent that read the file just before it writes its
// next version without the lines put back; memwatch puts them back again.
// Once a version written after the put-back keeps them, or memwatch's own
// compaction takes them out (into its archive), they are forgotten.
func TestPutBackSurvivesAStaleWrite(t *testing.T) {
	old := "# notes\n" + strings.Repeat("old line\n", 30)
	tests := []struct {
		name  string
		after func(t *testing.T, w *Rewriter, root *confine.Root, target string) // what happens once w1 is back and stays
	}{
		{
			name: "the agent writes from a version with w1",
			after: func(t *testing.T, w *Rewriter, root *confine.Root, target string) {
				write(t, target, readT(t, target)+"w4\n")
			},
		},
		{
			name: "memwatch compacts w1 away",
			after: func(t *testing.T, w *Rewriter, root *confine.Root, target string) {
				if _, err := w.Apply(context.Background(), Request{Root: root, Target: "memory.md", Archive: "memory/b.md", Compute: keepNewest(1)}, &state.Record{Rule: "compact"}); err != nil {
					t.Fatal(err)
				}
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx := context.Background()
			w := newRewriter(t)
			w.MaxAttempts = 1
			dir := t.TempDir()
			target := filepath.Join(dir, "memory.md")
			write(t, target, old)
			var read string
			w.hook = func(step string) {
				switch step {
				case "before-exchange":
					f := openT(t, target, os.O_WRONLY|os.O_APPEND)
					f.WriteString("w1\n")
					f.Close()
				case "after-exchange":
					read = readT(t, target)
				}
			}
			root := open(t, dir)
			if _, err := w.Apply(ctx, Request{Root: root, Target: "memory.md", Archive: "memory/a.md", Compute: keepNewest(3)}, &state.Record{Rule: "compact"}); !errors.Is(err, ErrConflict) {
				t.Fatalf("Apply = %v, want a conflict", err)
			}
			w.hook = nil
			write(t, target, read+"w2\n") // written from the result: no w1
			for round := 1; round <= 3; round++ {
				before := readT(t, target)
				if out, err := w.Restore(ctx, root, "memory.md", "s"); err != nil || out.Status != state.Done {
					t.Fatalf("round %d: Restore = %+v, %v; want done", round, out, err)
				}
				if got := readT(t, target); !strings.Contains(got, "w1\n") {
					t.Fatalf("round %d: after the put-back the target = %q, want w1 in it", round, got)
				}
				// The agent read before the put-back and writes after it.
				write(t, target, before+fmt.Sprintf("stale %d\n", round))
			}
			if out, err := w.Restore(ctx, root, "memory.md", "s"); err != nil || out.Status != state.Done {
				t.Fatalf("Restore after the last stale write = %+v, %v; want done", out, err)
			}
			tt.after(t, w, root, target)
			if out, err := w.Restore(ctx, root, "memory.md", "s"); err != nil || out.Status == state.Done {
				t.Errorf("Restore = %+v, %v; want nothing to do", out, err)
			}
			if got := w.RiskTargets(ctx, root.Path()); len(got) != 0 {
				t.Errorf("RiskTargets = %v, want none left", got)
			}
		})
	}
}

// TestBothVersionsOfARenamingAgentStay: the agent renames a file onto the
// target before the exchange and another after it. The newer stays live,
// and the lines the older added are put into it.
func TestBothVersionsOfARenamingAgentStay(t *testing.T) {
	ctx := context.Background()
	w := newRewriter(t)
	w.MaxAttempts = 1
	dir := t.TempDir()
	target := filepath.Join(dir, "memory.md")
	old := strings.Repeat("old line\n", 30)
	write(t, target, old)
	w.hook = func(step string) {
		switch step {
		case "before-exchange":
			renameOnto(t, target, old+"entry E\n", time.Now())
		case "after-exchange":
			renameOnto(t, target, old+"entry F\n", time.Now())
		}
	}
	root := open(t, dir)
	if _, err := w.Apply(ctx, Request{Root: root, Target: "memory.md", Archive: "memory/a.md", Compute: keepNewest(3)}, &state.Record{Rule: "compact"}); !errors.Is(err, ErrConflict) {
		t.Fatalf("Apply = %v, want a conflict", err)
	}
	w.hook = nil
	out, err := w.Restore(ctx, root, "memory.md", "s")
	if err != nil || out.Status != state.Done {
		t.Fatalf("Restore = %+v, %v; want done", out, err)
	}
	if got, want := readT(t, target), old+"entry E\nentry F\n"; got != want {
		t.Errorf("target = %q, want %q", got, want)
	}
	recs, _ := w.DB.Journal(ctx, state.Filter{Rule: RuleRestore, Outcome: state.Done})
	if len(recs) != 1 || !strings.Contains(recs[0].Reason, "put back 1 lines") {
		t.Errorf("journal: %+v, want one restore record", recs)
	}
	// Nothing more to put back.
	if out, err := w.Restore(ctx, root, "memory.md", "s"); err != nil || out.Status == state.Done {
		t.Errorf("second Restore = %+v, %v; want nothing to do", out, err)
	}
}

func readT(t *testing.T, p string) string {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestLinesAtRiskAreForgotten: an entry is dropped once it expires, and a
// deferred one once a version written from memwatch's result has its
// lines; entries survive a restart of the Rewriter (the state database).
func TestLinesAtRiskAreForgotten(t *testing.T) {
	ctx := context.Background()
	w := newRewriter(t)
	dir := t.TempDir()
	write(t, filepath.Join(dir, "memory.md"), "kept\nw1\n")
	root := open(t, dir)
	blocks := Added([]byte("kept\n"), []byte("kept\nw1\n"))
	w.addRisk(ctx, root.Path(), "memory.md", risk{Record: 1, Blocks: blocks, Dropped: []string{"dropped"}, Until: w.Now().Add(time.Hour)})
	w.addRisk(ctx, root.Path(), "memory.md", risk{Record: 2, Blocks: blocks, Always: true, Until: w.Now().Add(-time.Second)})
	// Another Rewriter on the same state database sees them.
	w2 := New(w.DB, discard())
	w2.Now = w.Now
	if got := w2.RiskTargets(ctx, root.Path()); len(got) != 1 || got[0] != "memory.md" {
		t.Fatalf("RiskTargets after a restart = %v", got)
	}
	// The file has w1 and the dropped line: the agent's own version.
	write(t, filepath.Join(dir, "memory.md"), "kept\nw1\ndropped\n")
	if out, err := w2.Restore(ctx, root, "memory.md", "s"); err != nil || out.Status == state.Done {
		t.Fatalf("Restore = %+v, %v; want nothing done", out, err)
	}
	if n := len(w2.risk.m[riskKey(root.Path(), "memory.md")]); n != 1 {
		t.Errorf("%d entries left, want the deferred one (the expired one goes)", n)
	}
	// A version written from the result, with w1: satisfied, forgotten.
	write(t, filepath.Join(dir, "memory.md"), "kept\nw1\n")
	if _, err := w2.Restore(ctx, root, "memory.md", "s"); err != nil {
		t.Fatal(err)
	}
	if got := w2.RiskTargets(ctx, root.Path()); len(got) != 0 {
		t.Errorf("RiskTargets = %v, want none left", got)
	}
}
