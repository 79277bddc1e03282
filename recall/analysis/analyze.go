// Package analysis is how recall turns text into terms: a line's text
// when it is indexed, a question when it is asked, so a term in a question
// is the term in the text (bleve's analysis/, for one language).
package analysis

import (
	"bytes"
	"encoding/binary"
	"hash/maphash"
	"unicode"
	"unicode/utf8"

	"github.com/kljensen/snowball/english"
)

//   - A token is a run of letters and digits (Unicode: "café", "日本語",
//     "v2"), with the apostrophes inside a word ("Caroline's"); everything
//     else separates, so an identifier (zanzibar-quokka, src/auth.go,
//     AUTH_TOKEN) is its words.
//   - A line number a tool printed before a file's line ("    12→",
//     "    12\t") is no token (gutter).
//   - Tokens are lowercased; English stopwords (Snowball's list: "the",
//     "what", "did", ...) do not count; the rest are stemmed with the
//     Snowball (Porter2) English stemmer, so "painted", "painting" and
//     "paints" are one term. Tokens longer than maxToken bytes (hashes,
//     base64) are left out.

// maxToken is the longest token indexed.
const maxToken = 48

// maxStemCache bounds an Analyzer's stem cache (then it starts afresh).
const maxStemCache = 1 << 16

// Analyzer turns text into terms. It caches stems: not safe for
// concurrent use; make one per goroutine.
type Analyzer struct {
	stems map[string]string
	buf   []byte
	// The indexing's terms by id (TermIDs): tokens interned in an
	// open-addressed table, one probe a token (a map of strings, missing
	// the cache at each token, was most of the analysis of a home), their
	// terms numbered in another. Bytes are kept in arenas and entries hold
	// no pointer: the garbage collector does not walk half a million
	// strings, and a home's tokens fit before the tables start afresh.
	seed      maphash.Seed
	seed64    uint64
	toks      []tokenSlot // open-addressed by hash; key 0: empty
	ntoks     int
	tokBytes  []byte    // the tokens longer than 8 bytes
	termSlots []uint32  // 1 + a term's id; 0: empty
	terms     []termEnt // by id
	termBytes []byte
	local     []int32 // a segment builder's ids by these (addIDs)
	// hot is a direct-mapped cache of short tokens' ids in front of toks:
	// a home's tokens are mostly a few thousand ("err", "return", "the"),
	// found here in the CPU's cache where toks, tens of MiB, misses it.
	hot *[hotSlots]hotSlot
	// hotLong is hot's for tokens of 9 to 16 bytes (192 KiB).
	hotLong *[hotSlots / 2]hotLongSlot
	maxIDs  int // maxTermIDs (tests make it small)
	// only, when set, holds the first two bytes of every term wanted
	// (a bit per pair): a token starting otherwise is not stemmed (it
	// cannot be one of them), and stands as the term otherTerm.
	only *[1 << 16 / 64]uint64
}

func (a *Analyzer) wants(tok []byte) bool {
	p := prefix2(tok)
	k := uint16(p[0])<<8 | uint16(p[1])
	return a.only[k>>6]&(1<<(k&63)) != 0
}

// otherTerm is what a token that cannot be a wanted term is, with
// Analyzer.only set: it counts in a document's length, and is no term.
const otherTerm = "\x01"

// NewFiltered returns an analyzer for documents searched for
// terms alone. Stemming is most of the cost of analyzing text at query
// time, and every token that cannot stem to one of the terms is spared
// it: Snowball's English stemmer only changes a word's end (its R1 region,
// after at least one vowel and consonant), so a word keeps its first two
// letters, but for three of its exceptions (stemPrefixes); words it does
// not stem are their terms.
func NewFiltered(terms []string) *Analyzer {
	a := New()
	a.only = new([1 << 16 / 64]uint64)
	for _, t := range terms {
		for _, p := range stemPrefixes(t) {
			k := uint16(p[0])<<8 | uint16(p[1])
			a.only[k>>6] |= 1 << (k & 63)
		}
	}
	return a
}

