package filesum

import (
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"
	"testing"
	"time"
)

func sumOf(b []byte) string { h := sha256.Sum256(b); return hex.EncodeToString(h[:]) }

// TestChain: the states memwatch records of its own appends are handed
// out while the file is as it left it; a write by anyone else (an append,
// a rewrite in place of the same size, a rename over it) makes the file
// unknown, and Sum hashes it whole again.
func TestChain(t *testing.T) {
	p := filepath.Join(t.TempDir(), "HISTORY.md")
	os.WriteFile(p, []byte("# History\n"), 0o644)
	r := New()
	f, _ := os.Open(p)
	defer f.Close()
	first, err := r.Sum(f)
	if err != nil || first.Sum != sumOf([]byte("# History\n")) {
		t.Fatalf("Sum = %+v, %v", first, err)
	}
	// memwatch appends, and records what it wrote.
	w, _ := os.OpenFile(p, os.O_WRONLY|os.O_APPEND, 0)
	fi, _ := w.Stat()
	done := r.Writing(fi)
	w.WriteString("## one\n")
	after := Extend(first, []byte("## one\n"))
	fi, _ = w.Stat()
	r.Record(fi, first, after)
	done()
	w.Close()
	fi, _ = os.Stat(p)
	if got, ok := r.Known(fi); !ok || got.Sum != sumOf([]byte("# History\n## one\n")) {
		t.Fatalf("Known after an append = %+v, %v", got, ok)
	}
	if _, ok := r.Prefix(fi, first.Size, first.Sum); !ok {
		t.Error("the state before the append is not a known prefix")
	}
	for _, change := range []struct {
		name  string
		write func()
	}{
		{"an agent's append", func() {
			w, _ := os.OpenFile(p, os.O_WRONLY|os.O_APPEND, 0)
			w.WriteString("x\n")
			w.Close()
		}},
		{"a rewrite in place to the same size", func() {
			b, _ := os.ReadFile(p)
			b[0] = '%'
			time.Sleep(20 * time.Millisecond) // a later mtime on coarse clocks too
			os.WriteFile(p, b, 0o644)
		}},
		{"a rename over it", func() {
			os.WriteFile(p+".tmp", []byte("other\n"), 0o644)
			os.Rename(p+".tmp", p)
		}},
	} {
		g, _ := os.Open(p)
		before, _ := r.Sum(g) // known again: hashed, or as recorded
		change.write()
		fi, _ := g.Stat()
		if cur, _ := os.Stat(p); os.SameFile(fi, cur) {
			if _, ok := r.Known(cur); ok {
				t.Errorf("%s: the file is still known", change.name)
			}
			if _, ok := r.Prefix(cur, before.Size, before.Sum); ok && change.name != "an agent's append" {
				t.Errorf("%s: the state before is still a known prefix", change.name)
			}
		}
		g.Close()
		g, _ = os.Open(p)
		b, _ := os.ReadFile(p)
		if st, err := r.Sum(g); err != nil || st.Sum != sumOf(b) || st.Size != int64(len(b)) {
			t.Errorf("%s: Sum = %+v, %v; want the file's own", change.name, st, err)
		}
		g.Close()
	}
}

// TestWritingWaits: a lookup while memwatch appends waits for the record.
func TestWritingWaits(t *testing.T) {
	p := filepath.Join(t.TempDir(), "h.md")
	os.WriteFile(p, []byte("a\n"), 0o644)
	r := New()
	f, _ := os.Open(p)
	defer f.Close()
	st, _ := r.Sum(f)
	fi, _ := f.Stat()
	done := r.Writing(fi)
	go func() {
		time.Sleep(50 * time.Millisecond)
		w, _ := os.OpenFile(p, os.O_WRONLY|os.O_APPEND, 0)
		w.WriteString("b\n")
		fi, _ := w.Stat()
		w.Close()
		r.Record(fi, st, Extend(st, []byte("b\n")))
		done()
	}()
	time.Sleep(10 * time.Millisecond)
	w0 := time.Now()
	for {
		cur, _ := os.Stat(p)
		if cur.Size() == 4 {
			if got, ok := r.Known(cur); !ok || got.Sum != sumOf([]byte("a\nb\n")) {
				t.Errorf("Known = %+v, %v after waiting %v", got, ok, time.Since(w0))
			}
			return
		}
		time.Sleep(time.Millisecond)
	}
}
