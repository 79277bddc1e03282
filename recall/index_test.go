package recall

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"unicode"

	"github.com/memwatch/memwatch/confine"
	"github.com/memwatch/memwatch/recall/query"
)

// TestSparseHas checks the interpolation search against a set, on sorted
// positions of every density a sparse block has, and that unsorted bytes
// (a corrupt index) end it without a panic.
func TestSparseHas(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	for _, n := range []int{0, 1, 2, 3, 10, 100, 1000, sparseMax} {
		for range 20 {
			set := map[uint16]bool{}
			for len(set) < n {
				set[uint16(r.IntN(bloomBits))] = true
			}
			var ps []uint16
			for p := range set {
				ps = append(ps, p)
			}
			slices.Sort(ps)
			s := make([]byte, 2*len(ps))
			for i, p := range ps {
				binary.LittleEndian.PutUint16(s[2*i:], p)
			}
			probes := append([]uint16{0, bloomBits - 1}, ps...)
			for range 200 {
				probes = append(probes, uint16(r.IntN(bloomBits)))
			}
			for _, p := range probes {
				if got, want := sparseHas(s, p), set[p]; got != want {
					t.Fatalf("n=%d: sparseHas(%d) = %v, want %v", n, p, got, want)
				}
			}
			r.Shuffle(len(ps), func(i, j int) { ps[i], ps[j] = ps[j], ps[i] })
			for i, p := range ps {
				binary.LittleEndian.PutUint16(s[2*i:], p)
			}
			for _, p := range probes {
				sparseHas(s, p)
			}
		}
	}
}