// stemPrefixes are the first two bytes of the words that stem to term:
// its own, and "dy", "ly", "ty" for "die", "lie", "tie" ("dying").
func stemPrefixes(term string) [][2]byte {
	out := [][2]byte{prefix2([]byte(term))}
	switch term {
	case "die", "lie", "tie":
		out = append(out, [2]byte{term[0], 'y'})
	}
	return out
}

func prefix2(b []byte) [2]byte {
	var p [2]byte
	copy(p[:], b)
	return p
}

// New returns an analyzer.
func New() *Analyzer {
	seed := maphash.MakeSeed()
	return &Analyzer{stems: map[string]string{}, seed: seed, seed64: maphash.Comparable(seed, 0), maxIDs: maxTermIDs}
}

// tokenSlot is an interned token and its term's id (-1: a stopword). A
// token of up to 8 bytes is its key (its bytes, zero-padded: a token holds
// no zero byte); a longer one is tokBytes[off:off+n], its key longKey | n<<32
// | off (0xff starts no UTF-8 byte, so no short key has it on top). A
// look-up of a short token, most of them, touches one slot: with the
// token's bytes and its entry elsewhere, a catch-up spent more in the three
// cache misses of each probe than in the rest of its analysis.
type tokenSlot struct {
	key  uint64
	hash uint32
	id   int32
}

const longKey = 0xff << 56

// hotSlots is the size of Analyzer.hot (256 KiB).
const (
	hotBits  = 14
	hotSlots = 1 << hotBits
)

// hotSlot is a short token's key (0: empty) and its term's id.
type hotSlot struct {
	key uint64
	id  int32
}

// hotLongSlot is a token of 9 to 16 bytes (its bytes, zero-padded) and
// its term's id: identifiers and longer words, an eighth of a home's
// tokens, each else a hash of its bytes and a probe of toks (a miss of
// the CPU's cache) and a comparison in tokBytes (another).
type hotLongSlot struct {
	k0, k1 uint64
	id     int32
}

// hotIndex is a short key's slot in Analyzer.hot (Fibonacci hashing).
func hotIndex(key uint64) uint64 { return key * 0x9e3779b97f4a7c15 >> (64 - hotBits) }

// shortKey is the key of a token of 1 to 8 bytes.
func shortKey(tok []byte) uint64 {
	if cap(tok) >= 8 {
		// Eight bytes read at once (the token is a slice of the text or
		// of the buffer), those past it masked off.
		return binary.LittleEndian.Uint64(tok[:8]) & (^uint64(0) >> (64 - 8*uint(len(tok))))
	}
	var k uint64
	for i, c := range tok {
		k |= uint64(c) << (8 * i)
	}
	return k
}

// mix64 is a 64-bit finalizer (Murmur3's): a short key's hash.
func mix64(k uint64) uint64 {
	k ^= k >> 33
	k *= 0xff51afd7ed558ccd
	k ^= k >> 33
	k *= 0xc4ceb9fe1a85ec53
	k ^= k >> 33
	return k
}

// termEnt is a term, termBytes[off:off+n].
type termEnt struct {
	hash uint32
	off  uint32
	n    uint16
}

// maxTermIDs bounds the tokens and terms TermIDs numbers between two
// ResetIDs: about 30 MiB of tables, none of it pointers (a home of 1,700
// sessions has about 420,000 terms: at 1<<17, with a string a token, the
// tables started afresh every few hundred sessions, and a token missed
// was stemmed again; at 1<<20 the daemon's peak RSS went from 66 to 182
// MiB through a catch-up).
const maxTermIDs = 1 << 19

// TermIDs calls fn with the id of each term of text, in order (Term
// gives its text): Terms, without a string a token.
func (a *Analyzer) TermIDs(text []byte, fn func(id int32)) {
	a.tokens(text, func(tok []byte, ascii bool) {
		if id := a.id(tok, ascii); id >= 0 {
			fn(id)
		}
	})
}

