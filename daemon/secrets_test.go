package daemon

import (
	"os"
	"path/filepath"
	"reflect"
	"testing"
	"time"

	"github.com/memwatch/memwatch/answer"
)

// TestSecretTallyKept: the tally a run saves is the one the next start
// loads; a file that does not decode, or none, is a tally to count again.
func TestSecretTallyKept(t *testing.T) {
	path := filepath.Join(t.TempDir(), tallyFile)
	at := time.Date(2026, 11, 28, 10, 0, 0, 0, time.UTC)
	a := newSecretTally()
	a.files["/home/u/.claude/projects/p\x00s.jsonl"] = fileSecrets{size: 42, mtime: at, FileCount: answer.FileCount{Dev: 2049, Ino: 77, End: 40, Sum: 9, Kinds: map[string]int{"aws-access-token": 2}}}
	a.held["/home/u/.claude/projects/p"] = heldSecrets{stamp: "1:7:1:false;", kinds: map[string]int{"github-pat": 1}, logs: map[int64]heldLog{1: {stamp: "7:1:false", kinds: map[string]int{"github-pat": 1}}}}
	a.at = at
	if err := a.save(path); err != nil {
		t.Fatal(err)
	}
	b := newSecretTally()
	if err := b.load(path); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(b.files, a.files) || !reflect.DeepEqual(b.held, a.held) || !b.at.Equal(at) {
		t.Errorf("loaded %+v %+v %v, saved %+v %+v %v", b.files, b.held, b.at, a.files, a.held, a.at)
	}
	if got := b.status(func(string) bool { return true }); got == nil || got.Found != 3 {
		t.Errorf("status after a load: %+v, want 3 found", got)
	}
	if fi, err := os.Stat(path); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("the tally's file: %v, %v; want mode 0600", fi, err)
	}

	// A tally of another detector (memwatch upgraded, its rules or its
	// reading changed) is counted again.
	old := `{"version":1,"detector":"0123456789abcdef","files":{"k":{"size":1,"kinds":{"x":1}}}}`
	for _, bad := range []string{"{", `{"version":2,"files":{}}`, `{"version":1,"files":{"k":{"size":"x"}}}`, "\x00\xff", old, `{"version":1,"files":{}}`} {
		os.WriteFile(path, []byte(bad), 0o600)
		c := newSecretTally()
		if err := c.load(path); err == nil {
			t.Errorf("load(%q) = nil, want an error", bad)
		}
		if len(c.files) != 0 || !c.at.IsZero() {
			t.Errorf("load(%q) kept %+v", bad, c.files)
		}
	}
	c := newSecretTally()
	if err := c.load(filepath.Join(t.TempDir(), "none")); err != nil || len(c.files) != 0 {
		t.Errorf("no file: %v, %+v", err, c.files)
	}
}

// FuzzSecretTallyLoad: whatever the state directory's tally file holds,
// a start loads it or counts again, and never fails for it.
func FuzzSecretTallyLoad(f *testing.F) {
	for _, s := range []string{`{"version":1,"at":"2026-11-28T10:00:00Z","files":{"r\u0000a":{"size":1,"mtime":"2026-11-28T10:00:00Z","kinds":{"x":1}}},"held":{"r":{"stamp":"s","kinds":null}}}`, "{", "null", `{"version":1}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		path := filepath.Join(t.TempDir(), tallyFile)
		os.WriteFile(path, data, 0o600)
		tl := newSecretTally()
		if err := tl.load(path); err != nil {
			return
		}
		tl.status(func(string) bool { return true })
		if err := tl.save(path); err != nil {
			t.Fatalf("save after a load: %v", err)
		}
	})
}
