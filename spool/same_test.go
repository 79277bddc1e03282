package spool

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// TestSameByStat: a log a capture found settled and wholly captured is
// told unchanged by its stat alone, and any later change of the file (an
// append, a rewrite in place of the same size with its mtime put back, a
// file renamed over it, a deletion) is captured as before.
func TestSameByStat(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	s := newSpool(t)
	// The files' change times are the real clock's: captures see them a
	// second later, settled.
	s.Now = func() time.Time { return time.Now().Add(time.Second) }
	root := openRoot(t, dir)
	p := filepath.Join(dir, "s.jsonl")
	if err := os.WriteFile(p, []byte(lines(msgs(1, 3)...)), 0o600); err != nil {
		t.Fatal(err)
	}
	capture := func(wantWhy string, wantFast bool) {
		t.Helper()
		before := s.sameByStat.Load()
		res, err := s.Capture(ctx, root, "s.jsonl", opts)
		if err != nil {
			t.Fatal(err)
		}
		if fast := s.sameByStat.Load() > before; res.Why != wantWhy || fast != wantFast {
			t.Fatalf("capture: %q (by stat: %v), want %q (by stat: %v)", res.Why, fast, wantWhy, wantFast)
		}
	}
	capture("new", false)
	capture("same", false) // settled now: kept
	capture("same", true)
	capture("same", true)

	// An append.
	f, err := os.OpenFile(p, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.WriteString(msg(4) + "\n")
	f.Close()
	capture("append", false)
	capture("same", false)
	capture("same", true)

	// Rewritten in place to the same size: captured.
	data, _ := os.ReadFile(p)
	if err := os.WriteFile(p, []byte(strings.Replace(string(data), "message 4", "message 8", 1)), 0o600); err != nil {
		t.Fatal(err)
	}
	before := s.sameByStat.Load()
	if res, err := s.Capture(ctx, root, "s.jsonl", opts); err != nil || res.Why == "same" || s.sameByStat.Load() != before {
		t.Fatalf("a rewrite in place: %q, %v", res.Why, err)
	}
	if got := captured(t, s, root, "s.jsonl"); !slices.Contains(got, msg(8)) {
		t.Errorf("after the rewrite: %q, want %q among them", got, msg(8))
	}
	capture("same", false)
	capture("same", true)
	// Again, its mtime put back: its change time still tells (what the
	// capture then finds is its own: it trusts a settled mtime).
	fi, _ := os.Stat(p)
	data, _ = os.ReadFile(p)
	if err := os.WriteFile(p, []byte(strings.Replace(string(data), "message 2", "message 9", 1)), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Chtimes(p, fi.ModTime(), fi.ModTime()); err != nil {
		t.Fatal(err)
	}
	before = s.sameByStat.Load()
	if _, err := s.Capture(ctx, root, "s.jsonl", opts); err != nil || s.sameByStat.Load() != before {
		t.Fatalf("a rewrite in place with its mtime put back was told unchanged by its stat (%v)", err)
	}

	// Another file renamed over it.
	replace(t, p, lines(append(msgs(1, 4), msg(5))...))
	before = s.sameByStat.Load()
	if res, err := s.Capture(ctx, root, "s.jsonl", opts); err != nil || res.Why == "same" || s.sameByStat.Load() != before {
		t.Fatalf("a file renamed over the log: %q, %v", res.Why, err)
	}
	if got := captured(t, s, root, "s.jsonl"); !slices.Contains(got, msg(5)) {
		t.Errorf("after the rename: %q, want %q among them", got, msg(5))
	}
	capture("same", false)
	capture("same", true)

	// Deleted.
	if err := os.Remove(p); err != nil {
		t.Fatal(err)
	}
	capture("gone", false)
	if res, _ := s.Capture(ctx, root, "s.jsonl", opts); res.Why != "missing" {
		t.Errorf("deleted, again: %q, want missing", res.Why)
	}
}