// Term is the term of an id TermIDs or TermID gave.
func (a *Analyzer) Term(id int32) string { return string(a.TermBytes(id)) }

// TermBytes is Term, in the analyzer's memory: valid until ResetIDs.
func (a *Analyzer) TermBytes(id int32) []byte {
	t := a.terms[id]
	return a.termBytes[t.off : t.off+uint32(t.n) : t.off+uint32(t.n)]
}

// TermID is a term's id, numbered as TermIDs numbers them.
func (a *Analyzer) TermID(t string) int32 { return a.termID([]byte(t)) }

func (a *Analyzer) termID(t []byte) int32 {
	h := uint32(maphash.Bytes(a.seed, t))
	mask := uint32(len(a.termSlots) - 1)
	i := h & mask
	if len(a.termSlots) > 0 {
		for ; a.termSlots[i] != 0; i = (i + 1) & mask {
			e := a.terms[a.termSlots[i]-1]
			if e.hash == h && string(a.termBytes[e.off:e.off+uint32(e.n)]) == string(t) {
				return int32(a.termSlots[i] - 1)
			}
		}
	}
	id := int32(len(a.terms))
	a.terms = append(a.terms, termEnt{hash: h, off: uint32(len(a.termBytes)), n: uint16(len(t))})
	a.termBytes = append(a.termBytes, t...)
	if 2*len(a.terms) > len(a.termSlots) {
		a.termSlots = grown(a.termSlots, len(a.terms), func(k int) uint32 { return a.terms[k].hash })
		return id
	}
	a.termSlots[i] = uint32(id) + 1
	return id
}

// ResetIDs forgets the ids given when there are more than maxTermIDs,
// so memory stays bounded; no id given before may be used after.
func (a *Analyzer) ResetIDs() {
	if len(a.terms) > a.maxIDs || a.ntoks > a.maxIDs {
		a.toks, a.ntoks, a.tokBytes, a.local = nil, 0, nil, nil
		a.termSlots, a.terms, a.termBytes = nil, nil, nil
		a.hot, a.hotLong = nil, nil
	}
}

// id is a lowercased token's term id, interned.
func (a *Analyzer) id(tok []byte, ascii bool) int32 {
	var key uint64
	var h uint32
	short := len(tok) <= 8
	var hot *hotSlot
	var hl *hotLongSlot
	var k0, k1 uint64 // a token of 9 to 16 bytes: its two words, hl's key
	if short {
		key = shortKey(tok)
		if a.hot == nil {
			a.hot = new([hotSlots]hotSlot)
		}
		hot = &a.hot[hotIndex(key)]
		if hot.key == key {
			return hot.id
		}
		h = uint32(mix64(key ^ a.seed64))
	} else {
		if len(tok) <= 16 {
			k0, k1 = binary.LittleEndian.Uint64(tok), shortKey(tok[8:])
			if a.hotLong == nil {
				a.hotLong = new([hotSlots / 2]hotLongSlot)
			}
			hl = &a.hotLong[hotIndex(k0^mix64(k1))>>1]
			if hl.k0 == k0 && hl.k1 == k1 {
				return hl.id
			}
		}
		h = uint32(maphash.Bytes(a.seed, tok))
	}
	mask := uint32(len(a.toks) - 1)
	i := h & mask
	if len(a.toks) > 0 {
		for ; a.toks[i].key != 0; i = (i + 1) & mask {
			t := &a.toks[i]
			if t.hash != h {
				continue
			}
			if short {
				if t.key == key {
					*hot = hotSlot{key: key, id: t.id}
					return t.id
				}
			} else if t.key>>56 == 0xff {
				off, n := uint32(t.key), uint32(t.key>>32)&0xffff
				if string(a.tokBytes[off:off+n]) == string(tok) {
					if hl != nil {
						*hl = hotLongSlot{k0: k0, k1: k1, id: t.id}
					}
					return t.id
				}
			}
		}
	}
	id := int32(-1)
	if t := stem(string(tok), tok, ascii); t != "" {
		id = a.termID([]byte(t))
	}
	if !short {
		key = longKey | uint64(len(tok))<<32 | uint64(len(a.tokBytes))
		a.tokBytes = append(a.tokBytes, tok...)
	}
	a.ntoks++
	if 2*a.ntoks > len(a.toks) {
		a.toks = grownTokens(a.toks)
		mask = uint32(len(a.toks) - 1)
		for i = h & mask; a.toks[i].key != 0; i = (i + 1) & mask {
		}
	}
	a.toks[i] = tokenSlot{key: key, hash: h, id: id}
	if short {
		*hot = hotSlot{key: key, id: id}
	} else if hl != nil {
		*hl = hotLongSlot{k0: k0, k1: k1, id: id}
	}
	return id
}

