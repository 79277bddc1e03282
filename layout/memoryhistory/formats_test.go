package memoryhistory

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/memwatch/memwatch/confine"
)

func TestHistoryFormatAuto(t *testing.T) {
	dir := t.TempDir()
	os.MkdirAll(filepath.Join(dir, "memory"), 0o755)
	root, err := confine.Open(dir, confine.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer root.Close()
	f := files{dir: "memory"}
	if got := f.format(root, FormatAuto); got != FormatMarkdown {
		t.Errorf("auto without history.jsonl: got %s, want markdown (HISTORY.md, older nanobot)", got)
	}
	os.WriteFile(filepath.Join(dir, "memory", HistoryJSONL), nil, 0o644)
	if got := f.format(root, FormatAuto); got != FormatJSONL {
		t.Errorf("auto with history.jsonl: got %s, want jsonl", got)
	}
	if got := f.format(root, FormatDaily); got != FormatDaily {
		t.Errorf("daily: got %s", got)
	}
}

func TestAppendJSONL(t *testing.T) {
	when := time.Date(2026, 2, 1, 10, 5, 0, 0, time.Local)
	for _, tt := range []struct {
		name, old  string
		wantCursor string
	}{
		{"empty", "", `"cursor":1,`},
		{"after records", "{\"cursor\": 7, \"timestamp\": \"2026-01-01 00:00\", \"content\": \"a\"}\n{\"cursor\": 3}\n", `"cursor":8,`},
		{"garbage and a cut last line", "not json\n{\"cursor\": 2}\n{\"cursor\": 9, \"content\": \"cut", `"cursor":3,`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			out, err := appendJSONL([]byte(tt.old), when, " entry text \n", "telegram:42", "memwatch: a.jsonl#L1-2 range:x ")
			if err != nil {
				t.Fatal(err)
			}
			if !strings.HasPrefix(string(out), tt.old) {
				t.Errorf("the old records changed: got %q", out)
			}
			last := strings.TrimSpace(string(out[len(tt.old):]))
			if !strings.Contains(last, tt.wantCursor) || !strings.Contains(last, `"timestamp":"2026-02-01 10:05"`) || !strings.Contains(last, `"content":"entry text"`) {
				t.Errorf("got %s, want %s, nanobot's timestamp and the text", last, tt.wantCursor)
			}
		})
	}
}

// FuzzLastCursor: history.jsonl is the agent's file; any bytes give a
// cursor and never a panic, and the record appended after them parses.
func FuzzLastCursor(f *testing.F) {
	f.Add([]byte("{\"cursor\": 1, \"timestamp\": \"2026-01-01 00:00\", \"content\": \"x\"}\n"))
	f.Add([]byte("{\"cursor\": 1e400}\n{\"cursor\": -5}\n{\"cursor\": \"7\"}\n\xff\xfe"))
	f.Fuzz(func(t *testing.T, data []byte) {
		n := LastCursor(data)
		if n < 0 {
			t.Fatalf("negative cursor %d", n)
		}
		out, err := appendJSONL(data, time.Unix(0, 0), "text", "", "m")
		if err != nil {
			t.Fatal(err)
		}
		if got := LastCursor(out); got != n+1 {
			t.Fatalf("after appending: cursor %d, want %d", got, n+1)
		}
	})
}

// appendJSONL appends one record after old's last cursor.
func appendJSONL(old []byte, when time.Time, text, key, marker string) ([]byte, error) {
	tail, err := jsonlEntry(old, when, text, key, marker)
	return append(append([]byte{}, old...), tail...), err
}
