package nowhistory

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/memwatch/memwatch/confine"
)

var update = flag.Bool("update", false, "rewrite golden files")

func golden(t *testing.T, name string, got []byte) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test -update to create it)", err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("%s differs from the golden file\n--- got\n%s\n--- want\n%s", name, got, want)
	}
}

// testRoot opens a directory of testdata as a root.
func testRoot(t *testing.T, dir string) *confine.Root {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	r, err := confine.Open(dir, confine.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	return r
}

func TestSnapshotGolden(t *testing.T) {
	for _, name := range []string{"missing", "small", "large", "crlf", "nohistory"} {
		t.Run(name, func(t *testing.T) {
			root := testRoot(t, filepath.Join("testdata", name))
			s, err := Snapshot(root, "memory.md")
			if err != nil {
				t.Fatal(err)
			}
			s = strings.ReplaceAll(s, root.Path(), filepath.Join("testdata", name))
			golden(t, name+".snapshot.golden", []byte(s))
		})
	}
}

func TestStatusGolden(t *testing.T) {
	root := testRoot(t, filepath.Join("testdata", "large"))
	st, err := Status(root, "memory.md", 100<<10)
	if err != nil {
		t.Fatal(err)
	}
	st.Path = filepath.Join("testdata", "large", "memory.md")
	b, _ := json.MarshalIndent(st, "", "  ")
	golden(t, "large.status.golden.json", append(b, '\n'))
	golden(t, "large.status.golden.txt", []byte(FormatStatus(st)))
}

func TestStateFirstAndOversize(t *testing.T) {
	tests := []struct{ name, src, want string }{
		{"state first", "# now\n## State | ok\n## Patterns\n# History\n", ""},
		{"state second", "# now\n## Patterns\n- p\n## State | ok\n# History\n", "## State (L4) is not the first section of # now: ## Patterns (L2) comes before it"},
		{"no state", "# now\n## Patterns\n# History\n", "# now has no ## State section"},
		{"state in history only", "# now\n## Patterns\n# History\n## State\n", "# now has no ## State section"},
		{"no headings", "just text\n", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := StateWarning([]byte(tt.src))
			if tt.want == "" && got != "" || !strings.Contains(got, tt.want) {
				t.Errorf("got %q, want %q", got, tt.want)
			}
		})
	}
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "memory.md"), []byte("# now\n## Patterns\n## State\n"+strings.Repeat("x", 2000)+"\n"), 0o644)
	st, err := Status(testRoot(t, dir), "memory.md", 1024)
	if err != nil {
		t.Fatal(err)
	}
	out := FormatStatus(st)
	if len(st.Warnings) != 2 || !strings.Contains(out, "warning: ## State (L3)") || !strings.Contains(out, "over max_size 1.0KB") {
		t.Errorf("status of an oversize file with ## State second: %q", out)
	}
}

func TestStamp(t *testing.T) {
	tests := []struct{ name, in, want string }{
		{"top of history", "# now\n## State\n\n# History\n\n## 2026-01-15-1400 | old\n", "# now\n## State\n\n# History\n\n## 2026-01-15-1430\n## 2026-01-15-1400 | old\n"},
		{"idempotent", "# now\n# History\n## 2026-01-15-1430\n", "# now\n# History\n## 2026-01-15-1430\n"},
		{"idempotent after summary", "# now\n# History\n## 2026-01-15-1430 | done\n", "# now\n# History\n## 2026-01-15-1430 | done\n"},
		{"no history", "# now\n## State\n", "# now\n## State\n\n# History\n\n## 2026-01-15-1430\n"},
		{"empty file", "", "# History\n\n## 2026-01-15-1430\n"},
		{"crlf", "# now\r\n# History\r\n## 2026-01-15-1400\r\n", "# now\r\n# History\r\n## 2026-01-15-1430\r\n## 2026-01-15-1400\r\n"},
		{"history in a fence is not history", "# now\n```\n# History\n```\n", "# now\n```\n# History\n```\n\n# History\n\n## 2026-01-15-1430\n"},
	}
	if _, err := Stamp([]byte("# now\n```\nunclosed"), "2026-01-15-1430"); !errors.Is(err, ErrOpenFence) {
		t.Errorf("unclosed fence: %v, want ErrOpenFence", err)
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out, err := Stamp([]byte(tt.in), "2026-01-15-1430")
			if err != nil {
				t.Fatal(err)
			}
			if got := string(out); got != tt.want {
				t.Errorf("Stamp(%q)\n got  %q\n want %q", tt.in, got, tt.want)
			}
			if again, _ := Stamp(out, "2026-01-15-1430"); string(again) != string(out) {
				t.Errorf("second stamp changed the file: %q", again)
			}
		})
	}
}

