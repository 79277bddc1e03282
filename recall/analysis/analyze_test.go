package analysis

import (
	"bytes"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"unicode"
	"unicode/utf8"

	"github.com/kljensen/snowball/english"
)

// FuzzAnalyzer: any text (invalid UTF-8, huge tokens) gives terms that
// are valid, non-empty and bounded.
func FuzzAnalyzer(f *testing.F) {
	f.Add("What did Caroline's team decide about the zanzibar-quokka deploy? café 日本語 \xff\xfe")
	f.Add(strings.Repeat("a", 100) + " it's ’s x")
	f.Fuzz(func(t *testing.T, text string) {
		a := New()
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
		b, _ := os.ReadFile(filepath.Join("..", "testdata", g))
		words = append(words, strings.FieldsFunc(strings.ToLower(string(b)), func(r rune) bool { return r < 'a' || r > 'z' })...)
	}
	a := New()
	for _, w := range words {
		a.Terms([]byte(w), func(term string) {
			if !slices.Contains(stemPrefixes(term), prefix2([]byte(w))) {
				t.Errorf("%q stems to %q, whose stemPrefixes lack %q", w, term, w[:min(2, len(w))])
			}
		})
	}
}

// TestGutterIsNoTerm: the line numbers a tool printed before a file's
// lines are no terms; the same numbers in the text are.
func TestGutterIsNoTerm(t *testing.T) {
	for _, c := range []struct{ text, want string }{
		{"     1→package main\n     2→\n    12→func f() {}", "packag main func f"},
		{"1→x", "x"},
		{"     1\tpackage main\n    22\tport 8080", "packag main port 8080"},
		{"1\tid\n22\tname", "1 id 22 name"}, // a table's column, not cat -n's
		{"see line 12→ the port 8080", "see line 12 port 8080"},
		{"v12→x a12→b", "v12 x a12 b"},
		{"x 12\tb", "x 12 b"},
		{"\n  7→\n", ""},
	} {
		var got []string
		New().Terms([]byte(c.text), func(term string) { got = append(got, term) })
		if strings.Join(got, " ") != c.want {
			t.Errorf("terms of %q: got %q, want %q", c.text, strings.Join(got, " "), c.want)
		}
	}
}

// TestTermIDsAreTerms: the indexing's way (a term id a token, interned)
// gives the terms Terms gives, through the tables' growth and their
// starting afresh past maxTermIDs.
func TestTermIDsAreTerms(t *testing.T) {
	a, b := New(), New()
	a.maxIDs = 5000 // the tables start afresh within the test
	check := func(text string) {
		t.Helper()
		var want, got []string
		b.Terms([]byte(text), func(term string) { want = append(want, term) })
		a.TermIDs([]byte(text), func(id int32) { got = append(got, a.Term(id)) })
		if !slices.Equal(got, want) {
			t.Fatalf("terms of %q by id: got %q, want %q", text, got, want)
		}
	}
	check("What did Caroline's team decide about the zanzibar-quokka deploy? café 日本語 ÉTÉ \xff painting painted")
	for round := range 3 {
		var sb strings.Builder
		for i := range a.maxIDs/2 + 1000 {
			fmt.Fprintf(&sb, "w%dx%d deploying deploys Reconfigurations decentralizations ", i, round) // tokens of 7, 9, 16 and 17 bytes kept across a reset
			if i%700 == 0 {
				check(sb.String())
				sb.Reset()
			}
		}
		check(sb.String())
		if id := a.TermID("deploy"); a.Term(id) != "deploy" {
			t.Fatalf("TermID(deploy) is the term %q", a.Term(id))
		}
		a.ResetIDs()
	}
	if a.ntoks > a.maxIDs {
		t.Errorf("%d tokens kept after ResetIDs, want at most %d", a.ntoks, a.maxIDs)
	}
}

func TestNoWord(t *testing.T) {
	for r := rune(0); r <= unicode.MaxRune; r++ {
		if noWord(r) && (unicode.IsLetter(r) || unicode.IsDigit(r)) {
			t.Errorf("noWord(%U) but it is a letter or digit", r)
		}
	}
	if !noWord('→') {
		t.Error("noWord('→') = false")
	}
}

// slowTokens is the tokenizer as the package comment states it, a rune at
// a time: tokens must cut and lowercase text as it does.
func slowTokens(text []byte) (toks []string) {
	var buf []rune
	isWord := func(r rune) bool { return !noWord(r) && (unicode.IsLetter(r) || unicode.IsDigit(r)) }
	rs := []rune(string(text))
	ascii := true
	starts := []int{} // byte offsets of each rune
	off := 0
	for _, r := range rs {
		starts = append(starts, off)
		if r == utf8.RuneError {
			off++ // []rune turns each invalid byte into one RuneError
			continue
		}
		off += utf8.RuneLen(r)
	}
	// A rune decoded from an invalid byte is no word.
	valid := func(k int) bool {
		return rs[k] != utf8.RuneError || strings.HasPrefix(string(text[starts[k]:]), "\uFFFD")
	}
	flush := func(end int) {
		tok := string(buf)
		if tok != "" && len(tok) <= maxToken && !(ascii && gutter(text, end-len(tok), end)) {
			toks = append(toks, tok)
		}
		buf, ascii = buf[:0], true
	}
	end := 0
	for k := 0; k < len(rs); k++ {
		r := rs[k]
		w := valid(k) && isWord(r)
		apos := (r == '\'' || r == '\u2019' && valid(k)) && len(buf) > 0 && k+1 < len(rs) && rs[k+1] < utf8.RuneSelf && isWord(rs[k+1])
		switch {
		case w:
			if r >= utf8.RuneSelf {
				ascii = false
			}
			buf = append(buf, unicode.ToLower(r))
		case apos:
			buf = append(buf, '\'')
		default:
			if len(buf) > 0 {
				flush(end)
			}
		}
		end = starts[k] + len(string(rs[k:k+1]))
		if rs[k] == utf8.RuneError && !valid(k) {
			end = starts[k] + 1
		}
	}
	if len(buf) > 0 {
		flush(len(text))
	}
	return toks
}

// FuzzTokens holds tokens (its fast paths for lowercase ASCII) to
// slowTokens.
func FuzzTokens(f *testing.F) {
	for _, s := range []string{
		"What did Caroline's team decide about the zanzibar-quokka deploy? café 日本語 \xff\xfe ÉTÉ",
		strings.Repeat("a", 100) + " it's ’s x don'T o'Neil 'quoted' end'",
		"    12→func main() {\n    13\tx := 1\n12→x Ab9cD ÀB",
		"a\u2019b a\u2019 \u2019b x\u2192y",
		"\u2192\xe2\x86 a\u2193b\u2192\u2192c\xe2\x86\x92",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, text string) {
		var got []string
		New().tokens([]byte(text), func(tok []byte, ascii bool) { got = append(got, string(tok)) })
		if want := slowTokens([]byte(text)); !slices.Equal(got, want) {
			t.Fatalf("tokens(%q) = %q, want %q", text, got, want)
		}
	})
}

