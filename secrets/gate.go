package secrets

import (
	"math"
	"strings"
)

// The gate of gitleaks' catch-all rule (generic-api-key). Its expression
// is a name, the operator after it and a value:
//
//	(?i)[\w.-]{0,50}?(?:access|auth|api|...|token)
//	    (?:[ \t\w.-]{0,20})[\s'"]{0,3}(?:=|>|:{1,3}=|\|\||:|=>|\?=|,)[\x60'"\s=]{0,5}
//	    ([\w.=-]{10,150}|[a-z0-9][a-z0-9+/]{11,}={0,3})(?:[\x60'"\s;]|\\[nr]|$)
//
// and a value counts only above 3.5 bits of entropy a byte, which takes
// 12 distinct bytes or more. Go's expressions run it as an automaton of
// hundreds of states (the counted repetitions), 0.4 us a byte: in source
// code, where its names (key, token, auth) are on every screen, it was a
// third of counting a home's credentials. The gate reads a window as the
// expression would, from each name, over what may come between the name
// and the value, to where a value may start; a value is the whole run of
// value bytes from there (what ends a value is none of a value's bytes),
// so the gate asks of it what the rule asks of the value, and lets the
// expression run only where one may be a finding: `token :=
// os.Getenv("TOKEN")` is not (a value ends before a quote, a space, ";"
// or \n, not "("), nor `host = target.URL.Host` (letters alone: the
// rule's allowlist).
//
// The gate only says where a finding cannot be: it reads more than the
// expression could (every way through what comes between the name and the
// value, a value's whole run), never less, so what the windows find is
// what the expression over the whole text finds (FuzzWindows).

// genericTemplate is what comes between the rule's names and its value in
// gitleaks' expression: the gate reads that, and applies only while the
// vendored rule still has it (TestGenericGateReadsTheRule).
const genericTemplate = `)(?:[ \t\w.-]{0,20})[\s'"]{0,3}(?:=|>|:{1,3}=|\|\||:|=>|\?=|,)[\x60'"\s=]{0,5}([\w.=-]{10,150}|[a-z0-9][a-z0-9+/]{11,}={0,3})(?:[\x60'"\s;]|\\[nr]|$)`

// genericNames are the names of its expression, each one of its keywords.
const genericNames = `(?i)[\w.-]{0,50}?(?:access|auth|(?-i:[Aa]pi|API)|credential|creds|key|passw(?:or)?d|secret|token`

// minDistinct is the fewest distinct bytes a value above entropy bits a
// byte holds: n distinct bytes hold at most log2(n) bits.
func minDistinct(entropy float64) int {
	if entropy <= 0 {
		return 1
	}
	return int(math.Floor(math.Exp2(entropy))) + 1
}

// The byte classes of the expression, under (?i). Case folding adds two
// runes to its letters (U+017F for s, U+212A for k): a window holding
// their bytes is not gated (foldRunes).
var (
	nameGap  = byteClass(" \t_.-", true) // [ \t\w.-]
	quoteGap = byteClass("\t\n\f\r '\"", false)
	valueGap = byteClass("`'\"\t\n\f\r =", false)
	// valueRun is every byte of either form of the value: [\w.=-] and
	// [a-z0-9+/=].
	valueRun = byteClass("_.=-+/", true)
	valueEnd = byteClass("`'\"\t\n\f\r ;", false)
)

func byteClass(extra string, alnum bool) (t [256]bool) {
	for i := range extra {
		t[extra[i]] = true
	}
	if alnum {
		for c := '0'; c <= 'z'; c++ {
			if '0' <= c && c <= '9' || 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' {
				t[c] = true
			}
		}
	}
	return t
}

// operators are the expression's: the gate takes every one that is
// there.
var operators = []string{"=", ">", ":=", "::=", ":::=", "||", ":", "=>", "?=", ","}

// foldRunes are the UTF-8 of U+017F and U+212A.
var foldRunes = []string{"\u017f", "\u212a"}

