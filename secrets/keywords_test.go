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