// grownTokens is a token table of twice the slots, with toks' entries.
func grownTokens(toks []tokenSlot) []tokenSlot {
	out := make([]tokenSlot, max(1024, 2*len(toks)))
	mask := uint32(len(out) - 1)
	for _, t := range toks {
		if t.key == 0 {
			continue
		}
		i := t.hash & mask
		for out[i].key != 0 {
			i = (i + 1) & mask
		}
		out[i] = t
	}
	return out
}

// grown is a table of twice the slots for n entries, hash(k) the
// hash of entry k, each slot 1 + its entry.
func grown(slots []uint32, n int, hash func(k int) uint32) []uint32 {
	slots = make([]uint32, max(1024, 2*len(slots)))
	mask := uint32(len(slots) - 1)
	for k := range n {
		i := hash(k) & mask
		for slots[i] != 0 {
			i = (i + 1) & mask
		}
		slots[i] = uint32(k + 1)
	}
	return slots
}

// wordByte classifies ASCII bytes: 1 a letter or digit, 2 an apostrophe.
var wordByte = func() (t [256]uint8) {
	for c := '0'; c <= '9'; c++ {
		t[c] = 1
	}
	for c := 'a'; c <= 'z'; c++ {
		t[c], t[c-32] = 1, 1
	}
	t['\''] = 2
	return t
}()

// Terms calls fn with each term of text, in order.
func (a *Analyzer) Terms(text []byte, fn func(term string)) {
	a.tokens(text, func(tok []byte, ascii bool) {
		if t := a.term(tok, ascii); t != "" {
			fn(t)
		}
	})
}

// tokens calls fn with each token of text, lowercased, and whether it is
// ASCII. The token is text itself when it is already lowercase ASCII (most
// are: a home's tool results are source code and logs), else a buffer
// reused for the next; fn must not keep it.
func (a *Analyzer) tokens(text []byte, fn func(tok []byte, ascii bool)) {
	i := 0
	for i < len(text) {
		for i < len(text) && asciiSep[text[i]] {
			i++
		}
		if i == len(text) {
			return
		}
		if c := text[i]; c >= utf8.RuneSelf {
			if c == 0xe2 && i+2 < len(text) && text[i+1] == 0x86 && text[i+2] == 0x92 {
				i += 3 // "→", after every line number of a file Claude Code read
				continue
			}
			r, n := utf8.DecodeRune(text[i:])
			if noWord(r) || !unicode.IsLetter(r) && !unicode.IsDigit(r) {
				i += n
				continue
			}
		}
		// A token: letters, digits, apostrophes between them.
		start := i
		for i < len(text) && lowerWord[text[i]] {
			i++
		}
		tok, ascii := text[start:i], true
		if i < len(text) && (!asciiSep[text[i]] || text[i] == '\'' && i > start && i+1 < len(text) && wordByte[text[i+1]] == 1) {
			// An upper-case letter, a letter beyond ASCII or an
			// apostrophe inside: the rest lowercased into the buffer.
			a.buf = append(a.buf[:0], tok...)
			i, ascii = a.rest(text, i)
			tok = a.buf
		}
		if len(tok) == 0 || len(tok) > maxToken {
			continue
		}
		if ascii && i < len(text) && (text[i] == '\t' || text[i] == 0xe2) && gutter(text, start, i) {
			continue
		}
		fn(tok, ascii)
	}
}

