package secrets

// keywords finds the rules' keywords in a text, case-insensitively: the
// prefilter that decides which rules run at all. Every keyword is ASCII
// and two bytes or longer, so one pass looks each pair of bytes up in a
// table (128 KiB: every pair a keyword starts with) and compares only the
// keywords that start there. It replaced an Aho-Corasick automaton,
// whose walk was most of the time on text of source code.
type keywords struct {
	words []string // lowercase
	// pairs has bit b of pairs[a] set when a keyword starts with bytes a,
	// b (8 KiB: the test of every byte stays in the first-level cache).
	pairs [256][4]uint64
	first [1 << 16]uint16 // a pair of bytes: 1 + its entry in lists, 0: none
	lists [][]int32       // keywords starting with a pair
}

func newKeywords(words []string) *keywords {
	k := &keywords{words: words}
	for i, w := range words {
		a, b := fold(w[0]), fold(w[1])
		k.pairs[a][b>>6] |= 1 << (b & 63)
		p := pairOf(w[0], w[1])
		if k.first[p] == 0 {
			k.lists = append(k.lists, nil)
			k.first[p] = uint16(len(k.lists))
		}
		k.lists[k.first[p]-1] = append(k.lists[k.first[p]-1], int32(i))
	}
	return k
}

func pairOf(a, b byte) uint16 { return uint16(fold(a))<<8 | uint16(fold(b)) }

func fold(c byte) byte { return foldTable[c] }

// foldTable lowercases ASCII letters.
var foldTable = func() (t [256]byte) {
	for i := range t {
		t[i] = byte(i)
		if 'A' <= i && i <= 'Z' {
			t[i] = byte(i + 32)
		}
	}
	return t
}()

// each calls fn with every keyword in text and where it starts, in order
// of position; fn returns false to stop.
func (k *keywords) each(text string, fn func(pos int, word string) bool) {
	for i := 0; i+1 < len(text); i++ {
		a, b := foldTable[text[i]], foldTable[text[i+1]]
		if k.pairs[a][b>>6]&(1<<(b&63)) == 0 {
			continue
		}
		e := k.first[uint16(a)<<8|uint16(b)]
	words:
		for _, wi := range k.lists[e-1] {
			w := k.words[wi]
			if i+len(w) > len(text) {
				continue
			}
			for j := 2; j < len(w); j++ {
				if fold(text[i+j]) != w[j] {
					continue words
				}
			}
			if !fn(i, w) {
				return
			}
		}
	}
}

// any reports whether text holds a keyword.
func (k *keywords) any(text string) bool {
	found := false
	k.each(text, func(int, string) bool { found = true; return false })
	return found
}

func isASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] >= 0x80 {
			return false
		}
	}
	return true
}
