package recall

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cespare/xxhash/v2"

	"github.com/memwatch/memwatch/confine"
	"github.com/memwatch/memwatch/recall/analysis"
	"github.com/memwatch/memwatch/session"
)

// captured fills a LineMemo as a capture does: each whole line of text
// given at its offset, with its hash. It checks each answer against
// session.IsMessage.
func captured(t *testing.T, text string) *LineMemo {
	t.Helper()
	m := NewLineMemo()
	off := int64(0)
	for line := range strings.SplitAfterSeq(text, "\n") {
		if !strings.HasSuffix(line, "\n") {
			break // a partial last line: not captured
		}
		raw := []byte(strings.TrimSuffix(line, "\n"))
		if got, want := m.Message(off, raw, xxhash.Sum64(raw)), session.IsMessage(raw, false); got != want {
			t.Errorf("LineMemo.Message(%q) = %v, session.IsMessage says %v", raw, got, want)
		}
		off += int64(len(line))
	}
	return m
}

// settle waits until the change time of the file at path is old enough
// for an index to vouch for it (settledCtime): else whether an index holds
// it depends on how soon after the write it was built.
func settle(t *testing.T, path string) {
	t.Helper()
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	c := confine.ChangeTime(fi.Sys().(*syscall.Stat_t))
	wait := 100 * time.Millisecond
	if c%1e9 == 0 {
		wait = 3 * time.Second // whole seconds: a coarse file system
	}
	time.Sleep(time.Until(time.Unix(0, c).Add(wait)))
}

// indexDir indexes dir's messages.jsonl into a new directory (a fresh
// analyzer each, as two daemons would) and returns its files' contents.
func indexDir(t *testing.T, dir string, lines *LineMemo) map[string]string {
	t.Helper()
	idx := t.TempDir()
	if _, err := IndexFile(idx, openRoot(t, dir), "messages.jsonl", Log, IndexOptions{BlockSize: 4096, SegPostings: 2000, Lines: lines}); err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	ents, _ := os.ReadDir(idx)
	for _, e := range ents {
		b, _ := os.ReadFile(filepath.Join(idx, e.Name()))
		out[e.Name()] = string(b)
	}
	if len(out) < 2 {
		t.Fatalf("index of %s: %d files, want a trigram index and term segments", dir, len(out))
	}
	return out
}

func sameIndex(t *testing.T, what string, got, want map[string]string) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d index files, want %d", what, len(got), len(want))
	}
	for name, w := range want {
		if g, ok := got[name]; !ok || !bytes.Equal([]byte(g), []byte(w)) {
			t.Errorf("%s: index file %s differs from the one indexed from the file alone", what, name)
		}
	}
}

// TestIndexFromCapturedLines: an index built from a capture's decode of
// the lines (IndexOptions.Lines) is the index built from the file alone,
// byte for byte; and a decode of other bytes at the same offsets (the
// log rewritten in place between the capture and the index, its lines as
// long as before) is not used.
func TestIndexFromCapturedLines(t *testing.T) {
	dir := corpus(t, t.TempDir(), 1, 3000)[0]
	path := filepath.Join(dir, "messages.jsonl")
	b, _ := os.ReadFile(path)
	text := string(b) + `{"role":"user","content":"a partial last line`
	os.WriteFile(path, []byte(text), 0o644)
	settle(t, path)
	alone := indexDir(t, dir, nil)
	sameIndex(t, "from the capture's lines", indexDir(t, dir, captured(t, text)), alone)

	// The words change, not the lengths: only the hashes tell.
	other := strings.NewReplacer("deploy", "yolped", "token", "nekot", "zebrafinch", "quokkaflux").Replace(text)
	if len(other) != len(text) || other == text {
		t.Fatal("the rewrite must keep every line's length")
	}
	memo := captured(t, text)
	os.WriteFile(path, []byte(other), 0o644)
	settle(t, path)
	sameIndex(t, "from a capture of the bytes before a rewrite", indexDir(t, dir, memo), indexDir(t, dir, nil))
}