// TestShortKey: a token's key is its bytes, whatever follows it in
// memory (read eight at a time, masked).
func TestShortKey(t *testing.T) {
	buf := []byte("abcdefghijklmnop")
	for n := 1; n <= 8; n++ {
		for start := 0; start+n <= len(buf); start++ {
			tok := buf[start : start+n]
			var want uint64
			for i, c := range tok {
				want |= uint64(c) << (8 * i)
			}
			if got := shortKey(tok); got != want {
				t.Errorf("shortKey(%q) = %#x, want %#x", tok, got, want)
			}
			if got := shortKey(bytes.Clone(tok)); got != want {
				t.Errorf("shortKey(%q), its own copy, = %#x, want %#x", tok, got, want)
			}
		}
	}
}

// BenchmarkTermIDsManyTokens: TermIDs over Go's own sources (about 30
// MB, a vocabulary of hundreds of thousands of tokens, as a home's tool
// results are), one analyzer throughout as the daemon's indexer keeps.
func BenchmarkTermIDsManyTokens(b *testing.B) {
	var texts [][]byte
	var n int64
	goroot, err := exec.Command("go", "env", "GOROOT").Output()
	if err != nil {
		b.Skip("no go command")
	}
	filepath.WalkDir(filepath.Join(strings.TrimSpace(string(goroot)), "src"), func(p string, d fs.DirEntry, err error) error {
		if err != nil || n >= 30<<20 || d.IsDir() || !strings.HasSuffix(p, ".go") {
			return nil
		}
		if t, err := os.ReadFile(p); err == nil {
			texts = append(texts, t)
			n += int64(len(t))
		}
		return nil
	})
	if n == 0 {
		b.Skip("no Go sources under GOROOT")
	}
	a := New()
	b.SetBytes(n)
	var sum int64
	for b.Loop() {
		for _, t := range texts {
			a.TermIDs(t, func(id int32) { sum += int64(id) })
			a.ResetIDs()
		}
	}
	_ = sum
}

