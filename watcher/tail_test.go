package watcher

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/memwatch/memwatch/confine"
	"github.com/memwatch/memwatch/state"
)

func appendTo(t *testing.T, p, s string) {
	t.Helper()
	f, err := os.OpenFile(p, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteString(s); err != nil {
		t.Fatal(err)
	}
	f.Close()
}

func advance(t *testing.T, p string, cur Cursor) (Cursor, Reset, []string) {
	t.Helper()
	var lines []string
	cur, reset, err := advancePath(p, cur, func(l []byte, n int64) error {
		lines = append(lines, string(l))
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	// The count-only path must agree with the line-by-line one.
	return cur, reset, lines
}

func TestTailPartialLineCountedOnceAcrossRestart(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	db, err := state.Open(ctx, filepath.Join(dir, "state"))
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(dir, "messages.jsonl")
	appendTo(t, p, "{\"a\":1}\n{\"b\":")
	cs, _ := LoadCursors(ctx, db)
	cur, reset, lines := advance(t, p, cs.Get(p))
	if reset != Fresh || len(lines) != 1 || cur.Lines != 1 || cur.Offset != 8 {
		t.Fatalf("first read: cur=%+v reset=%q lines=%q", cur, reset, lines)
	}
	cs.Set(p, cur)
	if err := cs.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	db.Close()
	// "Restart": the partial line is completed while memwatch is down.
	appendTo(t, p, "2}\n")
	db, _ = state.Open(ctx, filepath.Join(dir, "state"))
	defer db.Close()
	cs, _ = LoadCursors(ctx, db)
	cur, reset, lines = advance(t, p, cs.Get(p))
	if reset != NoReset || len(lines) != 1 || lines[0] != `{"b":2}` || cur.Lines != 2 {
		t.Fatalf("after restart: cur=%+v reset=%q lines=%q", cur, reset, lines)
	}
	cur2, _, lines := advance(t, p, cur)
	if len(lines) != 0 || cur2 != cur {
		t.Errorf("a third read with nothing new returned %q, cursor %+v", lines, cur2)
	}
}

func TestTailTruncationAndReplacement(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "m.jsonl")
	appendTo(t, p, "one\ntwo\nthree\n")
	cur, _, _ := advance(t, p, Cursor{})
	// Truncated in place and rewritten shorter.
	if err := os.Truncate(p, 0); err != nil {
		t.Fatal(err)
	}
	appendTo(t, p, "x\n")
	cur, reset, lines := advance(t, p, cur)
	if reset != Truncated || len(lines) != 1 || cur.Lines != 1 {
		t.Errorf("after truncation: reset=%q lines=%q cur=%+v", reset, lines, cur)
	}
	// Replaced by a different file of exactly the same size.
	tmp := filepath.Join(dir, "tmp")
	if err := os.WriteFile(tmp, []byte("y\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, p); err != nil {
		t.Fatal(err)
	}
	cur, reset, lines = advance(t, p, cur)
	if reset != Replaced || len(lines) != 1 || lines[0] != "y" {
		t.Errorf("after replacement: reset=%q lines=%q", reset, lines)
	}
	// Same inode, same size, rewritten in place with other content.
	if err := os.WriteFile(p, []byte("z\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, reset, lines = advance(t, p, cur)
	if reset != Replaced || len(lines) != 1 || lines[0] != "z" {
		t.Errorf("after in-place rewrite: reset=%q lines=%q", reset, lines)
	}
}

func TestCursorFollowsRename(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	db, _ := state.Open(ctx, filepath.Join(dir, "state"))
	defer db.Close()
	cs, _ := LoadCursors(ctx, db)
	a, b := filepath.Join(dir, "a.jsonl"), filepath.Join(dir, "b.jsonl")
	appendTo(t, a, "1\n2\n")
	cur, _, _ := advance(t, a, cs.Get(a))
	cs.Set(a, cur)
	if err := os.Rename(a, b); err != nil {
		t.Fatal(err)
	}
	appendTo(t, b, "3\n")
	cur, reset, lines := advance(t, b, cs.Get(b))
	if reset != NoReset || len(lines) != 1 || cur.Lines != 3 {
		t.Errorf("renamed log: reset=%q lines=%q cur=%+v; want its old cursor kept", reset, lines, cur)
	}
}

func TestCountOnlyMatchesLines(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "big.jsonl")
	f, _ := os.Create(p)
	line := make([]byte, 999)
	for i := range line {
		line[i] = 'x'
	}
	line = append(line, '\n')
	for range 3000 { // ~3 MB: spans several read buffers
		f.Write(line)
	}
	f.WriteString("partial")
	f.Close()
	cur, _, err := advancePath(p, Cursor{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	cur2, _, lines := advance(t, p, Cursor{})
	if cur.Lines != 3000 || cur != cur2 || len(lines) != 3000 {
		t.Errorf("count-only %+v, line-by-line %+v (%d lines)", cur, cur2, len(lines))
	}
}

func FuzzAdvance(f *testing.F) {
	f.Add([]byte("a\nb\n"), []byte("c\nd"))
	f.Add([]byte{}, []byte("\n\n\xff\n"))
	f.Fuzz(func(t *testing.T, first, second []byte) {
		p := filepath.Join(t.TempDir(), "f")
		os.WriteFile(p, first, 0o644)
		cur, _, err := advancePath(p, Cursor{}, nil)
		if err != nil {
			t.Fatal(err)
		}
		appendTo(t, p, string(second))
		cur, _, err = advancePath(p, cur, nil)
		if err != nil {
			t.Fatal(err)
		}
		all := append(append([]byte{}, first...), second...)
		want := int64(0)
		last := -1
		for i, c := range all {
			if c == '\n' {
				want++
				last = i
			}
		}
		if cur.Lines != want || cur.Offset != int64(last+1) {
			t.Errorf("cursor %+v, want %d lines ending at %d", cur, want, last+1)
		}
	})
}

func BenchmarkAdvanceCount(b *testing.B) {
	p := filepath.Join(b.TempDir(), "m.jsonl")
	f, _ := os.Create(p)
	line := []byte(`{"role":"user","content":"` + string(make([]byte, 0)) + `hello there, how are you doing today?"}` + "\n")
	for range 200000 {
		f.Write(line)
	}
	f.Close()
	b.SetBytes(int64(len(line) * 200000))
	for b.Loop() {
		if _, _, err := advancePath(p, Cursor{}, nil); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkDecodeLine(b *testing.B) {
	line := []byte(`{"type":"assistant","message":{"role":"assistant","content":[{"type":"text","text":"Let me look at that file."},{"type":"tool_use","name":"Read","input":{"path":"x"}}]},"timestamp":"2026-02-27T14:30:00.000Z"}`)
	b.SetBytes(int64(len(line)))
	for b.Loop() {
		DecodeLine(line)
	}
}

// advancePath runs Advance on a file given by its path.
func advancePath(p string, cur Cursor, fn func([]byte, int64) error) (Cursor, Reset, error) {
	root, err := confine.Open(filepath.Dir(p), confine.Options{})
	if err != nil {
		return cur, NoReset, err
	}
	defer root.Close()
	return Advance(root, filepath.Base(p), cur, 0, fn)
}

// TestHugeLineIsCountedAndCut: a line far over the limit is counted and
// handed on cut, and the lines around it are whole.
func TestHugeLineIsCountedAndCut(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "log.jsonl")
	huge := strings.Repeat("x", 5<<20)
	os.WriteFile(p, []byte("{\"a\":1}\n"+huge+"\n{\"b\":2}\n"), 0o644)
	root, err := confine.Open(dir, confine.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer root.Close()
	var got []string
	cur, _, err := Advance(root, "log.jsonl", Cursor{}, 1024, func(l []byte, n int64) error {
		got = append(got, string(l))
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 3 || got[0] != `{"a":1}` || got[2] != `{"b":2}` {
		t.Fatalf("lines = %d, first %q, last %q", len(got), got[0], got[len(got)-1])
	}
	if want := huge[:1024] + fmt.Sprintf(CutMarker, len(huge)); got[1] != want {
		t.Errorf("cut line = %d bytes ending %q", len(got[1]), got[1][len(got[1])-40:])
	}
	if cur.Lines != 3 || cur.Offset != int64(8+len(huge)+1+8) {
		t.Errorf("cursor = %+v", cur)
	}
	count, _, err := Advance(root, "log.jsonl", Cursor{}, 1024, nil)
	if err != nil || count.Lines != 3 || count.Offset != cur.Offset {
		t.Errorf("count-only cursor = %+v, %v", count, err)
	}
}