// rest lowercases the rest of a token from text[i] into a.buf, and
// returns where it ends and whether it is ASCII.
func (a *Analyzer) rest(text []byte, i int) (int, bool) {
	ascii := true
	for i < len(text) {
		c := text[i]
		if c < utf8.RuneSelf {
			switch wordByte[c] {
			case 1:
				a.buf = append(a.buf, lowerASCII(c))
				i++
				continue
			case 2:
				if i+1 < len(text) && text[i+1] < utf8.RuneSelf && wordByte[text[i+1]] == 1 && len(a.buf) > 0 {
					a.buf = append(a.buf, '\'')
					i++
					continue
				}
			}
			break
		}
		r, n := utf8.DecodeRune(text[i:])
		if r == '\u2019' && len(a.buf) > 0 && i+n < len(text) && text[i+n] < utf8.RuneSelf && wordByte[text[i+n]] == 1 {
			a.buf = append(a.buf, '\'') // a typographic apostrophe is one
			i += n
			continue
		}
		if noWord(r) || !unicode.IsLetter(r) && !unicode.IsDigit(r) {
			break
		}
		ascii = false
		a.buf = utf8.AppendRune(a.buf, unicode.ToLower(r))
		i += n
	}
	return i, ascii
}

func lowerASCII(c byte) byte {
	if c >= 'A' && c <= 'Z' {
		return c + 32
	}
	return c
}

// lowerWord marks the lowercase ASCII letters and the digits.
var lowerWord = func() (t [256]bool) {
	for c := range utf8.RuneSelf {
		t[c] = wordByte[c] == 1 && (c < 'A' || c > 'Z')
	}
	return t
}()

// asciiSep marks the ASCII bytes that are no part of a token (an
// apostrophe starts none).
var asciiSep = func() (t [256]bool) {
	for c := range utf8.RuneSelf {
		t[c] = wordByte[c] != 1
	}
	return t
}()

// noWord reports runes of blocks that hold no letter and no digit
// (arrows, mathematical operators, technical symbols, box drawing,
// geometric shapes, dingbats: U+2190 to U+27BF), told without the Unicode
// tables: Claude Code's "→" starts every line of every file it reads.
// TestNoWord checks the range against the tables.
func noWord(r rune) bool { return r >= 0x2190 && r <= 0x27bf }

// gutter says whether the token text[start:end] is a line number a tool
// printed before a line of a file: digits alone at the line's start but
// for spaces, then Claude Code's arrow ("    12→") or the tab of cat -n
// and nl, six columns wide ("    12\t"). A tool result of a file read is
// most of a coding session, and its line numbers were a third of the
// terms of a home's index, matching every file read for "12".
func gutter(text []byte, start, end int) bool {
	if end >= len(text) || text[end] != '\t' && text[end] != 0xe2 {
		return false
	}
	for _, c := range text[start:end] {
		if c < '0' || c > '9' {
			return false
		}
	}
	j := start - 1
	for j >= 0 && text[j] == ' ' {
		j--
	}
	if j >= 0 && text[j] != '\n' {
		return false
	}
	if text[end] == '\t' {
		return end-j-1 >= 6
	}
	return bytes.HasPrefix(text[end:], arrow)
}

// arrow is the "→" Claude Code's Read puts after a line number.
var arrow = []byte("\u2192")

