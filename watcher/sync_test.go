package watcher

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// TestSyncSeesEveryEarlierChange: whatever was done under a root before
// Sync (an append, a file created in a new directory, a mode changed, a
// file renamed over another), the marks Sync returns say the root
// changed, with no wait in between; nothing done, they say the same; a
// path that is no watched root is not to be trusted.
func TestSyncSeesEveryEarlierChange(t *testing.T) {
	base := t.TempDir()
	root := filepath.Join(base, "app")
	other := filepath.Join(base, "other")
	for _, d := range []string{root, other} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	log := filepath.Join(root, "s.jsonl")
	if err := os.WriteFile(log, []byte("{}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	w, ctx := runSyncWatcher(t, base, filepath.Join(t.TempDir(), "sync"))

	marks := func() (uint64, uint64) {
		t.Helper()
		// A machine too busy for the marker to come through in time gets
		// an error (the search lists every root): ask again.
		m, err := w.Sync(ctx)
		for deadline := time.Now().Add(10 * time.Second); err != nil && time.Now().Before(deadline); {
			m, err = w.Sync(ctx)
		}
		if err != nil {
			t.Fatal(err)
		}
		a, ok := m.Changed(root)
		b, ok2 := m.Changed(other)
		if !ok || !ok2 {
			t.Fatalf("the roots are not in the marks: %v", m.changed)
		}
		if _, ok := m.Changed(filepath.Join(root, "s.jsonl")); ok {
			t.Error("a file of a root is trusted as a root")
		}
		return a, b
	}
	a0, b0 := marks()
	for _, step := range []struct {
		what string
		do   func() error
	}{
		{"an append", func() error {
			f, err := os.OpenFile(log, os.O_WRONLY|os.O_APPEND, 0)
			if err != nil {
				return err
			}
			defer f.Close()
			_, err = f.WriteString("{\"role\":\"user\"}\n")
			return err
		}},
		{"a file in a new directory", func() error {
			if err := os.Mkdir(filepath.Join(root, "memory"), 0o755); err != nil {
				return err
			}
			return os.WriteFile(filepath.Join(root, "memory", "MEMORY.md"), []byte("x\n"), 0o644)
		}},
		{"a mode changed", func() error { return os.Chmod(log, 0o600) }},
		{"a rename over the log", func() error {
			tmp := filepath.Join(root, "s.jsonl.tmp")
			if err := os.WriteFile(tmp, []byte("{}\n"), 0o644); err != nil {
				return err
			}
			return os.Rename(tmp, log)
		}},
	} {
		if err := step.do(); err != nil {
			t.Fatalf("%s: %v", step.what, err)
		}
		a, b := marks()
		if a == a0 {
			t.Errorf("%s: the root's mark did not move (%d)", step.what, a)
		}
		if b != b0 {
			t.Errorf("%s: the other root's mark moved (%d -> %d)", step.what, b0, b)
		}
		a0 = a
	}
	if a, _ := marks(); a != a0 {
		t.Errorf("nothing done: the mark moved (%d -> %d)", a0, a)
	}
}

// TestSyncWithoutDirectory: a watcher with no sync directory says so
// rather than wait.
func TestSyncWithoutDirectory(t *testing.T) {
	w, _ := startWatcher(t, nil)
	if _, err := w.Sync(context.Background()); err == nil {
		t.Error("Sync without a sync directory: no error")
	}
}

// TestSyncBeforeReadyDoesNotWait: before the watcher's first scan is done
// a search is told at once that nothing can be trusted.
func TestSyncBeforeReadyDoesNotWait(t *testing.T) {
	w, err := New(Config{SyncDir: filepath.Join(t.TempDir(), "sync")}, slog.New(slog.NewTextHandler(t.Output(), nil)))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := w.Sync(ctx); err == nil || ctx.Err() != nil {
		t.Errorf("Sync before Run: err %v, context %v; want an error at once", err, ctx.Err())
	}
}

// TestSyncReusesItsMarker: a search after a search touches the marker
// the first made rather than making a file of its own; a Sync given up
// (its context done) leaves no marker behind to be reused.
func TestSyncReusesItsMarker(t *testing.T) {
	base := t.TempDir()
	root := filepath.Join(base, "app")
	os.MkdirAll(root, 0o755)
	syncDir := filepath.Join(t.TempDir(), "sync")
	w, ctx := runSyncWatcher(t, base, syncDir)
	markers := func() []string {
		ents, _ := os.ReadDir(syncDir)
		var names []string
		for _, e := range ents {
			names = append(names, e.Name())
		}
		return names
	}
	// Five in a row through one marker (a machine too busy for a marker
	// to come through in time retires it: the run starts again).
	var first []string
	for ok, deadline := 0, time.Now().Add(10*time.Second); ok < 5; {
		if _, err := w.Sync(ctx); err != nil {
			if time.Now().After(deadline) {
				t.Fatal(err)
			}
			ok, first = 0, nil
			continue
		}
		if got := markers(); ok == 0 {
			first = got
		} else if len(got) != 1 || len(first) != 1 || got[0] != first[0] {
			t.Fatalf("after sync %d the markers are %v, want the first one alone (%v)", ok, got, first)
		}
		ok++
	}
	// Given up before its event: the marker goes, and the next Sync makes
	// a new one.
	gone, stop := context.WithCancel(ctx)
	stop()
	if _, err := w.Sync(gone); err == nil {
		t.Skip("the marker's event came through before the Sync saw its context done")
	}
	if got := markers(); len(got) != 0 {
		t.Errorf("after a Sync given up the markers are %v, want none", got)
	}
	if _, err := w.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	if got := markers(); len(got) != 1 || got[0] == first[0] {
		t.Errorf("after a new Sync the markers are %v, want a new one", got)
	}
}

// runSyncWatcher runs, until the test ends, a watcher of the directories
// in base with its sync markers in syncDir, and returns it ready.
func runSyncWatcher(t *testing.T, base, syncDir string) (*Watcher, context.Context) {
	t.Helper()
	w, err := New(Config{Stores: []Store{{Name: "s", Globs: []string{filepath.Join(base, "*")}, Settle: time.Second}},
		SyncDir: syncDir}, slog.New(slog.NewTextHandler(t.Output(), nil)))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- w.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	<-w.Ready()
	return w, ctx
}