// stemKept checks the one promise of stemmable: a word it says the
// stemmer leaves alone, the stemmer leaves alone.
func stemKept(t testing.TB, w string) {
	if !stemmable(w) {
		if got := english.Stem(w, false); got != w {
			t.Fatalf("stemmable(%q) = false, but the stemmer makes it %q", w, got)
		}
	}
}

// TestStemmable holds stemmable to the stemmer for every word of up to
// three bytes of letters and apostrophes, and for longer ones over the
// letters the suffixes are made of (each ending in every byte), and
// checks it skips words: a stemmable that said true of all would pass.
func TestStemmable(t *testing.T) {
	letters := "abcdefghijklmnopqrstuvwxyz'"
	var words func(prefix string, n int, alphabet string, fn func(string))
	words = func(prefix string, n int, alphabet string, fn func(string)) {
		if n == 0 {
			fn(prefix)
			return
		}
		for i := range len(alphabet) {
			words(prefix+alphabet[i:i+1], n-1, alphabet, fn)
		}
	}
	skipped := 0
	check := func(w string) {
		stemKept(t, w)
		if !stemmable(w) {
			skipped++
		}
	}
	for n := 1; n <= 3; n++ {
		words("", n, letters, check)
	}
	for n := 4; n <= 5; n++ {
		words("", n-1, "aeilnotsy", func(p string) {
			for i := range len(letters) {
				check(p + letters[i:i+1])
			}
		})
	}
	// Words the stemmer changes, by their last byte: each suffix it
	// removes needs the word long enough for its regions (R1, R2), which
	// the words above are not.
	for _, w := range []string{"independent", "adjustment", "irritant", "electric", "criticism", "feudalism",
		"operator", "fertilizer", "computer", "relation", "organization", "adoption", "jumped", "agreed",
		"studied", "running", "singing", "hopeful", "conditional", "controll", "probabli", "analogi",
		"valenci", "sensitiviti", "happy", "quickly", "skies", "dying", "gently", "generalization",
		"communism", "arsenal", "ayy", "news", "proceeding", "innings", "deadbeef", "return", "ctx"} {
		stemKept(t, w)
	}
	if skipped == 0 {
		t.Fatal("stemmable said every word may change")
	}
}

// TestSpecialStems: the words english2 stems by its list are stemmed so
// by the package (but for stopwords, which stem never asks it of).
func TestSpecialStems(t *testing.T) {
	for w, want := range specialStems {
		if english.IsStopWord(w) {
			continue
		}
		if got := english.Stem(w, false); got != want {
			t.Errorf("specialStems[%q] = %q, the package says %q", w, want, got)
		}
	}
}

