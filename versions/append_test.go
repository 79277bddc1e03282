package versions

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"testing"

	"github.com/memwatch/memwatch/filesum"
	"github.com/memwatch/memwatch/rewrite"
	"github.com/memwatch/memwatch/state"
)

// TestAppendedVersions: a history memwatch appends to (through the
// rewrite, sharing its hashes) is versioned from the bytes added: every
// version reads back exactly, across the longest chain of appends and the
// keyframe after it, with the line counts a whole read gives; an agent's
// own write in between is read whole and the chain goes on after it.
func TestAppendedVersions(t *testing.T) {
	ctx := context.Background()
	s, root, dir, _ := setup(t)
	sums := filesum.New()
	s.Sums = sums
	s.appendDepth = 100 // a keyframe after 100 appends, not 1,024: the test runs under -race
	rw := rewrite.New(nil, slog.New(slog.DiscardHandler))
	rw.Sums = sums
	p := filepath.Join(dir, "HISTORY.md")
	os.WriteFile(p, []byte("# History\n"), 0o644)
	want := map[int64]string{}
	capture := func() {
		t.Helper()
		v, _, ok, err := s.Capture(ctx, root, "HISTORY.md", nil)
		if err != nil || !ok {
			t.Fatalf("capture: %v %v", ok, err)
		}
		b, _ := os.ReadFile(p)
		want[v.N] = string(b)
		lines, added, removed := int64(len(splitLines(b))), int64(0), int64(0)
		if v.N > 1 {
			added, removed = lineChanges([]byte(want[v.N-1]), b)
		}
		if v.Lines != lines || (v.N > 1 && (v.Added != added || v.Removed != removed)) {
			t.Fatalf("version %d: lines %d +%d -%d, want %d +%d -%d", v.N, v.Lines, v.Added, v.Removed, lines, added, removed)
		}
	}
	capture()
	for i := range s.appendDepth + 40 {
		entry := fmt.Sprintf("## entry %d\nthe deploy waits for the migration\n\n", i)
		if i%30 == 7 {
			entry = "an open line" // no newline: the next append continues it
		}
		_, err := rw.Apply(ctx, rewrite.Request{Root: root, Target: "HISTORY.md", Append: func(context.Context, []byte) ([]byte, error) { return []byte(entry), nil }},
			&state.Record{Rule: "consolidate"})
		if err != nil {
			t.Fatal(err)
		}
		if i == 50 { // the agent appends its own entry
			f, _ := os.OpenFile(p, os.O_WRONLY|os.O_APPEND, 0)
			f.WriteString("## the agent's own entry\n")
			f.Close()
		}
		capture()
	}
	for n, w := range want {
		if _, got, err := s.Get(ctx, root.ID(), "HISTORY.md", n); err != nil || string(got) != w {
			t.Fatalf("version %d reads back %d bytes (%v), want %d", n, len(got), err, len(w))
		}
	}
	var deepest int
	s.db.QueryRow(`SELECT max(depth) FROM objects`).Scan(&deepest)
	if deepest < keyframeEvery || deepest >= s.appendDepth {
		t.Errorf("deepest delta chain %d: want appends chained past %d and a keyframe before %d", deepest, keyframeEvery, s.appendDepth)
	}
}
