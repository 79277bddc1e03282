package spool

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/memwatch/memwatch/session"
)

// BenchmarkCapture captures a fresh 8 MiB session log.
func BenchmarkCapture(b *testing.B) {
	dir := b.TempDir()
	var log strings.Builder
	for i := 0; log.Len() < 8<<20; i++ {
		fmt.Fprintf(&log, `{"role":"user","content":"%s %d"}`+"\n", strings.Repeat("lorem ipsum dolor sit amet ", 7), i)
	}
	os.WriteFile(filepath.Join(dir, "s.jsonl"), []byte(log.String()), 0o644)
	root := openRoot(b, dir)
	b.SetBytes(int64(log.Len()))
	for b.Loop() {
		s, err := Open(context.Background(), b.TempDir())
		if err != nil {
			b.Fatal(err)
		}
		if _, err := s.Capture(context.Background(), root, "s.jsonl", Options{IsMessage: session.IsMessage}); err != nil {
			b.Fatal(err)
		}
		s.Close()
	}
}
