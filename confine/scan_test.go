package confine

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestGlobScanIsGlob: a scan, read a few names at a time, finds what
// Glob finds, whatever the pattern, and enters no symbolic link.
func TestGlobScanIsGlob(t *testing.T) {
	dir := t.TempDir()
	for _, f := range []string{"a.jsonl", "b.jsonl", "c.md", "sessions/s1.jsonl", "sessions/s2.jsonl", "sessions/x/deep.jsonl",
		"agents/one/sessions/1.jsonl", "agents/two/sessions/2.jsonl", "agents/two/sessions/2y.jsonl", "workspace/sessions/w.jsonl", ".memwatch/archive/a.jsonl", "memory/MEMORY.md", "memory/HISTORY-1.md", "memory/archive/MEMORY-2.md.gz"} {
		write(t, filepath.Join(dir, f), "x")
	}
	os.Symlink(filepath.Join(dir, "sessions"), filepath.Join(dir, "linked"))
	r := mustOpen(t, dir, Options{})
	for _, tt := range []struct{ pattern, exclude string }{
		{"*.jsonl", ""}, {"sessions/*.jsonl", ""}, {"agents/*/sessions/*[^y].jsonl", ""}, {"{workspace/sessions,sessions}/*.jsonl", ""},
		{"*", ""}, {"sessions/*.jsonl", "s1*"}, {"linked/*.jsonl", ""},
		// Scans that start in a directory the pattern names: one that is
		// missing, a file, a link, or two alternatives that agree or not.
		{"memory/MEMORY.md", ""}, {"memory/HISTORY*.md", ""}, {"memory/archive/{MEMORY,HISTORY}-[0-9]*.md{,.gz}", ""},
		{"absent/*.md", ""}, {"a.jsonl/*", ""}, {"linked/x/*.jsonl", ""}, {"sessions/x/*.jsonl", ""},
		{"agents/two/sessions/*.jsonl", ""}, {"{memory/MEMORY.md,memory/HISTORY-1.md}", ""}, {"{memory/*.md,sessions/*.jsonl}", ""},
	} {
		want, _ := r.GlobExcept(tt.pattern, tt.exclude)
		s, err := r.GlobScan(tt.pattern, tt.exclude)
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for {
			rels, done := s.Next(2)
			got = append(got, rels...)
			if done {
				break
			}
		}
		slices.Sort(got)
		// Glob follows a link to a directory inside the root; a scan enters
		// none, and yields files (and links), not directories.
		if strings.HasPrefix(tt.pattern, "linked/") {
			want = nil
		}
		want = slices.DeleteFunc(want, func(rel string) bool {
			fi, err := os.Lstat(filepath.Join(dir, rel))
			return err == nil && fi.IsDir()
		})
		if !slices.Equal(got, want) {
			t.Errorf("GlobScan(%q, %q) = %q, want %q", tt.pattern, tt.exclude, got, want)
		}
	}
}

// TestListingIsGlob: one listing for many patterns finds what GlobExcept
// finds for each, and says what each listed match is as its lstat does.
func TestListingIsGlob(t *testing.T) {
	dir := t.TempDir()
	for _, f := range []string{"a.jsonl", "b.jsonl", "c.md", "memory/MEMORY.md", "memory/HISTORY-1.md", "sessions/s1.jsonl", "sessions/s2.jsonl",
		"agents/one/sessions/1.jsonl", "agents/two/sessions/2.jsonl", "agents/two/sessions/2y.jsonl", "workspace/sessions/w.jsonl"} {
		write(t, filepath.Join(dir, f), "x")
	}
	os.Symlink(filepath.Join(dir, "sessions"), filepath.Join(dir, "linked"))
	os.Symlink("a.jsonl", filepath.Join(dir, "z.jsonl"))
	r := mustOpen(t, dir, Options{})
	l := r.Listing()
	for _, tt := range []struct{ pattern, exclude string }{
		{"*.jsonl", ""}, {"sessions/*.jsonl", ""}, {"agents/*/sessions/*[^y].jsonl", ""}, {"{workspace/sessions,sessions}/*.jsonl", ""},
		{"*", ""}, {"sessions/*.jsonl", "s1*"}, {"linked/*.jsonl", ""}, {"memory/MEMORY.md", ""}, {"memory/HISTORY*.md", ""},
		{"absent/*.md", ""}, {"memory/archive/{MEMORY,HISTORY}-[0-9]*.md{,.gz}", ""}, {"*.jsonl", ""},
	} {
		want, werr := r.GlobExcept(tt.pattern, tt.exclude)
		ms, err := l.GlobExcept(tt.pattern, tt.exclude)
		if (err != nil) != (werr != nil) {
			t.Fatalf("%q: error %v, want %v", tt.pattern, err, werr)
		}
		var got []string
		for _, m := range ms {
			got = append(got, m.Rel)
			if m.Info == nil {
				continue
			}
			fi, err := os.Lstat(filepath.Join(dir, m.Rel))
			if err != nil || fi.Mode() != m.Info.Mode() || fi.Size() != m.Info.Size() || !os.SameFile(fi, m.Info) {
				t.Errorf("%q: %s listed as %v %d, its lstat says %v", tt.pattern, m.Rel, m.Info.Mode(), m.Info.Size(), fi)
			}
		}
		if !slices.Equal(got, want) {
			t.Errorf("%q (except %q): %v, want %v", tt.pattern, tt.exclude, got, want)
		}
	}
}
