package secrets

import (
	"cmp"
	"slices"
	"strings"
)

// keywords finds the rules' keywords in a text, case-insensitively: the
// prefilter that decides which rules run at all. Every keyword is ASCII
// and two bytes or longer. One pass tests each place by one bit of a
// table of three bytes, each byte read as its class (a keyword's bytes,
// folded, number the classes; every other byte is class 0): 64 classes,
// so three bytes are 18 bits and the table, 32 KiB, is exact. A two-byte
// keyword sets the bits of its pair with any third byte; a longer one,
// those of its anchor, the three bytes of it least likely in text
// ("linkedin" by "ked", not "lin"), as a search engine's n-gram index
// looks a word up by its rarest gram. Only a place that passes compares
// keywords: about one in 130 of source code (three in a hundred when
// each keyword was looked for by its first three bytes: "int", "con",
// "ent"; six with a 16-bit hash of them), and each is a branch
// mispredicted. It replaced an Aho-Corasick automaton, whose walk was
// most of the time on source code.
type keywords struct {
	words []string // lowercase
	// class numbers the bytes the keywords hold (both cases of a letter
	// alike); a byte no keyword holds is 0. Past 63 distinct bytes,
	// the rest share 63: a place passes more often, none is missed.
	class [256]uint8
	// starts has bit tri(a, b, c) set for the classes of each longer
	// keyword's anchor, and of each two-byte one with any third byte.
	starts [1 << 18 / 64]uint64
	// short has bit p set for the pair of bytes p a two-byte keyword is.
	short [1 << 16 / 64]uint64
	// head gives, by hash3 of three bytes, 1 + the entry in lists of
	// the keywords anchored there (0: none).
	head  [1 << 16]uint16
	lists [][]anchor
	// shortOf is the keyword a two-byte place is.
	shortOf map[uint16]int32
}

func newKeywords(words []string) *keywords {
	k := &keywords{words: words, shortOf: map[uint16]int32{}}
	n := uint8(0)
	for _, w := range words {
		for i := 0; i < len(w); i++ {
			c := fold(w[i])
			if k.class[c] != 0 {
				continue
			}
			n = min(n+1, 63)
			k.class[c] = n
			if 'a' <= c && c <= 'z' {
				k.class[c-32] = n
			}
		}
	}
	for i, w := range words {
		a, b := fold(w[0]), fold(w[1])
		if len(w) == 2 {
			p := uint16(a)<<8 | uint16(b)
			k.short[p>>6] |= 1 << (p & 63)
			k.shortOf[p] = int32(i)
			for c := range uint32(64) {
				t := k.tri(a, b) | c
				k.starts[t>>6] |= 1 << (t & 63)
			}
			continue
		}
		o := anchorOf(w)
		t := k.tri(w[o], w[o+1]) | uint32(k.class[w[o+2]])
		k.starts[t>>6] |= 1 << (t & 63)
		h := hash3(w[o], w[o+1], w[o+2])
		if k.head[h] == 0 {
			k.lists = append(k.lists, nil)
			k.head[h] = uint16(len(k.lists))
		}
		k.lists[k.head[h]-1] = append(k.lists[k.head[h]-1], anchor{int32(i), int32(o)})
	}
	return k
}

// anchor is a keyword (its index in words) and where in it its anchor is.
type anchor struct{ word, off int32 }

// anchorOf is where in w (lowercase, three bytes or longer) the three
// bytes least likely in text start: by the sum of each byte's rarity,
// the three the most common in English and code ("the", "int", "con")
// as common as any, the first of equals.
func anchorOf(w string) int {
	best, score := 0, -1
	for o := 0; o+3 <= len(w); o++ {
		g := w[o : o+3]
		sc := int(rarity(g[0])) + int(rarity(g[1])) + int(rarity(g[2]))
		if slices.Contains(commonTrigrams, g) {
			sc = 0
		}
		if sc > score {
			best, score = o, sc
		}
	}
	return best
}

// rarity is how seldom a byte is in text, roughly: 1 for a space and
// the commonest letters, up to 9 for the rarest. Only the anchors depend
// on it: a keyword is found whichever three bytes anchor it.
func rarity(c byte) uint8 {
	switch {
	case strings.IndexByte(" etaoinsr", c) >= 0:
		return 1
	case strings.IndexByte("hldcum", c) >= 0:
		return 2
	case strings.IndexByte("fpgwybv.,_/", c) >= 0:
		return 3
	case strings.IndexByte("k-:=0123", c) >= 0:
		return 5
	case strings.IndexByte("xjqz456789", c) >= 0:
		return 7
	}
	return 9
}

