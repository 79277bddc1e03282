package versions

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"testing"

	"github.com/memwatch/memwatch/confine"
)

// TestVersionsBelongToTheirDirectory: versions captured from one directory
// are not listed, read or found deleted for another that takes its path
// (Elsewhere says they exist); each version keeps the file's mode.
func TestVersionsBelongToTheirDirectory(t *testing.T) {
	ctx := context.Background()
	s, root, dir, _ := setup(t)
	p := filepath.Join(dir, "MEMORY.md")
	os.WriteFile(p, []byte("bob's secret\n"), 0o600)
	os.Chmod(p, 0o604)
	v, _, ok, err := s.Capture(ctx, root, "MEMORY.md", nil)
	if err != nil || !ok {
		t.Fatal(ok, err)
	}
	if v.Mode != 0o604 {
		t.Errorf("the version's mode: %v, want 0604", v.Mode)
	}
	if _, err := os.Stat(p); err == nil {
		os.Remove(p)
	}
	s.Capture(ctx, root, "MEMORY.md", nil) // the deletion
	root.Close()
	os.Rename(dir, dir+".old")
	os.MkdirAll(dir, 0o755)
	other, err := confine.Open(dir, confine.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	if vs, _ := s.List(ctx, other.ID(), "MEMORY.md"); len(vs) != 0 {
		t.Errorf("the new directory lists %d of the old one's versions", len(vs))
	}
	if _, _, err := s.Get(ctx, other.ID(), "MEMORY.md", 1); !errors.Is(err, ErrNoVersion) {
		t.Errorf("the new directory reads the old one's version: %v", err)
	}
	if files, _ := s.Files(ctx, other.ID()); len(files) != 0 {
		t.Errorf("the new directory's files with versions: %q", files)
	}
	if dels, _ := s.DeletedSince(ctx, other.ID(), s.Now().Add(-1e12)); len(dels) != 0 {
		t.Errorf("the new directory finds the old one's deletion: %v", dels)
	}
	ids, err := s.Elsewhere(ctx, other.ID(), "MEMORY.md")
	if err != nil || len(ids) != 1 || ids[0].Path != dir || ids[0].SameDir(other.ID()) {
		t.Errorf("Elsewhere: %+v %v, want the old directory", ids, err)
	}
	// The old directory back: its versions, with their mode.
	other.Close()
	os.RemoveAll(dir)
	os.Rename(dir+".old", dir)
	back, err := confine.Open(dir, confine.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer back.Close()
	got, data, err := s.Get(ctx, back.ID(), "MEMORY.md", 1)
	if err != nil || string(data) != "bob's secret\n" || got.Mode != fs.FileMode(0o604) {
		t.Errorf("the old directory's version 1: %+v %q %v", got, data, err)
	}
}