// FuzzLineMemoMessage: what a capture is told of a whole line through a
// LineMemo is what session.IsMessage says of it.
func FuzzLineMemoMessage(f *testing.F) {
	for _, s := range []string{`{"role":"user","content":"hi"}`, `{"type":"summary","summary":"s"}`, "not json\r", `{"role":"assistant","content":[{"type":"tool_use","name":"Bash","input":{}}]}` + "\r",
		`{"type":"user","message":{"role":"user","content":"<command-name>/x</command-name>"}}`, `{"type":"user","message":{"role":"user","content":[{"type":"tool_result","content":"x"}]}}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, line []byte) {
		if bytes.IndexByte(line, '\n') >= 0 {
			return // a line has none
		}
		m := NewLineMemo()
		if got, want := m.Message(0, line, xxhash.Sum64(line)), session.IsMessage(line, false); got != want {
			t.Errorf("LineMemo.Message(%q) = %v, session.IsMessage says %v", line, got, want)
		}
	})
}

// TestReusedSegmentBuilder: a builder reset after a bigger segment
// (segBuilders keeps them) encodes what a new one does, byte for byte:
// none of the bigger one's postings, terms or bytes stay in it. Indexing a
// file after a bigger one gives the index it had before.
func TestReusedSegmentBuilder(t *testing.T) {
	small := []string{"the deploy failed on the auth token", "rolled back the schema migration", "Überprüfung café"}
	var big []string
	for i := range 500 {
		big = append(big, fmt.Sprintf("line %d of a longer session: retried handler tests %d times, zebrafinch%d", i, i%7, i))
	}
	when := time.Date(2026, 11, 30, 10, 0, 0, 0, time.UTC)
	// Each build with an analyzer of its own: its ids start afresh, so
	// any id the builder kept from the one before is another term.
	build := func(b *segBuilder, docs []string) []byte {
		a := analysis.New()
		for i, d := range docs {
			b.add(a, []byte(d), int64(100*i), int64(i+1), when)
		}
		b.endOff, b.nextLine = int64(100*len(docs)), int64(len(docs)+1)
		return bytes.Clone(b.encode(fileID{dev: 1, ino: 2}))
	}
	want := build(newSegBuilder(0, 0, nil), small)
	b := newSegBuilder(0, 0, nil)
	build(b, big)
	b.reset(0, 0)
	if got := build(b, small); !bytes.Equal(got, want) {
		t.Fatalf("a reused builder's segment (%d bytes) differs from a new one's (%d bytes)", len(got), len(want))
	}

	smallDir := corpus(t, t.TempDir(), 1, 300)[0]
	bigDir := corpus(t, t.TempDir(), 1, 3000)[0]
	settle(t, filepath.Join(smallDir, "messages.jsonl"))
	settle(t, filepath.Join(bigDir, "messages.jsonl"))
	before := indexDir(t, smallDir, nil)
	indexDir(t, bigDir, nil)
	sameIndex(t, "after a bigger file's", indexDir(t, smallDir, nil), before)
}

// TestIndexedInStepsAsAtOnce: the two indexes of a log start where each
// left off, the trigram index at its last partial block and the term
// segments at the last segment's end (the memo of the lines carried from
// one pass to the other, by offset). Indexed as it grew, cut mid-line each
// time, the log's trigram blocks are those of an index built at once, byte
// for byte, its term segments cover it whole, and both find the same
// lines.
func TestIndexedInStepsAsAtOnce(t *testing.T) {
	whole := corpus(t, t.TempDir(), 1, 3000)[0]
	text, err := os.ReadFile(filepath.Join(whole, "messages.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	grown := t.TempDir()
	path := filepath.Join(grown, "messages.jsonl")
	steps, idxDir := t.TempDir(), t.TempDir()
	root := openRoot(t, grown)
	o := IndexOptions{BlockSize: 4096, SegPostings: 2000}
	// Appended as an agent writes, a piece at a time (cut mid-line).
	log, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer log.Close()
	written := 0
	for _, n := range []int{len(text) / 5, len(text)/5 + 1, len(text) / 2, len(text) - 7, len(text)} {
		if _, err := log.Write(text[written:n]); err != nil {
			t.Fatal(err)
		}
		written = n
		if n == len(text) {
			settle(t, path)
		}
		if _, err := IndexFile(steps, root, "messages.jsonl", Log, o); err != nil {
			t.Fatal(err)
		}
	}
	settle(t, filepath.Join(whole, "messages.jsonl"))
	wholeRoot := openRoot(t, whole)
	if _, err := IndexFile(idxDir, wholeRoot, "messages.jsonl", Log, o); err != nil {
		t.Fatal(err)
	}
	got, err1 := os.ReadFile(indexPath(steps, root.Path(), "messages.jsonl"))
	want, err2 := os.ReadFile(indexPath(idxDir, wholeRoot.Path(), "messages.jsonl"))
	if err1 != nil || err2 != nil {
		t.Fatal(err1, err2)
	}
	// The headers name other files (device, inode): the blocks are compared.
	if !bytes.Equal(got[headerSize:], want[headerSize:]) {
		t.Errorf("the trigram blocks of the log indexed in steps (%d bytes) differ from those indexed at once (%d bytes)", len(got), len(want))
	}
	paths := NewSegmentListing().files(steps, termPrefix(steps, root.Path(), "messages.jsonl"))
	fh, fi := openStat(t, path)
	if chain := termChain(paths, fh, fi); len(chain) == 0 || chain[len(chain)-1].hdr.endOff != int64(len(text)) {
		t.Errorf("the term segments of the log indexed in steps: %d in the chain, want them to cover its %d bytes", len(chain), len(text))
	}
	for _, word := range []string{"deploy", "migration", "Überprüfung", "rolled back"} {
		lines := func(r *confine.Root, idx string) []int64 {
			q, _ := ParseQuery(word)
			rs, _, err := Search(context.Background(), q, Options{Roots: []Root{{Root: r, Sources: sessionSources}}, Limit: 10000, Index: idx})
			if err != nil {
				t.Fatal(err)
			}
			var out []int64
			for _, r := range rs {
				if r.Source == "messages" { // the corpus has notes beside it
					out = append(out, r.LineNumber)
				}
			}
			slices.Sort(out)
			return out
		}
		if a, b := lines(root, steps), lines(wholeRoot, idxDir); len(a) == 0 || !slices.Equal(a, b) {
			t.Errorf("%q: found on %d lines indexed in steps, %d at once, or other lines", word, len(a), len(b))
		}
	}
}

func openStat(t *testing.T, path string) (*os.File, os.FileInfo) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	fi, err := f.Stat()
	if err != nil {
		t.Fatal(err)
	}
	return f, fi
}
