package recall

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestParallelScanAnswersLikeOneReader searches logs of many shapes (lines
// of a few bytes to longer than a scan chunk, crossing the chunks' edges;
// with and without a last newline) with one reader and with several: the
// results, their order and line numbers are the same, and they are the
// lines that hold the word, newest first.
func TestParallelScanAnswersLikeOneReader(t *testing.T) {
	shapes := []struct {
		name  string
		lines func(r *rand.Rand, i int) int // length of line i
	}{
		{"short lines", func(r *rand.Rand, i int) int { return 55 + r.IntN(300) }},
		// 256 bytes with the newline: every chunk's edge is a line start.
		{"lines ending at the chunks' edges", func(r *rand.Rand, i int) int { return 255 }},
		{"mixed lengths", func(r *rand.Rand, i int) int {
			if r.IntN(50) == 0 {
				return 20_000 + r.IntN(100_000)
			}
			return 55 + r.IntN(2000)
		}},
		{"lines longer than a chunk", func(r *rand.Rand, i int) int {
			if i%40 == 7 {
				return scanChunk + 100_000 + r.IntN(scanChunk)
			}
			return 55 + r.IntN(500)
		}},
	}
	for _, shape := range shapes {
		for _, lastNewline := range []bool{true, false} {
			t.Run(fmt.Sprintf("%s, last newline %v", shape.name, lastNewline), func(t *testing.T) {
				dir := t.TempDir()
				r := rand.New(rand.NewPCG(1, uint64(len(shape.name))))
				var b strings.Builder
				var want []int64 // lines holding the word, in file order
				lines := 0
				for i := 0; b.Len() < 3*4*scanChunk; i++ {
					// A line of n bytes: {"role":"user","content":"..."}.
					n := shape.lines(r, i)
					// Each line's own (identical lines would be folded),
					// the word at its start.
					id := fmt.Sprintf(" %d ", i)
					text := "xxxxxxxx" + id + strings.Repeat("x", n-29-8-len(id))
					if r.IntN(9) == 0 {
						text = text[:len(text)-8] + " Quokka "
						want = append(want, int64(i+1))
					}
					lines++
					if i > 0 {
						b.WriteByte('\n')
					}
					fmt.Fprintf(&b, `{"role":"user","content":"%s"}`, text)
				}
				if lastNewline {
					b.WriteByte('\n')
				}
				if err := os.WriteFile(filepath.Join(dir, "messages.jsonl"), []byte(b.String()), 0o644); err != nil {
					t.Fatal(err)
				}
				root := openRoot(t, dir)
				search := func(query string, limit, workers int) []Result {
					t.Helper()
					q, err := ParseQuery(query)
					if err != nil {
						t.Fatal(err)
					}
					rs, _, err := Search(context.Background(), q, Options{
						Roots:   []Root{{Root: root, Sources: []Source{{Glob: "messages.jsonl", Kind: Log, Label: "messages"}}}},
						Limit:   limit,
						Workers: workers,
					})
					if err != nil {
						t.Fatal(err)
					}
					return rs
				}
				// A word on every line: each line found once, in order.
				for _, workers := range []int{1, 3} {
					rs := search("xxxxxxxx", 1<<30, workers)
					if len(rs) != lines {
						t.Fatalf("%d workers: every line holds the word: got %d results, want %d", workers, len(rs), lines)
					}
					for i, res := range rs {
						if want := int64(lines - i); res.LineNumber != want {
							t.Fatalf("%d workers: result %d at line %d, want %d", workers, i, res.LineNumber, want)
						}
					}
				}
				for _, limit := range []int{1, 7, 1000} {
					var first []Result
					for _, workers := range []int{1, 2, 3} {
						rs := search("quokka", limit, workers)
						if workers == 1 {
							first = rs
							// Newest first: the last lines holding the word.
							if got, wantN := len(rs), min(limit, len(want)); got != wantN {
								t.Fatalf("limit %d: got %d results, want %d", limit, got, wantN)
							}
							for i, res := range rs {
								if w := want[len(want)-1-i]; res.LineNumber != w {
									t.Fatalf("limit %d: result %d at line %d, want %d", limit, i, res.LineNumber, w)
								}
							}
							continue
						}
						if i, differ := firstDiff(first, rs); differ {
							t.Fatalf("limit %d, %d workers: result %d is %s, one reader found %s", limit, workers, i, at(rs, i), at(first, i))
						}
					}
				}
			})
		}
	}
}
