package versions

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/memwatch/memwatch/confine"
)

func setup(t testing.TB) (*Store, *confine.Root, string, *time.Time) {
	t.Helper()
	s, err := Open(context.Background(), t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	s.Now = func() time.Time { return now }
	dir := t.TempDir()
	root, err := confine.Open(dir, confine.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { root.Close() })
	return s, root, dir, &now
}

// note is a 20 KB memory note whose line k says version v.
func note(lines, k, v int) string {
	var b strings.Builder
	for i := range lines {
		if i == k {
			fmt.Fprintf(&b, "- fact %d, changed in version %d\n", i, v)
			continue
		}
		fmt.Fprintf(&b, "- fact %d: the user prefers tabs, deploys on Fridays, and keeps notes short\n", i)
	}
	return b.String()
}

func TestCaptureListGet(t *testing.T) {
	ctx := context.Background()
	s, root, dir, now := setup(t)
	p := filepath.Join(dir, "MEMORY.md")
	contents := []string{"a\nb\n", "a\nb\nc\n", "a\nc\n", "a\nc\n", ""}
	for i, c := range contents {
		*now = now.Add(time.Minute)
		if err := os.WriteFile(p, []byte(c), 0o644); err != nil {
			t.Fatal(err)
		}
		v, _, ok, err := s.Capture(ctx, root, "MEMORY.md", nil)
		if err != nil {
			t.Fatal(err)
		}
		if i == 3 {
			if ok {
				t.Errorf("capture of unchanged content made version %d", v.N)
			}
			continue
		}
		want := int64(i + 1) // the unchanged capture (i == 3) made none
		if i == 4 {
			want = 4
		}
		if !ok || v.N != want {
			t.Errorf("capture %d made version %d (%v), want %d", i, v.N, ok, want)
		}
	}
	os.Remove(p)
	if v, prev, ok, err := s.Capture(ctx, root, "MEMORY.md", nil); err != nil || !ok || !v.Deleted() || prev.N != 4 {
		t.Fatalf("capture of the deletion = %+v, prev %+v, %v, %v", v, prev, ok, err)
	}
	if _, _, ok, _ := s.Capture(ctx, root, "MEMORY.md", nil); ok {
		t.Error("a second capture of the deletion made a version")
	}
	vs, err := s.List(ctx, root.ID(), "MEMORY.md")
	if err != nil {
		t.Fatal(err)
	}
	type row struct{ n, size, added, removed int64 }
	want := []row{{1, 4, 2, 0}, {2, 6, 1, 0}, {3, 4, 0, 1}, {4, 0, 0, 2}, {5, -1, 0, 0}}
	if len(vs) != len(want) {
		t.Fatalf("got %d versions, want %d: %+v", len(vs), len(want), vs)
	}
	for i, v := range vs {
		if got := (row{v.N, v.Size, v.Added, v.Removed}); got != want[i] {
			t.Errorf("version %d: got %+v, want %+v", i+1, got, want[i])
		}
	}
	for i, c := range []string{"a\nb\n", "a\nb\nc\n", "a\nc\n", ""} {
		_, data, err := s.Get(ctx, root.ID(), "MEMORY.md", int64(i+1))
		if err != nil || string(data) != c {
			t.Errorf("Get(%d) = %q, %v; want %q", i+1, data, err, c)
		}
	}
	if _, _, err := s.Get(ctx, root.ID(), "MEMORY.md", 9); !errors.Is(err, ErrNoVersion) {
		t.Errorf("Get(9) error = %v, want ErrNoVersion", err)
	}
	dels, err := s.DeletedSince(ctx, root.ID(), now.Add(-time.Hour))
	if err != nil || len(dels) != 1 || dels[0][1].N != 4 {
		t.Errorf("DeletedSince = %+v, %v; want MEMORY.md with version 4 before it", dels, err)
	}
}

// TestDeltasReadBack: every version of a long chain reads back exactly,
// from a fresh Store (no cache), and after retention removed the bases.
func TestDeltasReadBack(t *testing.T) {
	ctx := context.Background()
	s, root, dir, now := setup(t)
	p := filepath.Join(dir, "MEMORY.md")
	const n = 100
	for v := 1; v <= n; v++ {
		*now = now.Add(time.Minute)
		os.WriteFile(p, []byte(note(250, v%250, v)), 0o644)
		if _, _, ok, err := s.Capture(ctx, root, "MEMORY.md", nil); err != nil || !ok {
			t.Fatalf("capture %d: %v %v", v, ok, err)
		}
	}
	fresh, err := OpenReadOnly(ctx, s.dir)
	if err != nil {
		t.Fatal(err)
	}
	defer fresh.Close()
	for v := 1; v <= n; v++ {
		if _, data, err := fresh.Get(ctx, root.ID(), "MEMORY.md", int64(v)); err != nil || string(data) != note(250, v%250, v) {
			t.Fatalf("version %d does not read back: %v", v, err)
		}
	}
	// keep 30: the 70 oldest go, bases of the rest included.
	pr, err := s.Prune(ctx, root.ID().Key(), Retention{Keep: 30})
	if err != nil || pr.Versions != 70 {
		t.Fatalf("Prune = %+v, %v; want 70 versions removed", pr, err)
	}
	s.cache = map[string][]byte{}
	for v := 71; v <= n; v++ {
		if _, data, err := s.Get(ctx, root.ID(), "MEMORY.md", int64(v)); err != nil || string(data) != note(250, v%250, v) {
			t.Fatalf("after prune, version %d does not read back: %v", v, err)
		}
	}
}

func TestRetention(t *testing.T) {
	ctx := context.Background()
	t.Run("keep 100: the 101st version removes the oldest", func(t *testing.T) {
		s, root, dir, now := setup(t)
		p := filepath.Join(dir, "note.md")
		for v := 1; v <= 101; v++ {
			*now = now.Add(time.Minute)
			os.WriteFile(p, []byte(note(20, v%20, v)), 0o644)
			s.Capture(ctx, root, "note.md", nil)
			if _, err := s.Prune(ctx, root.ID().Key(), Retention{Keep: 100}); err != nil {
				t.Fatal(err)
			}
		}
		vs, _ := s.List(ctx, root.ID(), "note.md")
		if len(vs) != 100 || vs[0].N != 2 || vs[99].N != 101 {
			t.Errorf("got %d versions from %d to %d, want 100 from 2 to 101", len(vs), vs[0].N, vs[len(vs)-1].N)
		}
	})
	t.Run("a simulated year stays within max bytes", func(t *testing.T) {
		s, root, dir, now := setup(t)
		const maxBytes = 256 << 10
		r := Retention{Keep: 1000, MaxAge: 180 * 24 * time.Hour, MaxBytes: maxBytes}
		rnd := uint64(1)
		for day := range 365 {
			*now = now.Add(24 * time.Hour)
			for f := range 3 {
				// Each day rewrites most of a note: little to delta against.
				var b strings.Builder
				for range 200 {
					rnd = rnd*6364136223846793005 + 1442695040888963407
					fmt.Fprintf(&b, "- %x\n", rnd)
				}
				os.WriteFile(filepath.Join(dir, fmt.Sprintf("n%d.md", f)), []byte(b.String()), 0o644)
				if _, _, _, err := s.Capture(ctx, root, fmt.Sprintf("n%d.md", f), nil); err != nil {
					t.Fatal(err)
				}
			}
			if day%7 == 6 {
				if _, err := s.Prune(ctx, root.ID().Key(), r); err != nil {
					t.Fatal(err)
				}
			}
		}
		s.Prune(ctx, root.ID().Key(), r)
		var used int64
		s.db.QueryRow(`SELECT coalesce(sum(length(data)),0) FROM objects`).Scan(&used)
		if used > maxBytes {
			t.Errorf("after a year, %d bytes of versions, want at most %d", used, maxBytes)
		}
		for f := range 3 {
			vs, _ := s.List(ctx, root.ID(), fmt.Sprintf("n%d.md", f))
			if len(vs) == 0 {
				t.Errorf("n%d.md has no version left; its newest must stay", f)
			}
		}
		t.Logf("a year of daily rewrites of 3 notes: %d bytes stored (bound %d)", used, maxBytes)
	})
}

func TestWriterAttribution(t *testing.T) {
	ctx := context.Background()
	s, root, dir, _ := setup(t)
	os.WriteFile(filepath.Join(dir, "m.md"), []byte("ours\n"), 0o644)
	who := func(sha string) (string, int64) {
		if sha == Hash([]byte("ours\n")) {
			return ByMemwatch, 7
		}
		return ByAgent, 0
	}
	v, _, _, err := s.Capture(ctx, root, "m.md", who)
	if err != nil || v.Writer != ByMemwatch || v.Record != 7 {
		t.Errorf("version = %+v, %v; want written by memwatch, record 7", v, err)
	}
}
