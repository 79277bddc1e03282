// Package query is recall's query language for words and phrases: a
// query parsed once (ParseQuery) into what a line must hold (folded terms,
// the raw runs a log's line holds them as, its trigrams, the byte searched
// for first), and how a line's text is matched and cut into a snippet.
package query

import (
	"bytes"
	"errors"
	"strings"
	"unicode/utf8"

	"github.com/memwatch/memwatch/secrets"
)

// Query is a parsed recall query: every term must appear in a line,
// case-insensitively; a query in double quotes is one exact phrase.
type Query struct {
	Text   string
	Phrase bool     // in double quotes
	Terms  [][]byte // folded (lowercase)
	// Runs are, per term, its runs of bytes that a log's raw line holds
	// as typed (rawRuns).
	Runs [][][]byte
	// Anchor is the longest of the runs: candidate lines are found by it,
	// so misses cost no per-line work.
	Anchor []byte
	// Rare is the offset in anchor of the byte searched for; the searcher
	// picks it from the bytes of the files searched (rareFor).
	Rare int
	// Grams are the trigram hashes every matching line's text must hold.
	Grams []uint32
	// Kind is the kind of credential the query names (recall then
	// searches its keywords: searchKind); Only, a kind a line must hold a
	// credential of to match (one keyword's search of searchKind).
	Kind, Only string
}

// Ranked reports whether q is answered by relevance (recall's ranked
// path): more than one word, not quoted.
func (q Query) Ranked() bool {
	return !q.Phrase && len(q.Terms) > 1
}

// ErrEmptyQuery is returned for a query with no term.
var ErrEmptyQuery = errors.New("recall: empty query")

// MaxQuery bounds a query's length.
const MaxQuery = 1024

// ParseQuery parses a recall query.
func ParseQuery(q string) (Query, error) {
	q = strings.TrimSpace(strings.ToValidUTF8(q, ""))
	if len(q) > MaxQuery {
		return Query{}, errors.New("recall: the query is longer than 1024 bytes")
	}
	out := Query{Text: q, Kind: secrets.Default().KindOf(strings.Trim(q, `"`))}
	if len(q) >= 2 && strings.HasPrefix(q, `"`) && strings.HasSuffix(q, `"`) {
		out.Terms = [][]byte{Fold([]byte(q[1 : len(q)-1]))}
		out.Phrase = true
	} else {
		for _, f := range strings.Fields(q) {
			out.Terms = append(out.Terms, Fold([]byte(f)))
		}
	}
	if len(out.Terms) == 0 || len(out.Terms[0]) == 0 {
		return out, ErrEmptyQuery
	}
	seen := map[uint32]bool{}
	for _, t := range out.Terms {
		runs := rawRuns(t)
		out.Runs = append(out.Runs, runs)
		for _, run := range runs {
			if len(run) > len(out.Anchor) {
				out.Anchor = run
			}
		}
		out.Rare = rarest(out.Anchor)
		EachGram(t, func(g uint32) {
			if !seen[g] {
				seen[g] = true
				out.Grams = append(out.Grams, g)
			}
		})
	}
	return out, nil
}

// Fold lowercases text the way both the matcher and the index do: ASCII
// bytes directly, anything else with Unicode lowercasing.
func Fold(b []byte) []byte {
	if IsASCII(b) {
		out := make([]byte, len(b))
		for i, c := range b {
			if c >= 'A' && c <= 'Z' {
				c += 32
			}
			out[i] = c
		}
		return out
	}
	return bytes.ToLower(b)
}

// EachGram calls fn with the hash of every trigram (3 bytes) of folded text.
func EachGram(b []byte, fn func(uint32)) {
	for i := 0; i+3 <= len(b); i++ {
		fn(Gram(b[i], b[i+1], b[i+2]))
	}
}

func Gram(a, b, c byte) uint32 { return uint32(a)<<16 | uint32(b)<<8 | uint32(c) }

// jsonSafe reports a byte that JSON writers never escape: printable ASCII
// but the quote, the backslash, and what some escape for HTML or by
// choice (/, <, >, &). Python's ensure_ascii escapes everything else.
func jsonSafe(c byte) bool {
	return c >= 0x20 && c < 0x7f && c != '"' && c != '\\' && c != '/' && c != '<' && c != '>' && c != '&'
}

