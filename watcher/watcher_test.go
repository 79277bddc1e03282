package watcher

import (
	"github.com/fsnotify/fsnotify"

	"context"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

type recorder struct {
	mu      sync.Mutex
	changes []Change
}

func (r *recorder) handle(c Change) {
	r.mu.Lock()
	r.changes = append(r.changes, c)
	r.mu.Unlock()
}

func (r *recorder) take() []Change {
	r.mu.Lock()
	defer r.mu.Unlock()
	c := r.changes
	r.changes = nil
	return c
}

func (r *recorder) waitFor(t *testing.T, what string, ok func(Change) bool) Change {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		r.mu.Lock()
		for _, c := range r.changes {
			if ok(c) {
				r.mu.Unlock()
				return c
			}
		}
		r.mu.Unlock()
		time.Sleep(5 * time.Millisecond)
	}
	got := r.take()
	reasons := map[string]int{}
	for _, c := range got {
		reasons[string(c.Reason)]++
	}
	t.Fatalf("timed out waiting for %s; got %d changes by reason %v", what, len(got), reasons)
	return Change{}
}

func startWatcher(t *testing.T, stores []Store) (*Watcher, *recorder) {
	t.Helper()
	rec := &recorder{}
	w, err := New(Config{Stores: stores, Handle: rec.handle, PollInterval: 100 * time.Millisecond}, slog.New(slog.NewTextHandler(t.Output(), nil)))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- w.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	})
	<-w.Ready()
	return w, rec
}

func hasPath(p string) func(Change) bool {
	return func(c Change) bool { return slices.Contains(c.Paths, p) }
}

func TestBurstYieldsOneChange(t *testing.T) {
	base := t.TempDir()
	root := filepath.Join(base, "app")
	os.MkdirAll(root, 0o755)
	_, rec := startWatcher(t, []Store{{Name: "s", Globs: []string{filepath.Join(base, "*")}, Settle: 100 * time.Millisecond}})
	rec.waitFor(t, "initial scan", func(c Change) bool { return c.Reason == "scan" && c.Root == root })
	p := filepath.Join(root, "memory.md")
	for i := range 20 {
		appendTo(t, p, fmt.Sprintf("line %d\n", i))
		time.Sleep(2 * time.Millisecond)
	}
	rec.waitFor(t, "settled change", hasPath(p))
	time.Sleep(300 * time.Millisecond)
	n := 0
	for _, c := range rec.take() {
		if slices.Contains(c.Paths, p) {
			n++
		}
	}
	if n != 1 {
		t.Errorf("a burst of 20 appends gave %d changes, want 1", n)
	}
}

func TestMaxWaitUnderConstantWrites(t *testing.T) {
	base := t.TempDir()
	root := filepath.Join(base, "app")
	os.MkdirAll(root, 0o755)
	_, rec := startWatcher(t, []Store{{Name: "s", Globs: []string{filepath.Join(base, "*")}, Settle: 20 * time.Millisecond}})
	rec.waitFor(t, "scan", func(c Change) bool { return c.Reason == "scan" })
	p := filepath.Join(root, "log.jsonl")
	stop := time.Now().Add(600 * time.Millisecond)
	t0 := time.Now()
	var first time.Duration
	for time.Now().Before(stop) {
		appendTo(t, p, "x\n")
		time.Sleep(5 * time.Millisecond) // never quiet for the 20ms settle
		if first == 0 && len(rec.take()) > 0 {
			first = time.Since(t0)
		}
	}
	if first == 0 || first > 400*time.Millisecond {
		t.Errorf("first change under constant writes after %v; want within ~10x settle (200ms)", first)
	}
}

func TestRenameSaveAndNestedTree(t *testing.T) {
	base := t.TempDir()
	root := filepath.Join(base, "ws")
	os.MkdirAll(root, 0o755)
	target := filepath.Join(root, "MEMORY.md")
	os.WriteFile(target, []byte("v1"), 0o644)
	_, rec := startWatcher(t, []Store{{Name: "s", Globs: []string{filepath.Join(base, "ws")}, Settle: 30 * time.Millisecond}})
	rec.waitFor(t, "scan", func(c Change) bool { return c.Reason == "scan" })
	// Save by write-to-temp-and-rename.
	tmp := filepath.Join(root, ".MEMORY.md.swp")
	os.WriteFile(tmp, []byte("v2"), 0o644)
	os.Rename(tmp, target)
	rec.waitFor(t, "rename-save", hasPath(target))
	// A nested tree created in one burst: every file is reported, and the
	// deepest directory is watched afterwards.
	deep := filepath.Join(root, "a", "b", "c", "d")
	os.MkdirAll(deep, 0o755)
	var want []string
	for _, d := range []string{"a", "a/b", "a/b/c", "a/b/c/d"} {
		f := filepath.Join(root, d, "f.md")
		os.WriteFile(f, []byte("x"), 0o644)
		want = append(want, f)
	}
	for _, f := range want {
		rec.waitFor(t, "file in new tree "+f, hasPath(f))
	}
	later := filepath.Join(deep, "later.md")
	time.Sleep(50 * time.Millisecond)
	os.WriteFile(later, []byte("x"), 0o644)
	rec.waitFor(t, "file created later in the new tree", hasPath(later))
}