// TestIndexTrustsOnlyAnUnchangedFile: a note whose change time is the one
// it was indexed at is answered from its index without being read; one
// rewritten in place since (same size, same last bytes) is read, never
// answered from its stale index.
func TestIndexTrustsOnlyAnUnchangedFile(t *testing.T) {
	root, idxDir := settledNote(t)
	note := filepath.Join(root.Path(), "working-memory", "detail", "n.md")
	build := func() {
		t.Helper()
		if _, err := IndexFile(idxDir, root, "working-memory/detail/n.md", Text, IndexOptions{BlockSize: 1024}); err != nil {
			t.Fatal(err)
		}
	}
	search := searchWith(t, root, idxDir)
	build()
	if rs, st := search("zebrafinch"); len(rs) != 0 || st.Indexed != 1 || st.BytesRead != 0 {
		t.Errorf("an unchanged note: %d results, %d indexed, %d bytes read; want 0, 1, 0", len(rs), st.Indexed, st.BytesRead)
	}
	if rs, _ := search("0123"); len(rs) != 1 {
		t.Errorf("a word the note holds: %d results, want 1", len(rs))
	}
	// Rewritten in place: the same size, the same last 256 bytes.
	f, err := os.OpenFile(note, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt([]byte("zebrafinch"), 5); err != nil {
		t.Fatal(err)
	}
	f.Close()
	if rs, _ := search("zebrafinch"); len(rs) != 1 {
		t.Errorf("after a rewrite in place: %d results, want 1", len(rs))
	}
	build()
	if rs, st := search("zebrafinch"); len(rs) != 1 || st.Indexed != 1 {
		t.Errorf("reindexed: %d results, %d indexed; want 1, 1", len(rs), st.Indexed)
	}
}

// TestFirstIndexCutShort: a file's first index is written in place, its
// header last. Killed before the header (the file empty, its header
// zeros, its blocks cut anywhere), it answers for nothing: a search reads
// the file and finds what it holds, and the next indexing makes it whole.
func TestFirstIndexCutShort(t *testing.T) {
	root, idxDir := settledNote(t)
	dir := root.Path()
	rel := "working-memory/detail/n.md"
	path := indexPath(idxDir, root.Path(), rel)
	search := searchWith(t, root, idxDir)
	if _, err := IndexFile(idxDir, root, rel, Text, IndexOptions{BlockSize: 1024}); err != nil {
		t.Fatal(err)
	}
	whole, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range []int{0, headerSize, headerSize + 1, len(whole) / 2, len(whole)} {
		cut := append(make([]byte, headerSize), whole[headerSize:]...)[:n]
		if err := os.WriteFile(path, cut, 0o600); err != nil {
			t.Fatal(err)
		}
		if rs, st := search("0123"); len(rs) != 1 || st.Indexed != 0 {
			t.Errorf("index cut at %d of %d before its header: %d results, %d files answered by the index; want 1, 0", n, len(whole), len(rs), st.Indexed)
		}
		if _, err := IndexFile(idxDir, root, rel, Text, IndexOptions{BlockSize: 1024}); err != nil {
			t.Fatal(err)
		}
		if rs, st := search("zebrafinch"); len(rs) != 0 || st.Indexed != 1 || st.BytesRead != 0 {
			t.Errorf("indexed again after a cut at %d: %d results, %d indexed, %d bytes read; want 0, 1, 0", n, len(rs), st.Indexed, st.BytesRead)
		}
	}
	// A file of one line not ended yet: its first index is an empty one,
	// header and all.
	partial := "working-memory/detail/partial.md"
	if err := os.WriteFile(filepath.Join(dir, partial), []byte("no newline yet"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := IndexFile(idxDir, root, partial, Text, IndexOptions{}); err != nil {
		t.Fatal(err)
	}
	if idx, err := readIndex(indexPath(idxDir, root.Path(), partial), true, true, nil, nil); err != nil || idx.end != 0 {
		t.Errorf("the first index of a file without a whole line: %+v, %v; want an empty index", idx, err)
	}
}

// settledNote writes writeNote's note in a new directory, waits until
// its change time is old enough to vouch for its content, and returns its
// root and an index directory beside it.
func settledNote(t *testing.T) (*confine.Root, string) {
	t.Helper()
	dir := t.TempDir()
	waitSettled(t, writeNote(t, dir))
	return openRoot(t, dir), filepath.Join(dir, "idx")
}

// searchWith returns a search of root's sessions for a word, through the
// index in idxDir.
func searchWith(t *testing.T, root *confine.Root, idxDir string) func(word string) ([]Result, Stats) {
	return func(word string) ([]Result, Stats) {
		t.Helper()
		q, _ := ParseQuery(word)
		rs, st, err := Search(context.Background(), q, Options{Roots: []Root{{Root: root, Sources: sessionSources}}, Limit: 10, Index: idxDir})
		if err != nil {
			t.Fatal(err)
		}
		return rs, st
	}
}

// writeNote writes a note of 400 numbered lines at
// working-memory/detail/n.md in dir and returns its path.
func writeNote(t *testing.T, dir string) string {
	t.Helper()
	note := filepath.Join(dir, "working-memory", "detail", "n.md")
	os.MkdirAll(filepath.Dir(note), 0o755)
	var b strings.Builder
	for i := range 400 {
		fmt.Fprintf(&b, "line %04d of the notes about the deploy\n", i)
	}
	if err := os.WriteFile(note, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	return note
}

// TestCaseless: the runes caseless says have no case have none.
func TestCaseless(t *testing.T) {
	for r := rune(0); r <= unicode.MaxRune; r++ {
		if caseless(r) && (unicode.ToLower(r) != r || unicode.ToUpper(r) != r) {
			t.Errorf("caseless(%U) but it has a case", r)
		}
	}
	if !caseless('→') {
		t.Error("caseless('→') = false")
	}
}

// TestBuilderSetsEveryGram: a block's filter holds the bit of each
// trigram of its text lowercased, as a query computes them (query.Gram),
// whatever the text's case and bytes.
func TestBuilderSetsEveryGram(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	alphabet := []string{"a", "Z", "q", "0", " ", "\n", "é", "É", "日", "\xff", "→", "Σ", "_", "\"", "Ⓐ", "⌘", "\u2400", "\ufffd", "\xe2\x86"}
	for n := range 500 {
		var sb strings.Builder
		for range n % 40 {
			sb.WriteString(alphabet[rng.IntN(len(alphabet))])
		}
		text := []byte(sb.String())
		b := newBuilder()
		b.add(text)
		want := new([bloomWords]uint64)
		lower := bytes.ToLower(text)
		for i := 0; i+3 <= len(lower); i++ {
			g := make([]byte, 3)
			for k := range g {
				g[k] = lower[i+k]
				if g[k] >= 'A' && g[k] <= 'Z' {
					g[k] += 32
				}
			}
			p := bitOf(query.Gram(g[0], g[1], g[2]))
			want[p/64] |= 1 << (p % 64)
		}
		if *b.bloom != *want {
			t.Fatalf("the filter of %q differs from its trigrams'", text)
		}
	}
}

// FuzzViewLine: viewLine reads what readLine reads (the line cut at max,
// the bytes it spans, a partial last line, the end), whatever the
// reader's buffer and the lines' lengths.
func FuzzViewLine(f *testing.F) {
	f.Add([]byte("one\ntwo\n\nthree, longer than the buffer\npartial"), 16, 8)
	f.Add([]byte("\n\n\n"), 20, 0)
	f.Add([]byte("exactly16bytes!\nx"), 16, 100)
	f.Fuzz(func(t *testing.T, data []byte, size, max int) {
		size, max = 16+size%64, max%40
		a := bufio.NewReaderSize(bytes.NewReader(data), size)
		b := bufio.NewReaderSize(bytes.NewReader(data), size)
		for {
			want, wn, werr := readLine(a, max)
			want = bytes.Clone(want)
			got, gn, gerr := viewLine(b, max)
			if !bytes.Equal(got, want) || gn != wn || (gerr == nil) != (werr == nil) || gerr != nil && !errors.Is(gerr, werr) {
				t.Fatalf("viewLine = %q, %d, %v; readLine = %q, %d, %v", got, gn, gerr, want, wn, werr)
			}
			if werr != nil {
				return
			}
		}
	})
}