// valueGate is what the catch-all rule asks of a value before it is a
// finding: the value is the whole run of value bytes from where it starts
// (what ends a value is none of a value's bytes), so where it may start
// tells what it is.
type valueGate struct {
	distinct int     // minDistinct(entropy): a first look
	entropy  float64 // a value is above it (the rule's entropy)
	// letters: the rule allows a value of letters and "_.-" alone (its
	// allowlist ^[a-zA-Z_.-]+$: identifiers, target.URL.Host).
	letters bool
}

// mayHoldValue reports whether the window text[w[0]:w[1]] of a name
// ending at ke may hold a finding of the generic rule: the name followed,
// as the expression allows, by a value g lets through.
func mayHoldValue(text string, w [2]int, ke int, g *valueGate) bool {
	win := text[w[0]:w[1]]
	for _, r := range foldRunes {
		if strings.Contains(win, r) {
			return true
		}
	}
	return valueAfter(win, ke-w[0], g)
}

// valueAfter reports whether a value g lets through may start after the
// name ending at ke in text: every way through the expression's
// [ \t\w.-]{0,20}, [\s'"]{0,3}, operator and [\x60'"\s=]{0,5}.
func valueAfter(text string, ke int, g *valueGate) bool {
	// Each set is the offsets from ke reached so far (at most 32).
	names := span(text, ke, 1, nameGap, 20)
	quotes := span(text, ke, names, quoteGap, 3)
	ops := uint64(0)
	for o := range offsets(quotes) {
		for _, op := range operators {
			if strings.HasPrefix(text[min(ke+o, len(text)):], op) {
				ops |= 1 << (o + len(op))
			}
		}
	}
	starts := span(text, ke, ops, valueGap, 5)
	for o := range offsets(starts) {
		if g.lets(text[min(ke+o, len(text)):]) {
			return true
		}
	}
	return false
}

// span is the set of offsets from base reached from those in from by up
// to n bytes of class (from's included).
func span(text string, base int, from uint64, class [256]bool, n int) uint64 {
	out := from
	for o := range offsets(from) {
		for k, i := 0, base+o; k < n && i < len(text) && class[text[i]]; k, i = k+1, i+1 {
			out |= 1 << (o + k + 1)
		}
	}
	return out
}

// offsets yields the offsets in a set.
func offsets(set uint64) func(func(int) bool) {
	return func(yield func(int) bool) {
		for o := 0; o < 64; o++ {
			if set&(1<<o) != 0 && !yield(o) {
				return
			}
		}
	}
}

// lets reports whether the value text starts with may be a finding: its
// run of value bytes is 10 bytes or more, is followed by what ends a value
// ([\x60'"\s;], \n or \r escaped (\N, \R), or the end of the text), holds enough
// distinct bytes, is above the entropy, and is not of letters and "_.-"
// alone when the rule allows those.
func (g *valueGate) lets(text string) bool {
	var seen [256]bool
	n, i, other := 0, 0, false
	for ; i < len(text) && valueRun[text[i]]; i++ {
		c := text[i]
		if !seen[c] {
			seen[c] = true
			n++
			other = other || !identByte(c)
		}
	}
	if i < 10 || n < g.distinct || g.letters && !other {
		return false
	}
	if i < len(text) && !valueEnd[text[i]] && !escapedBreak(text[i:]) {
		return false
	}
	return entropy(text[:i]) > g.entropy
}

// escapedBreak reports text starting with \n or \r escaped, as the
// expression's \\[nr] matches them under (?i): \N and \R too.
func escapedBreak(text string) bool {
	return len(text) >= 2 && text[0] == '\\' && (text[1]|0x20 == 'n' || text[1]|0x20 == 'r')
}

// identByte reports the bytes of the allowlist ^[a-zA-Z_.-]+$.
func identByte(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || c == '_' || c == '.' || c == '-'
}

// lettersAllowed is the allowlist that lets a value of letters and "_.-"
// alone be.
const lettersAllowed = `^[a-zA-Z_.-]+$`

// allowsLetters reports whether lists let every value of letters and
// "_.-" alone be: one of them, of the value itself, has that expression
// and needs nothing else.
func allowsLetters(lists []allowlist) bool {
	for _, a := range lists {
		if a.target != "" || a.and && a.stopwords.n > 0 {
			continue
		}
		for _, re := range a.regexes {
			if re.String() == lettersAllowed {
				return true
			}
		}
	}
	return false
}