// commonTrigrams are three bytes of most lines of English or code.
var commonTrigrams = []string{
	"the", "and", "ing", "ion", "ent", "int", "con", "ter", "for", "tio",
	"res", "ati", "ate", "str", "tra", "pro", "per", "com", "est", "ers",
	"ver", "all", "her", "ret", "urn", "err", "fun", "ces", "ess", "ons",
	"ect", "ive", "tes", "lin", "pat", "age", "dat", "ata", "new", "pri",
	"rea", "ran", "ein", "ren", "nte", "ine", "ast", "sta", "ort", "rec",
	"son", "git", "---", "mat", "red", "ook", "box", "hub", "pas", "sql",
	"dis", "pos", "abl", "ble", "tab", "sec", "tok", "ken", "acc", "sum",
}

// tri is the bit of starts of two bytes' classes, a third's to be or-ed in.
func (k *keywords) tri(a, b byte) uint32 {
	return uint32(k.class[a])<<12 | uint32(k.class[b])<<6
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
func (k *keywords) find(text string, out []kwMatch) []kwMatch {
	if len(text) < 2 {
		return out
	}
	n0, sorted := len(out), true
	// w holds the classes of the bytes at i, i+1, i+2, six bits each.
	w := uint32(k.class[text[0]])<<6 | uint32(k.class[text[1]])
	for i := 0; ; i++ {
		if i, w = k.next(text, i, w); i < 0 {
			break
		}
		out = k.at(text, i, out, &sorted)
	}
	return k.last(text, out, n0, sorted)
}

// at appends the keywords at the place i of text whose three bytes
// passed: a two-byte keyword starting there, a longer one anchored there.
// sorted is cleared when one is found before a match already in out.
func (k *keywords) at(text string, i int, out []kwMatch, sorted *bool) []kwMatch {
	a, b := fold(text[i]), fold(text[i+1])
	if p := uint16(a)<<8 | uint16(b); k.short[p>>6]&(1<<(p&63)) != 0 {
		if n := len(out); n > 0 && int(out[n-1].pos) > i {
			*sorted = false
		}
		out = append(out, kwMatch{int32(i), k.shortOf[p]})
	}
	h := hash3(a, b, fold(text[i+2]))
	if k.head[h] == 0 {
		return out
	}
words:
	for _, an := range k.lists[k.head[h]-1] {
		w, start := k.words[an.word], i-int(an.off)
		if start < 0 || start+len(w) > len(text) {
			continue
		}
		for j := 0; j < len(w); j++ {
			if fold(text[start+j]) != w[j] {
				continue words
			}
		}
		if n := len(out); n > 0 && int(out[n-1].pos) > start {
			*sorted = false
		}
		out = append(out, kwMatch{int32(start), an.word})
	}
	return out
}

// last appends a two-byte keyword that the last two bytes of text are,
// and sorts what find appended from n0 on when it is not in order.
func (k *keywords) last(text string, out []kwMatch, n0 int, sorted bool) []kwMatch {
	a, b := fold(text[len(text)-2]), fold(text[len(text)-1])
	if p := uint16(a)<<8 | uint16(b); k.short[p>>6]&(1<<(p&63)) != 0 {
		out = append(out, kwMatch{int32(len(text) - 2), k.shortOf[p]})
	}
	if !sorted {
		// A keyword anchored past its start is found after one that
		// starts later.
		slices.SortStableFunc(out[n0:], func(x, y kwMatch) int { return cmp.Compare(x.pos, y.pos) })
	}
	return out
}

// next is the first place from i whose three bytes have their bit in
// starts, and w with their classes (w: the classes of the two bytes
// before i's third, on entry); -1 when there is none. The loop of find,
// kept apart from its appends, which made the compiler store the
// output's length and capacity at every byte.
func (k *keywords) next(text string, i int, w uint32) (int, uint32) {
	if i >= len(text)-2 {
		return -1, w
	}
	class, starts := &k.class, &k.starts
	t := text[i+2:]
	for j := 0; j < len(t); j++ {
		w = w<<6 | uint32(class[t[j]])
		if x := w & (1<<18 - 1); starts[x>>6]&(1<<(x&63)) != 0 {
			return i + j, w
		}
	}
	return -1, w
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
