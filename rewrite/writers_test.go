package rewrite

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

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

// TestWritersLoseNothing runs each kind of writer against the real rewrite,
// compacting the file back to back (cooldown 0), and checks that every
// entry the writer wrote is afterwards in the target or in an archive.
func TestWritersLoseNothing(t *testing.T) {
	for _, wk := range writertest.Kinds {
		t.Run(wk.Name, func(t *testing.T) {
			t.Parallel()
			w := newRewriter(t)
			w.Log = discard()
			dir := t.TempDir()
			target := filepath.Join(dir, "memory.md")
			write(t, target, "")
			n := wk.N * writertest.Scale()
			done := writertest.Start(t, wk.Name, target, n, wk.Every)
			root := open(t, dir)
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
				out, err := w.Apply(context.Background(), Request{Root: root, Target: "memory.md", Archive: "memory/archive.md", Compute: keepNewest(20)}, &state.Record{Rule: "compact"})
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
			lostEntries := writertest.Lost(writertest.Seen(t, dir), wk.Name, n)
			lost := len(lostEntries)
			archives, _ := filepath.Glob(filepath.Join(dir, "memory", "archive*.md"))
			kept, _ := filepath.Glob(filepath.Join(dir, DefaultArchiveDir, "*kept*"))
			t.Logf("%s: %d writes, %d compactions, %d conflicts, %d deferred (busy), %d skipped, %d archives, %d kept, lost %d",
				wk.Name, n, count.done, count.conflict, count.busy, count.skipped, len(archives), len(kept), lost)
			if lost != 0 {
				t.Fatalf("lost %d of %d writes, first %v", lost, n, lostEntries[:min(lost, 5)])
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
			name:     "append through a descriptor opened before the exchange is carried",
			before:   func(t *testing.T, target string) *os.File { return openT(t, target, os.O_WRONLY|os.O_APPEND) },
			after:    func(t *testing.T, target string, f *os.File) { f.WriteString("tail\n"); f.Close() },
			want:     func(n string) string { return n + "tail\n" },
			wantKept: old + "tail\n",
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