func TestNewRootFromGlob(t *testing.T) {
	base := t.TempDir()
	glob := filepath.Join(base, "spaces", "*", "apps", "*")
	w, rec := startWatcher(t, []Store{{Name: "apps", Globs: []string{glob}, Settle: 20 * time.Millisecond}})
	root := filepath.Join(base, "spaces", "s1", "apps", "a1")
	if err := os.MkdirAll(root, 0o755); err != nil {
		t.Fatal(err)
	}
	rec.waitFor(t, "new root", func(c Change) bool { return c.Root == root && c.Reason == "new-root" })
	roots, _ := w.Roots(context.Background())
	if !slices.Equal(roots["apps"], []string{root}) {
		t.Errorf("roots = %v, want [%s]", roots, root)
	}
	f := filepath.Join(root, "memory.md")
	os.WriteFile(f, []byte("x"), 0o644)
	rec.waitFor(t, "change in new root", hasPath(f))
	os.RemoveAll(filepath.Join(base, "spaces", "s1"))
	deadline := time.Now().Add(3 * time.Second)
	for {
		roots, _ = w.Roots(context.Background())
		if len(roots["apps"]) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("removed root still present: %v", roots)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestIgnoresOwnFiles(t *testing.T) {
	base := t.TempDir()
	root := filepath.Join(base, "r")
	os.MkdirAll(filepath.Join(root, IgnoreDir), 0o755)
	_, rec := startWatcher(t, []Store{{Name: "s", Globs: []string{root}, Settle: 20 * time.Millisecond}})
	rec.waitFor(t, "scan", func(c Change) bool { return c.Reason == "scan" })
	rec.take()
	os.WriteFile(filepath.Join(root, ".m.md.memwatch-tmp-abc"), []byte("x"), 0o644)
	os.WriteFile(filepath.Join(root, IgnoreDir, "a"), []byte("x"), 0o644)
	time.Sleep(150 * time.Millisecond)
	if got := rec.take(); len(got) != 0 {
		t.Errorf("memwatch's own files produced changes: %+v", got)
	}
}

// TestAttributesAndSharedMemoryAreNoChange: a chmod or chown (SQLite, run
// as root, gives an agent's -wal and -shm the database's owner each time
// it opens them) and a write to a -shm file change nothing a layout reads;
// taken for changes, memwatch's own reads of a database would trigger the
// next read for ever. A write to the database's -wal is a change.
func TestAttributesAndSharedMemoryAreNoChange(t *testing.T) {
	base := t.TempDir()
	root := filepath.Join(base, "r")
	os.MkdirAll(root, 0o755)
	db := filepath.Join(root, "agent.sqlite")
	for _, f := range []string{db, db + "-wal", db + "-shm", filepath.Join(root, "m.md")} {
		os.WriteFile(f, []byte("x"), 0o644)
	}
	_, rec := startWatcher(t, []Store{{Name: "s", Globs: []string{root}, Settle: 20 * time.Millisecond}})
	rec.waitFor(t, "scan", func(c Change) bool { return c.Reason == "scan" })
	time.Sleep(100 * time.Millisecond)
	rec.take()
	for _, f := range []string{db, db + "-wal", db + "-shm", filepath.Join(root, "m.md")} {
		os.Chmod(f, 0o600)
		os.Chown(f, os.Getuid(), os.Getgid())
	}
	appendTo(t, db+"-shm", "y")
	time.Sleep(150 * time.Millisecond)
	if got := rec.take(); len(got) != 0 {
		t.Errorf("attribute changes and a -shm write produced changes: %+v", got)
	}
	appendTo(t, db+"-wal", "y")
	rec.waitFor(t, "the -wal write", hasPath(db+"-wal"))
}

// TestOverflowRescan makes the condition it tests: the kernel's watches
// of the existing directories are dropped behind the watcher's back (so
// what happens in them next makes no event at all, as in a queue that
// overflowed), new directories and files are made in them, and the
// overflow is reported as fsnotify reports it. Afterwards the watched
// directories equal a cold scan and the root was rescanned. It never
// relies on the machine being too slow to keep up.
func TestOverflowRescan(t *testing.T) {
	base := t.TempDir()
	root := filepath.Join(base, "r")
	os.MkdirAll(root, 0o755)
	rec := &recorder{}
	w, err := New(Config{Stores: []Store{{Name: "s", Globs: []string{root}, Settle: 20 * time.Millisecond}}, Handle: rec.handle},
		slog.New(slog.NewTextHandler(t.Output(), nil)))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go w.Run(ctx)
	<-w.Ready()
	var dirs []string
	for d := range 20 {
		dirs = append(dirs, filepath.Join(root, fmt.Sprintf("d%03d", d)))
		os.Mkdir(dirs[d], 0o755)
	}
	rec.waitFor(t, "scan", func(c Change) bool { return c.Reason == "scan" })
	waitWatched := func(want []string) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for time.Now().Before(deadline) {
			missing := 0
			w.do(ctx, func() {
				for _, d := range want {
					if _, ok := w.watched[d]; !ok {
						missing++
					}
				}
			})
			if missing == 0 {
				return
			}
			time.Sleep(10 * time.Millisecond)
		}
		t.Fatalf("the watcher never watched %v", want)
	}
	waitWatched(append([]string{root}, dirs...))
	// The events are lost: the kernel forgets the watches, the watcher
	// still counts them.
	w.do(ctx, func() {
		for _, d := range dirs {
			if err := w.fsw.Remove(d); err != nil {
				t.Errorf("remove the watch of %s: %v", d, err)
			}
		}
	})
	for _, dir := range dirs {
		os.MkdirAll(filepath.Join(dir, "new", "deeper"), 0o755)
		for f := range 20 {
			os.WriteFile(filepath.Join(dir, "new", fmt.Sprintf("f%d", f)), nil, 0o644)
		}
	}
	w.do(ctx, func() { w.watchError(fsnotify.ErrEventOverflow) })
	rec.waitFor(t, "rescan after overflow", func(c Change) bool { return c.Reason == "rescan" && c.Root == root })
	var cold []string
	filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if d.IsDir() {
			cold = append(cold, p)
		}
		return nil
	})
	var watched []string
	w.do(ctx, func() {
		for d := range w.watched {
			if d == root || strings.HasPrefix(d, root+"/") {
				watched = append(watched, d)
			}
		}
	})
	slices.Sort(cold)
	slices.Sort(watched)
	if !slices.Equal(cold, watched) {
		for _, d := range cold {
			if !slices.Contains(watched, d) {
				t.Errorf("not watched: %s", d)
			}
		}
		t.Errorf("watched %d directories, a cold scan finds %d", len(watched), len(cold))
	}
}