// term is the term of a lowercased token: "" for a stopword.
func (a *Analyzer) term(tok []byte, ascii bool) string {
	if a.only != nil && !a.wants(tok) {
		// Most tokens of a document searched at query time: what they
		// count as needs neither the cache nor the stemmer.
		if english.IsStopWord(string(tok)) { // no allocation: it does not escape
			return ""
		}
		return otherTerm
	}
	if t, ok := a.stems[string(tok)]; ok { // no allocation for the lookup
		return t
	}
	w := string(tok)
	t := stem(w, tok, ascii)
	if len(a.stems) >= maxStemCache {
		clear(a.stems)
	}
	a.stems[w] = t
	return t
}

// stem is the term of the lowercased token w (tok, its bytes): "" for a
// stopword. TermIDs calls it for a token its table does not hold yet, not
// through the stems' cache: the table holds every token between two
// ResetIDs (a home's catch-up has none), so the cache only missed, and
// its strings were more for the collector to walk.
func stem(w string, tok []byte, ascii bool) string {
	switch {
	case english.IsStopWord(w):
		return ""
	case ascii && !hasDigit(tok):
		return english2(w)
	}
	return w
}

func hasDigit(b []byte) bool {
	for _, c := range b {
		if c >= '0' && c <= '9' {
			return true
		}
	}
	return false
}

// QueryTerms returns the distinct terms of a question, in order, with how
// often each occurs in it.
func (a *Analyzer) QueryTerms(q string) (terms []string, counts []int) {
	at := map[string]int{}
	a.Terms([]byte(q), func(t string) {
		if i, ok := at[t]; ok {
			counts[i]++
			return
		}
		at[t] = len(terms)
		terms = append(terms, t)
		counts = append(counts, 1)
	})
	return terms, counts
}

// IsWordByte says c can be part of a token (a letter, a digit, an
// apostrophe; any byte of a multi-byte rune).
func IsWordByte(c byte) bool { return c >= 0x80 || wordByte[c] != 0 }

// Filtered says the analyzer was made for some terms (NewFiltered): a
// token that cannot be one of them is no term.
func (a *Analyzer) Filtered() bool { return a.only != nil }

// Scratch is a slice kept with the analyzer, indexed by its term ids
// (TermIDs), for a caller that maps them to ids of its own (a term
// segment's builder): kept across calls so it is not made again for each.
func (a *Analyzer) Scratch() *[]int32 { return &a.local }

// stemmable is false for a lowercase ASCII word the English stemmer
// surely leaves as it is, told by its last two or three bytes: Porter2
// only replaces or removes suffixes (and turns y to Y and back), so a word
// that ends in none of them is its own stem. Half of a home's distinct
// words are (identifiers: "ctx", "err", "json", "deadbeef", "return"),
// and the stemmer, which makes each a slice of runes, cost a microsecond
// a word. TestStemmable and FuzzStemmable hold it to the stemmer; a
// word it says true of may still be its own stem.
func stemmable(w string) bool {
	n := len(w)
	if n <= 2 {
		return false
	}
	if w[0] == '\'' {
		return true
	}
	prev := w[n-2]
	switch w[n-1] {
	case 'e', 's', '\'':
		return true
	case 't': // -ment, -ent, -ant, -ement
		return prev == 'n'
	case 'c': // -ic
		return prev == 'i'
	case 'm': // -ism, -alism
		return prev == 's'
	case 'r': // -er, -izer, -ator
		return prev == 'e' || prev == 'o'
	case 'n': // -ion, -ation, -ization
		return prev == 'o'
	case 'd': // -ed, -eed, -ied
		return prev == 'e'
	case 'g': // -ing
		return prev == 'n' && w[n-3] == 'i'
	case 'l': // -al, -ful, -ll and the -al endings of steps 2 and 3
		return prev == 'a' || prev == 'u' || prev == 'l'
	case 'i': // -li, -ogi, -enci, -anci, -iti and theirs
		return prev == 'l' || prev == 'g' || prev == 'c' || prev == 't'
	case 'y': // step 1c: y after a consonant; -ly (-edly, -ingly, idly)
		return !(prev == 'a' || prev == 'e' || prev == 'i' || prev == 'o' || prev == 'u')
	}
	return false
}