// FuzzStemmable: whatever word stemmable says the stemmer leaves alone,
// the stemmer leaves alone.
func FuzzStemmable(f *testing.F) {
	for _, s := range []string{"deadbeef", "return", "ayy", "o'k", "'tis", "generalization", "independent", "electric", "operator", "analogi"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, w string) {
		b := []byte(strings.ToLower(w))
		for _, c := range b {
			if c >= utf8.RuneSelf || wordByte[c] == 0 || c >= '0' && c <= '9' {
				return // stem asks stemmable only of ASCII words without digits
			}
		}
		stemKept(t, string(b))
	})
}

// TestEnglish2 holds english2 to the snowball package's stemmer: every
// word of up to three letters, longer ones over the letters suffixes are
// made of, and words each step and rule exists for.
func TestEnglish2(t *testing.T) {
	check := func(w string) {
		if english.IsStopWord(w) {
			return // stem asks english2 of no stopword
		}
		if got, want := english2(w), english.Stem(w, false); got != want {
			t.Fatalf("english2(%q) = %q, the stemmer says %q", w, got, want)
		}
	}
	var words func(prefix string, n int, alphabet string)
	words = func(prefix string, n int, alphabet string) {
		if n == 0 {
			check(prefix)
			return
		}
		for i := range len(alphabet) {
			words(prefix+alphabet[i:i+1], n-1, alphabet)
		}
	}
	for n := 1; n <= 3; n++ {
		words("", n, "abcdefghijklmnopqrstuvwxyz'")
	}
	for n := 4; n <= 5; n++ {
		words("", n, "abdeilnostyg")
	}
	for _, w := range []string{"independent", "adjustment", "irritant", "electric", "criticism", "feudalism",
		"operator", "fertilizer", "computer", "relation", "organization", "adoption", "jumped", "agreed",
		"studied", "running", "singing", "hopeful", "conditional", "controll", "probabli", "analogi",
		"valenci", "sensitiviti", "happy", "quickly", "skies", "dying", "gently", "generalization",
		"communism", "arsenal", "ayy", "news", "proceeding", "innings", "deadbeef", "return", "ctx",
		"caresses", "ponies", "ties", "cats", "feed", "agreed", "plastered", "bled", "motoring", "sing",
		"conflated", "troubled", "sized", "hopping", "tanned", "falling", "hissing", "fizzed", "failing",
		"filing", "cry", "by", "say", "relational", "conditional", "rational", "valency", "digitizer",
		"conformability", "radically", "differently", "vilely", "analogously", "vietnamization",
		"predication", "operator", "feudalism", "decisiveness", "hopefulness", "callousness",
		"formality", "sensitivity", "sensibility", "triplicate", "formative", "formalize", "electricity",
		"electrical", "goodness", "revival", "allowance", "inference", "airliner", "gyroscopic",
		"adjustable", "defensible", "irritant", "replacement", "adjustment", "dependent", "adoption",
		"homologou", "communism", "activate", "angularity", "homologous", "effective", "bowdlerize",
		"probate", "rate", "cease", "controll", "roll", "generate", "generously", "communal", "arsenic",
		"yellow", "eyeing", "sayings", "toying", "yyy", "ayyy", "beautiful", "beautifully", "lessli",
		"fearlessly", "atlases", "cosmoses", "biases", "skiing", "ugliness", "bbbbed", "zzzing", "eeding"} {
		check(w)
	}
}

// FuzzEnglish2: english2 is the snowball package's stemmer for any word
// of lowercase letters (others go to the package itself).
func FuzzEnglish2(f *testing.F) {
	for _, s := range []string{"generalization", "hopefulness", "sensitiviti", "ayy", "sayings", "controll", "o'k", "eeding"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, w string) {
		if len(w) > 64 {
			return
		}
		w = strings.ToLower(strings.TrimSpace(w))
		if english.IsStopWord(w) {
			return // stem asks english2 of no stopword
		}
		if got, want := english2(w), english.Stem(w, false); got != want {
			t.Fatalf("english2(%q) = %q, the stemmer says %q", w, got, want)
		}
	})
}