// decorations are what a log's searched text holds that its raw line does
// not (recall.searchTextID, session.Decode): the role label in front, the marks of
// tool calls and results.
var decorations = []string{"[tool result]", "[tool:", "]", "user:", "assistant:", "tool:", "system:", "developer:", "meta:", "raw:"}

// rawRuns splits a folded term into the runs of bytes a raw line must hold
// for a log's message to match it: its runs of jsonSafe bytes (JSON
// writers never escape them), with the text memwatch adds when it
// decodes a message (decorations) taken out. A "[tool result] (no output)"
// is found by "(no output)". The runs only pick candidate lines: the
// decoded text decides.
func rawRuns(t []byte) [][]byte {
	s := string(t)
	for _, d := range decorations {
		s = strings.ReplaceAll(s, d, "\"")
	}
	// The spaces next to a decoration are memwatch's too.
	var out [][]byte
	for _, r := range asciiRuns([]byte(s)) {
		if r = bytes.Trim(r, " "); len(r) > 0 {
			out = append(out, r)
		}
	}
	return out
}

// asciiRuns splits folded text into its runs of jsonSafe bytes.
func asciiRuns(b []byte) [][]byte {
	var out [][]byte
	start := -1
	for i := 0; i <= len(b); i++ {
		alnum := i < len(b) && jsonSafe(b[i])
		switch {
		case alnum && start < 0:
			start = i
		case !alnum && start >= 0:
			out = append(out, b[start:i])
			start = -1
		}
	}
	return out
}

// matches reports whether every term is in text, case-insensitively, and
// where the first term is.
func (q Query) Matches(text []byte) (int, bool) {
	var folded []byte // for non-ASCII terms, computed once
	at := -1
	for i, t := range q.Terms {
		var j int
		if IsASCII(t) {
			j = indexFold(text, t)
		} else {
			if folded == nil {
				folded = bytes.ToLower(text)
			}
			j = bytes.Index(folded, t)
		}
		if j < 0 {
			return -1, false
		}
		if i == 0 {
			at = j
		}
	}
	return at, true
}

// rawCandidate is the cheap test on a log's raw line before decoding: the
// ASCII runs of every term must be there (they survive JSON escaping).
func (q Query) RawCandidate(raw []byte) bool {
	for _, runs := range q.Runs {
		for _, run := range runs {
			if indexFold(raw, run) < 0 {
				return false
			}
		}
	}
	return true
}

// indexFold finds sub (lowercase ASCII) in s ignoring case. It searches,
// with vectorised byte scans, for the needle's rarest byte in both cases
// and verifies the needle around each hit.
func indexFold(s, sub []byte) int {
	if len(sub) == 0 {
		return 0
	}
	return IndexFoldAt(s, sub, rarest(sub))
}

// IndexFoldAt is indexFold searching for the byte of sub at off.
func IndexFoldAt(s, sub []byte, off int) int {
	lo := sub[off]
	up := lo
	if lo >= 'a' && lo <= 'z' {
		up = lo - 32
	}
	nl, nu := -2, -2 // next positions of lo and up at or after i; -2 unknown, -1 none
	for i := off; i < len(s); {
		if nl != -1 && nl < i {
			if nl = bytes.IndexByte(s[i:], lo); nl >= 0 {
				nl += i
			}
		}
		if up == lo {
			nu = nl
		} else if nu != -1 && nu < i {
			if nu = bytes.IndexByte(s[i:], up); nu >= 0 {
				nu += i
			}
		}
		j := nl
		if j < 0 || nu >= 0 && nu < j {
			j = nu
		}
		if j < 0 {
			return -1
		}
		start := j - off
		if start+len(sub) > len(s) {
			return -1
		}
		if equalFoldASCII(s[start:start+len(sub)], sub) {
			return start
		}
		i = j + 1
	}
	return -1
}