func TestCompactHeuristic(t *testing.T) {
	src, _ := os.ReadFile(filepath.Join("testdata", "large", "memory.md"))
	out, ok := CompactHeuristic(src, 3)
	if !ok {
		t.Fatal("nothing dropped")
	}
	golden(t, "large.compact3.golden", out)
	// # now is kept verbatim.
	if !bytes.HasPrefix(out, src[:bytes.Index(src, []byte("# History"))]) {
		t.Error("# now was not kept verbatim")
	}
	if _, ok := CompactHeuristic(out, 3); ok {
		t.Error("a second pass dropped more than keep_history allows")
	}
	if _, ok := CompactHeuristic([]byte("# now\n## State\n"), 3); ok {
		t.Error("a file without # History was changed")
	}
}

func TestGuard(t *testing.T) {
	old, _ := os.ReadFile(filepath.Join("testdata", "large", "memory.md"))
	good, _ := CompactHeuristic(old, 3)
	tests := []struct {
		name   string
		out    string
		reason string
	}{
		{"good", string(good), ""},
		{"no # now", "## State\n# History\n", "output does not start with # now"},
		{"state not first", "# now\n## Patterns\n## State\n# History\n", "## State is not the first section under # now"},
		{"no history", "# now\n## State | x\n## AirPods Pro (JD.com)\n## Patterns\n## Errors\n", "output has no # History"},
		{"sections lost", "# now\n## State | x\n# History\n## 2026-01-15-1430 | routine check 0\n## 2026-01-15-1330 | routine check 1\n## 2026-01-15-1230 | routine check 2\n", "output drops 3 of 4 # now sections"},
		{"control chars", "# now\x1b[0m\n", "output contains control character"},
		{"grows", string(old) + "more", "output ("},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := Guard(old, []byte(tt.out), 3, 100<<10, 0.25)
			switch {
			case tt.reason == "" && err != nil:
				t.Errorf("rejected: %v", err)
			case tt.reason != "" && (err == nil || !bytes.Contains([]byte(err.Error()), []byte(tt.reason))):
				t.Errorf("got %v, want a rejection containing %q", err, tt.reason)
			}
		})
	}
}

func FuzzStampAndCompact(f *testing.F) {
	f.Add([]byte("# now\n## State\n# History\n## 2026-01-15-1400 | a\n## 2026-01-15-1300 | b\n"), 1)
	f.Add([]byte("```\n# History\n```\r\n# History\r\n"), 0)
	f.Fuzz(func(t *testing.T, src []byte, keep int) {
		keep = keep & 15
		orig := append([]byte{}, src...)
		once, err := Stamp(src, "2026-01-15-1430")
		if !bytes.Equal(src, orig) {
			t.Fatal("stamp modified its input")
		}
		if err == nil {
			if twice, _ := Stamp(once, "2026-01-15-1430"); !bytes.Equal(twice, once) {
				t.Fatal("stamp is not idempotent")
			}
			if len(once) < len(src) {
				t.Fatal("stamp removed bytes")
			}
		}
		if out, ok := CompactHeuristic(src, keep); ok && len(out) >= len(src) {
			t.Fatal("compaction did not shrink")
		}
		if _, err := snapshotOf(src); err != nil {
			t.Fatal(err)
		}
	})
}

func snapshotOf(src []byte) (string, error) {
	dir, err := os.MkdirTemp("", "fuzz-snapshot")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(dir)
	p := filepath.Join(dir, "memory.md")
	if err := os.WriteFile(p, src, 0o644); err != nil {
		return "", err
	}
	root, err := confine.Open(dir, confine.Options{})
	if err != nil {
		return "", err
	}
	defer root.Close()
	return Snapshot(root, "memory.md")
}
