package answer

import (
	"bytes"
	"context"
	"maps"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/memwatch/memwatch/confine"
	"github.com/memwatch/memwatch/control"
	"github.com/memwatch/memwatch/secrets"
)

// TestCountSecretsGrown: a file that grew is read from where its last
// count stopped, a line not ended yet counted again with what ends it; a
// file replaced or cut is read whole. Each count equals a count of the
// whole file.
func TestCountSecretsGrown(t *testing.T) {
	dir := t.TempDir()
	root, err := confine.Open(dir, confine.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer root.Close()
	path := filepath.Join(dir, "s.jsonl")
	d := secrets.Default()
	key := func(i int) string {
		return `{"type":"user","message":{"content":"export AWS_ACCESS_KEY_ID=AKIA` + []string{"QYLPMN5HFIQR7ABC", "ZXCVBNMASDFGHJKL", "POIUYTREWQLKJHGF", "MNBVCXZLKJHGFDSA"}[i%4] + `"}}`
	}
	lines := key(0) + "\n" + `{"type":"user","message":{"content":"nothing here"}}` + "\n" + key(1) + "\n"
	cut := key(2)[:len(key(2))-3] // its credential whole, its line not ended
	os.WriteFile(path, []byte(lines+cut), 0o600)

	total := func(c FileCount) int {
		n := 0
		for _, m := range []map[string]int{c.Kinds, c.Partial} {
			for _, k := range m {
				n += k
			}
		}
		return n
	}
	whole := func() int {
		c, _, err := CountSecretsInFile(context.Background(), d, root, "s.jsonl", FileCount{})
		if err != nil {
			t.Fatal(err)
		}
		return total(c)
	}
	steps := []struct {
		name     string
		change   func()
		wantRead int64 // -1: the whole file
		want     int
	}{
		{"first", func() {}, -1, 3},
		{"unchanged", func() {}, int64(len(cut)), 3},
		{"the cut line ended, one more", func() {
			f, _ := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0)
			f.WriteString(key(2)[len(cut):] + "\n" + key(3) + "\n")
			f.Close()
		}, int64(len(key(2)) + 1 + len(key(3)) + 1), 4},
		{"replaced by a rename", func() {
			os.WriteFile(path+".new", []byte(lines), 0o600)
			os.Rename(path+".new", path)
		}, -1, 2},
		{"cut short", func() {
			os.WriteFile(path, []byte(key(0)+"\n"), 0o600)
		}, -1, 1},
	}
	var prev FileCount
	for _, s := range steps {
		s.change()
		c, read, err := CountSecretsInFile(context.Background(), d, root, "s.jsonl", prev)
		if err != nil {
			t.Fatalf("%s: %v", s.name, err)
		}
		fi, _ := os.Stat(path)
		want := s.wantRead
		if want < 0 {
			want = fi.Size()
		}
		if read != want {
			t.Errorf("%s: read %d bytes, want %d", s.name, read, want)
		}
		if got := total(c); got != s.want || got != whole() {
			t.Errorf("%s: counted %d (kinds %v, partial %v), want %d, the whole file's %d", s.name, got, c.Kinds, c.Partial, s.want, whole())
		}
		data, _ := os.ReadFile(path)
		if wantEnd := int64(bytes.LastIndexByte(data, '\n') + 1); c.End != wantEnd {
			t.Errorf("%s: stopped at %d, want %d (after the last newline)", s.name, c.End, wantEnd)
		}
		prev = c
		prev.Kinds = maps.Clone(c.Kinds)
	}
}

// TestTallyNoneIn: a file is vouched for only when the tally counted
// none in it at its size and time now.
func TestTallyNoneIn(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "s.jsonl")
	os.WriteFile(path, []byte("x\n"), 0o600)
	fi, _ := os.Stat(path)
	tally := &SavedTally{Files: map[string]SavedFile{
		"/r\x00none":    {Size: fi.Size(), Mtime: fi.ModTime(), Kinds: map[string]int{"jwt": 0}},
		"/r\x00some":    {Size: fi.Size(), Mtime: fi.ModTime(), Kinds: map[string]int{"jwt": 1}},
		"/r\x00partial": {Size: fi.Size(), Mtime: fi.ModTime(), Partial: map[string]int{"jwt": 1}},
		"/r\x00grown":   {Size: fi.Size() - 1, Mtime: fi.ModTime()},
		"/r\x00touched": {Size: fi.Size(), Mtime: fi.ModTime().Add(-time.Second)},
	}}
	for rel, want := range map[string]bool{"none": true, "some": false, "partial": false, "grown": false, "touched": false, "unknown": false} {
		if got := tally.NoneIn("/r", rel, fi); got != want {
			t.Errorf("NoneIn(%s) = %v, want %v", rel, got, want)
		}
	}
	if (*SavedTally)(nil).NoneIn("/r", "none", fi) || tally.NoneIn("/r", "none", nil) {
		t.Error("no tally, or no file: vouched for")
	}
}

// TestSecretListKeepsTheNewest: with a Max, a list holds at most twice
// Max findings at any time and gives the newest Max, counting the rest.
func TestSecretListKeepsTheNewest(t *testing.T) {
	l := SecretList{Max: 3}
	base := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	for i := range 20 {
		// Out of order: i*7 mod 20 visits every minute once.
		l.add(control.SecretFinding{Kind: "k", File: "f", Line: int64(i), Since: base.Add(time.Duration(i*7%20) * time.Minute)})
		if len(l.Found) >= 2*l.Max {
			t.Fatalf("after %d findings it holds %d, want fewer than %d", i+1, len(l.Found), 2*l.Max)
		}
	}
	got := l.Sorted()
	if len(got) != 3 || l.More != 17 {
		t.Fatalf("got %d findings and %d more, want 3 and 17", len(got), l.More)
	}
	for i, f := range got {
		if want := base.Add(time.Duration(19-i) * time.Minute); !f.Since.Equal(want) {
			t.Errorf("finding %d of %v, want %v", i, f.Since, want)
		}
	}
	var all SecretList
	for i := range 5 {
		all.add(control.SecretFinding{Line: int64(i), Since: base})
	}
	if got := all.Sorted(); len(got) != 5 || all.More != 0 || got[0].Line != 0 {
		t.Errorf("no Max: %d findings, %d more, first line %d; want 5, 0, 0", len(got), all.More, got[0].Line)
	}
}
