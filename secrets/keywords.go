package secrets

// keywords finds the rules' keywords in a text, case-insensitively: the
// prefilter that decides which rules run at all. Every keyword is ASCII
// and two bytes or longer. One pass tests each place against two bit
// tables that stay in the first-level cache: the pairs of bytes the
// two-byte keywords are (s., ey, sk), and a hash of the first three bytes
// of the others (8 KiB); only a place that passes compares keywords. Most
// places of text pass neither: a pair of bytes alone ("re", "in", "to")
// starts some keyword at 18% of the places of source code, three bytes
// at far fewer. It replaced an Aho-Corasick automaton, whose walk was
// most of the time on source code.
type keywords struct {
	words []string // lowercase
	// short has bit p set for the pair of bytes p a two-byte keyword is.
	short [1 << 16 / 64]uint64
	// long has the bit of hash3 set for the first three bytes of each
	// longer keyword; head gives, by that hash, 1 + the entry in lists of
	// the keywords it may be (0: none).
	long  [1 << 16 / 64]uint64
	head  [1 << 16]uint16
	lists [][]int32
	// shortOf is the keyword a two-byte place is.
	shortOf map[uint16]int32
}

func newKeywords(words []string) *keywords {
	k := &keywords{words: words, shortOf: map[uint16]int32{}}
	for i, w := range words {
		a, b := fold(w[0]), fold(w[1])
		p := uint16(a)<<8 | uint16(b)
		if len(w) == 2 {
			k.short[p>>6] |= 1 << (p & 63)
			k.shortOf[p] = int32(i)
			for c := range 256 {
				h := hash3(a, b, byte(c))
				k.long[h>>6] |= 1 << (h & 63)
			}
			continue
		}
		h := hash3(a, b, fold(w[2]))
		k.long[h>>6] |= 1 << (h & 63)
		if k.head[h] == 0 {
			k.lists = append(k.lists, nil)
			k.head[h] = uint16(len(k.lists))
		}
		k.lists[k.head[h]-1] = append(k.lists[k.head[h]-1], int32(i))
	}
	return k
}

func hash3(a, b, c byte) uint32 {
	return ((uint32(a)<<16 | uint32(b)<<8 | uint32(c)) * 2654435761) >> 16
}

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

// kwMatch is a keyword found: where it starts, and its index in words.
type kwMatch struct{ pos, word int32 }

// find appends to out every keyword in text, in order of position.
//
// Each place is tested by one bit, of the hash of its three bytes (long):
// a place of source code passes a few in a hundred times, where the pair
// a longer keyword starts with ("re", "to", "se") passed at 18% and
// mispredicted the branch that asked. A two-byte keyword sets the bits of
// every third byte after it.
func (k *keywords) find(text string, out []kwMatch) []kwMatch {
	if len(text) < 2 {
		return out
	}
	// w holds the folded bytes at i, i+1, i+2 (the first most significant).
	w := uint32(foldTable[text[0]])<<8 | uint32(foldTable[text[1]])
	for i := 0; i+2 < len(text); i++ {
		w = (w<<8 | uint32(foldTable[text[i+2]])) & 0xffffff
		h := (w * 2654435761) >> 16
		if k.long[h>>6]&(1<<(h&63)) == 0 {
			continue
		}
		if p := uint16(w >> 8); k.short[p>>6]&(1<<(p&63)) != 0 {
			out = append(out, kwMatch{int32(i), k.shortOf[p]})
		}
		if k.head[h] == 0 {
			continue
		}
	words:
		for _, wi := range k.lists[k.head[h]-1] {
			w := k.words[wi]
			if i+len(w) > len(text) {
				continue
			}
			for j := 0; j < len(w); j++ {
				if fold(text[i+j]) != w[j] {
					continue words
				}
			}
			out = append(out, kwMatch{int32(i), wi})
		}
	}
	// The last place: a two-byte keyword alone.
	if p := uint16(w); k.short[p>>6]&(1<<(p&63)) != 0 {
		out = append(out, kwMatch{int32(len(text) - 2), k.shortOf[p]})
	}
	return out
}

// any reports whether text holds a keyword.
func (k *keywords) any(text string) bool {
	var buf [1]kwMatch
	return len(k.find(text, buf[:0])) > 0
}

func isASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] >= 0x80 {
			return false
		}
	}
	return true
}
