package secrets

import (
	"fmt"
	"slices"
	"strings"
	"testing"
)

// naiveKeywords is what keywords.each must find: every place of every
// keyword in the text lowercased (ASCII).
func naiveKeywords(words []string, text string) []string {
	lt := lower(text)
	var out []string
	for i := range lt {
		for _, w := range words {
			if strings.HasPrefix(lt[i:], w) {
				out = append(out, fmt.Sprint(i, w))
			}
		}
	}
	return out
}

func FuzzKeywords(f *testing.F) {
	f.Add("AKIA s.x ghp_ Key=token ey")
	f.Add("sks.s.KEYKEY")
	words := Default().kw.words
	f.Fuzz(func(t *testing.T, text string) {
		var got []string
		Default().kw.each(text, func(pos int, w string) {
			got = append(got, fmt.Sprint(pos, w))
		})
		want := naiveKeywords(words, text)
		// each lists a place's keywords in table order, naive in words'
		// order: compare as sets of places.
		slices.Sort(got)
		slices.Sort(want)
		if !slices.Equal(got, want) {
			t.Fatalf("%q: got %v, want %v", text, got, want)
		}
	})
}

// each calls fn with every keyword in text and where it starts, in order
// of position.
func (k *keywords) each(text string, fn func(pos int, word string)) {
	var buf [32]kwMatch
	for _, m := range k.find(text, buf[:0]) {
		fn(int(m.pos), k.words[m.word])
	}
}

// TestKeywordsSharedClasses: with more distinct bytes in the keywords
// than a class has room for, those past the 63rd share a class; a place
// passes more often and every keyword is still found.
func TestKeywordsSharedClasses(t *testing.T) {
	var words []string
	for c := byte('!'); c < '~'-2; c++ {
		if 'A' <= c && c <= 'Z' {
			continue
		}
		words = append(words, string([]byte{c, c + 1, c + 2}), string([]byte{'q', c}))
	}
	k := newKeywords(words)
	if k.class['}'] != 63 || k.class['|'] != 63 {
		t.Fatalf("class of '|', '}': got %d, %d, want 63 (shared)", k.class['|'], k.class['}'])
	}
	texts := []string{"", "q", "q}", "{|}", "xx{|}yy", "Q!", "abcdefghijklmnopqrstuvwxyz", "|}~ q{ ABC", strings.Repeat("q~x{|", 40)}
	for _, text := range texts {
		var got []string
		k.each(text, func(pos int, w string) { got = append(got, fmt.Sprint(pos, w)) })
		want := naiveKeywords(words, text)
		slices.Sort(got)
		slices.Sort(want)
		if !slices.Equal(got, want) {
			t.Errorf("%q: got %v, want %v", text, got, want)
		}
	}
}