// byteFreq approximates how often a byte (either case, for letters) occurs
// in English text and JSON logs; lower is rarer. 't' and 'z' count extra
// because every ISO timestamp has them.
func byteFreq(c byte) float64 {
	const letters = "etaoinshrdlcumwfgypbvkjxqz"
	freqs := [...]float64{12.7, 9.1, 8.2, 7.5, 7.0, 6.7, 6.3, 6.1, 6.0, 4.3, 4.0, 2.8, 2.8, 2.4, 2.4, 2.2, 2.0, 2.0, 1.9, 1.5, 1.0, 0.8, 0.15, 0.15, 0.1, 0.07}
	switch {
	case c >= 'a' && c <= 'z':
		f := freqs[strings.IndexByte(letters, c)] * 1.1 // plus the capital
		if c == 't' || c == 'z' {
			f += 5
		}
		return f
	case c >= '0' && c <= '9':
		return 4
	case c == ' ':
		return 15
	case c == '"' || c == ':' || c == ',':
		return 8
	}
	return 2
}

// RareFor is the offset of the needle byte that costs least to search for
// in data like sample: each occurrence costs a verification and a restart
// of the vectorised scan (about 50 ns), each pass of the scan about as
// much as 70 occurrences in 64 KiB; a letter takes two passes (both cases).
// Chosen from the files' own bytes, the choice holds on any corpus shape:
// a byte rare in English prose can be on every line of a JSON log.
func RareFor(sub, sample []byte) int {
	if len(sample) < 4096 {
		return rarest(sub)
	}
	var counts [256]int
	for _, c := range sample {
		counts[c]++
	}
	perPass := 72 * len(sample) / (64 << 10)
	best, bestCost := 0, -1
	for i, c := range sub {
		cost := counts[c] + perPass
		if c >= 'a' && c <= 'z' {
			cost += counts[c-32] + perPass
		}
		if bestCost < 0 || cost < bestCost {
			best, bestCost = i, cost
		}
	}
	return best
}

// rarest is the offset of the needle byte least likely to occur.
func rarest(sub []byte) int {
	best := 0
	for i := range sub {
		if byteFreq(sub[i]) < byteFreq(sub[best]) {
			best = i
		}
	}
	return best
}

func IsASCII(b []byte) bool {
	for _, c := range b {
		if c >= utf8.RuneSelf {
			return false
		}
	}
	return true
}

func equalFoldASCII(a, lower []byte) bool {
	for i, c := range a {
		if c >= 'A' && c <= 'Z' {
			c += 32
		}
		if c != lower[i] {
			return false
		}
	}
	return true
}

// snippetLen is session-detail's snippet size.
const snippetLen = 300

// Snippet cuts text to snippetLen characters around byte offset at, on one
// line, its credentials masked (secrets): what recall gives of a line is
// never a value an agent's tool printed.
func Snippet(text []byte, at int) string {
	text, at = masked(text, at)
	s := strings.ToValidUTF8(string(text), "\uFFFD")
	s = strings.Join(strings.Fields(s), " ")
	r := []rune(s)
	if len(r) <= snippetLen {
		return s
	}
	// Find the match again in the normalised text to centre the window.
	pos := 0
	if at >= 0 && at < len(text) {
		needle := Fold(text[at:min(at+16, len(text))])
		needle = bytes.ToValidUTF8(bytes.Join(bytes.Fields(needle), []byte(" ")), nil)
		if i := bytes.Index(Fold([]byte(s)), needle); i >= 0 && len(needle) > 0 {
			pos = utf8.RuneCountInString(s[:i])
		}
	}
	start := max(0, min(pos-snippetLen/2, len(r)-snippetLen))
	return string(r[start : start+snippetLen])
}

// masked is text with its credentials masked, whole (before it is cut,
// so no part of a value is left at a snippet's edge), and where byte
// offset at lands in it.
func masked(text []byte, at int) ([]byte, int) {
	fs := secrets.Default().Find(string(text))
	if len(fs) == 0 {
		return text, at
	}
	out := make([]byte, 0, len(text))
	last, newAt := 0, -1
	for _, f := range fs {
		if newAt < 0 && at < f.Start {
			newAt = len(out) + at - last
		}
		out = append(out, text[last:f.Start]...)
		if newAt < 0 && at < f.End {
			newAt = len(out)
		}
		out = append(out, secrets.MaskOf(f.Rule)...)
		last = f.End
	}
	if newAt < 0 {
		newAt = len(out) + at - last
	}
	out = append(out, text[last:]...)
	return out, newAt
}
