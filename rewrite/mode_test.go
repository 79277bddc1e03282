package rewrite

import (
	"context"
	"io/fs"
	"os"
	"path/filepath"
	"testing"

	"github.com/memwatch/memwatch/state"
)

// A file memwatch creates is never more readable than the most private
// file it was made from.
func TestCreateMode(t *testing.T) {
	dir := t.TempDir()
	os.Chmod(dir, 0o755)
	for name, mode := range map[string]fs.FileMode{"open.jsonl": 0o644, "group.jsonl": 0o640, "private.jsonl": 0o600, "odd.md": 0o604} {
		os.WriteFile(filepath.Join(dir, name), []byte("x\n"), mode)
		os.Chmod(filepath.Join(dir, name), mode)
	}
	root := open(t, dir)
	for _, tc := range []struct {
		mode fs.FileMode
		from []string
		want fs.FileMode
	}{
		{0, []string{"open.jsonl"}, 0o644},
		{0, []string{"open.jsonl", "group.jsonl"}, 0o640},
		{0, []string{"open.jsonl", "private.jsonl"}, 0o600},
		{0, []string{"group.jsonl", "odd.md"}, 0o600},
		{0, []string{"gone.jsonl"}, 0o600},
		{0, nil, 0o600},
		{0o640, nil, 0o640},
		{0o644, []string{"group.jsonl"}, 0o640},
	} {
		if got := CreateMode(root, tc.mode, tc.from); got != tc.want {
			t.Errorf("CreateMode(%v, %v) = %v, want %v", tc.mode, tc.from, got, tc.want)
		}
	}
	// Through Apply, the general path and the append's.
	w := newRewriter(t)
	for _, req := range []Request{
		{Root: root, Target: "HISTORY.md", AllowCreate: true, From: []string{"private.jsonl"},
			Compute: func(context.Context, []byte) ([]byte, error) { return []byte("entry\n"), nil }},
		{Root: root, Target: "HISTORY-2026-11.md", AllowCreate: true, From: []string{"group.jsonl"},
			Append: func(context.Context, []byte) ([]byte, error) { return []byte("entry\n"), nil }},
	} {
		if _, err := w.Apply(context.Background(), req, &state.Record{Rule: "test"}); err != nil {
			t.Fatal(err)
		}
		fi, err := os.Stat(filepath.Join(dir, req.Target))
		if err != nil {
			t.Fatal(err)
		}
		if want := CreateMode(root, 0, req.From); fi.Mode().Perm() != want {
			t.Errorf("%s created %v, want %v", req.Target, fi.Mode().Perm(), want)
		}
	}
}