// When inotify watches run out, the root falls back to polling instead of
// being silently ignored.
func TestENOSPCFallsBackToPolling(t *testing.T) {
	base := t.TempDir()
	root := filepath.Join(base, "r")
	os.MkdirAll(filepath.Join(root, "sub"), 0o755)
	rec := &recorder{}
	w, err := New(Config{Stores: []Store{{Name: "s", Globs: []string{root}, Settle: 20 * time.Millisecond}}, Handle: rec.handle, PollInterval: 50 * time.Millisecond},
		slog.New(slog.NewTextHandler(t.Output(), nil)))
	if err != nil {
		t.Fatal(err)
	}
	real := w.add
	w.add = func(p string) error {
		if strings.HasSuffix(p, "sub") {
			return syscall.ENOSPC
		}
		return real(p)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go w.Run(ctx)
	<-w.Ready()
	c, _ := w.Counts(ctx)
	if c.Polled != 1 {
		t.Fatalf("polled roots = %d, want 1", c.Polled)
	}
	f := filepath.Join(root, "sub", "memory.md")
	os.WriteFile(f, []byte("x"), 0o644)
	got := rec.waitFor(t, "poll change", hasPath(f))
	if got.Reason != "poll" {
		t.Errorf("reason = %q, want poll", got.Reason)
	}
}

func appendTo(t *testing.T, p, s string) {
	t.Helper()
	f, err := os.OpenFile(p, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteString(s); err != nil {
		t.Fatal(err)
	}
	f.Close()
}
