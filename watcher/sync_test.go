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
	w, err := New(Config{Stores: []Store{{Name: "s", Globs: []string{filepath.Join(base, "*")}, Settle: time.Second}},
		SyncDir: filepath.Join(t.TempDir(), "sync")}, slog.New(slog.NewTextHandler(t.Output(), nil)))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- w.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	<-w.Ready()

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
