package recall

import (
	"encoding/json"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/memwatch/memwatch/recall/analysis"
)

// homeSession writes a Claude Code session of about size bytes shaped as
// a home's are: prompts, replies, and Read results that are real source
// files (Go's own), numbered as Claude Code numbers them.
func homeSession(tb testing.TB, path string, size int) {
	tb.Helper()
	goroot, err := exec.Command("go", "env", "GOROOT").Output()
	if err != nil {
		tb.Skip("no Go source to read:", err)
	}
	var files []string
	filepath.WalkDir(filepath.Join(strings.TrimSpace(string(goroot)), "src", "net", "http"), func(p string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() && strings.HasSuffix(p, ".go") {
			files = append(files, p)
		}
		return nil
	})
	if len(files) == 0 {
		tb.Skip("no Go source to read")
	}
	var out strings.Builder
	line := func(v any) {
		b, _ := json.Marshal(v)
		out.Write(b)
		out.WriteByte('\n')
	}
	for i := 0; out.Len() < size; i++ {
		src, _ := os.ReadFile(files[i%len(files)])
		var numbered strings.Builder
		for n, l := range strings.Split(string(src), "\n") {
			fmt.Fprintf(&numbered, "%6d→%s\n", n+1, l)
		}
		line(map[string]any{"type": "user", "uuid": fmt.Sprint("u", i), "timestamp": "2026-11-02T10:00:00Z",
			"message": map[string]any{"role": "user", "content": fmt.Sprintf("why does the handler in %s retry the request %d times?", filepath.Base(files[i%len(files)]), i)}})
		line(map[string]any{"type": "assistant", "uuid": fmt.Sprint("a", i), "timestamp": "2026-11-02T10:00:01Z",
			"message": map[string]any{"role": "assistant", "content": []any{map[string]any{"type": "tool_use", "id": fmt.Sprint("t", i), "name": "Read", "input": map[string]any{"file_path": files[i%len(files)]}}}}})
		line(map[string]any{"type": "user", "uuid": fmt.Sprint("r", i), "timestamp": "2026-11-02T10:00:02Z",
			"message": map[string]any{"role": "user", "content": []any{map[string]any{"type": "tool_result", "tool_use_id": fmt.Sprint("t", i), "content": numbered.String()}}}})
	}
	if err := os.WriteFile(path, []byte(out.String()), 0o644); err != nil {
		tb.Fatal(err)
	}
}

// BenchmarkIndexSession: a home's session indexed from nothing (trigram
// blocks and term segments), with one analyzer as the daemon keeps.
func BenchmarkIndexSession(b *testing.B) {
	dir := b.TempDir()
	homeSession(b, filepath.Join(dir, "s.jsonl"), 8<<20)
	root := openRoot(b, dir)
	fi, _ := os.Stat(filepath.Join(dir, "s.jsonl"))
	a := analysis.New()
	b.SetBytes(fi.Size())
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		idx := filepath.Join(b.TempDir(), "index")
		if _, err := IndexFile(idx, root, "s.jsonl", Log, IndexOptions{Analyzer: a}); err != nil {
			b.Fatal(err)
		}
	}
}
