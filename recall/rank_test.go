package recall

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// TestRankedIndexMatchesScan: a log indexed as it grows (segments
// written per pass and merged) is ranked through its term segments
// exactly as a search without the index ranks it: the same results,
// scores and order; a rewrite starts the segments anew.
func TestRankedIndexMatchesScan(t *testing.T) {
	dir, idx := t.TempDir(), t.TempDir()
	root := openRoot(t, dir)
	srcs := []Source{{Glob: "*.jsonl", Kind: Log, Label: "messages"}, {Glob: "*.md", Kind: Text, Label: "notes"}}
	rng := rand.New(rand.NewPCG(1, 2))
	words := strings.Fields("deploy staging cluster migration database token refresh rotation budget review the agent decided to wait for tests flaky retry rollback")
	p := filepath.Join(dir, "s.jsonl")
	write := func(from, n int) {
		f, _ := os.OpenFile(p, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
		defer f.Close()
		for i := from; i < from+n; i++ {
			var b []string
			for range 3 + rng.IntN(12) {
				b = append(b, words[rng.IntN(len(words))])
			}
			if i%97 == 0 {
				b = append(b, "zanzibar-quokka")
			}
			if i%50 == 7 {
				fmt.Fprintf(f, `{"_type":"metadata","n":%d}`+"\n", i)
			}
			fmt.Fprintf(f, `{"role":%q,"content":"message %d: %s"}`+"\n", []string{"user", "assistant"}[i%2], i, strings.Join(b, " "))
		}
	}
	os.WriteFile(filepath.Join(dir, "notes.md"), []byte("# Notes\n\nthe zanzibar-quokka deploy waits for the database migration\n\nrollback plan: retry twice\n"), 0o644)
	questions := []string{"what did the agent decide about the zanzibar-quokka deploy?", "database migration rollback", "why was the token rotation flaky", "review budget"}
	compare := func(stage string, wantIndexed bool) {
		t.Helper()
		for _, qs := range questions {
			q, _ := ParseQuery(qs)
			scan, _, err := Search(context.Background(), q, Options{Roots: []Root{{Root: root, Sources: srcs}}, Limit: 10, Explain: true})
			if err != nil {
				t.Fatal(err)
			}
			fast, st, err := Search(context.Background(), q, Options{Roots: []Root{{Root: root, Sources: srcs}}, Limit: 10, Explain: true, Index: idx})
			if err != nil {
				t.Fatal(err)
			}
			if wantIndexed && st.Indexed == 0 {
				t.Errorf("%s %q: the index was not used", stage, qs)
			}
			if len(scan) != 10 {
				t.Errorf("%s %q: %d results, want 10", stage, qs, len(scan))
			}
			if i, diff := firstDiff(scan, fast); diff {
				t.Errorf("%s %q: the index ranks differently from result %d\nscan  %+v\nindex %+v", stage, qs, i, at(scan, i), at(fast, i))
			}
		}
	}
	index := func() {
		if _, err := IndexFile(idx, root, "s.jsonl", Log, IndexOptions{BlockSize: 4096}); err != nil {
			t.Fatal(err)
		}
	}
	n := 0
	for range 80 {
		write(n, 40)
		n += 40
		index()
	}
	segs := termSegmentFiles(idx, root.Path(), "s.jsonl")
	if len(segs) < 2 || len(segs) > 8 {
		t.Errorf("%d term segments after 80 passes, want a few (merged)", len(segs))
	}
	compare("indexed", true)
	write(n, 25) // a tail the index does not cover yet
	compare("grown", true)
	// Questions of a rare identifier: every result holds it.
	q, _ := ParseQuery("what did the agent decide about the zanzibar-quokka deploy?")
	rs, _, _ := Search(context.Background(), q, Options{Roots: []Root{{Root: root, Sources: srcs}}, Limit: 10, Index: idx})
	for _, r := range rs {
		if !strings.Contains(r.Text, "zanzibar-quokka") {
			t.Errorf("result %s does not hold zanzibar-quokka: %s", r.Citation, r.Text)
		}
	}
	// Rewritten in place: a new epoch, segments built anew.
	os.WriteFile(p, nil, 0o644)
	n = 0
	write(0, 900)
	index()
	compare("rewritten", true)
}

// FuzzSegment: a segment file cut or overwritten (a crash, a bad disk)
// is refused or read without a panic, whatever its bytes.
func FuzzSegment(f *testing.F) {
	b := newSegBuilder(0, 0, nil)
	a := NewAnalyzer()
	for i := range 300 {
		b.add(a, []byte(fmt.Sprintf("message %d about the deploy and the rollback of service %d", i, i%7)), int64(i*60), int64(i+1), time.Time{})
	}
	b.endOff, b.nextLine = 300*60, 301
	good := b.encode(fileID{dev: 1, ino: 2})
	f.Add(good)
	f.Add(good[:len(good)/2])
	f.Fuzz(func(t *testing.T, data []byte) {
		s, err := parseSegment(data)
		if err != nil {
			return
		}
		for _, term := range []string{"deploy", "rollback", "servic", "1", "zzz"} {
			ti, ok := s.lookup(term)
			if !ok {
				continue
			}
			c := newCursor(ti)
			for n := 0; !c.done && n < 100000; n++ {
				if d := c.doc(); int(d) < s.count() {
					s.doc(d)
				}
				c.next()
			}
			c = newCursor(ti)
			c.seek(150)
		}
	})
}

// FuzzAnalyzer: any text (invalid UTF-8, huge tokens) gives terms that
// are valid, non-empty and bounded.
func FuzzAnalyzer(f *testing.F) {
	f.Add("What did Caroline's team decide about the zanzibar-quokka deploy? café 日本語 \xff\xfe")
	f.Add(strings.Repeat("a", 100) + " it's ’s x")
	f.Fuzz(func(t *testing.T, text string) {
		a := NewAnalyzer()
		a.Terms([]byte(text), func(term string) {
			if term == "" || len(term) > 4*maxToken {
				t.Fatalf("term %q of %q", term, text)
			}
		})
	})
}

// TestStemKeepsTheFirstTwoBytes: the filtered analyzer's premise, that
// the stemmer keeps a word's first two bytes, over the exceptions of
// Snowball's English stemmer and the words of the golden files.
func TestStemKeepsTheFirstTwoBytes(t *testing.T) {
	words := strings.Fields("skis skies dying lying tying idly gently ugly early only singly sky news howe atlas cosmos bias andes yelling youth yearly generously communism arsenal ies ied ying eed eedly y ys")
	for _, g := range []string{"recall-words.golden", "recall-messages.golden", "recall-detail.golden", "recall-words-ranked.golden"} {
		b, _ := os.ReadFile(filepath.Join("testdata", g))
		words = append(words, strings.FieldsFunc(strings.ToLower(string(b)), func(r rune) bool { return r < 'a' || r > 'z' })...)
	}
	a := NewAnalyzer()
	for _, w := range words {
		a.Terms([]byte(w), func(term string) {
			if !slices.Contains(stemPrefixes(term), prefix2([]byte(w))) {
				t.Errorf("%q stems to %q, whose stemPrefixes lack %q", w, term, w[:min(2, len(w))])
			}
		})
	}
}
