package secrets

import (
	"regexp"
	"regexp/syntax"
	"slices"
	"strings"
	"unicode/utf8"
)

// A rule whose every match holds one of its keywords and is at most a
// few KiB long is run on the text around each keyword first (a window
// as long as the longest match on either side): a line of source code
// holding "s." (a Vault token's keyword) in every other word costs a few
// short matches, not the rule's expression over the whole line. Only
// when a window matches is the rule run on the whole text, so the
// findings are exactly those of the whole text: a match of the text lies
// within the window of its keyword and matches there too.

// maxWindowed bounds the longest match of a windowed rule, in characters.
const maxWindowed = 1024

// windowable returns the longest match of a rule's expression (in
// characters), whether every match holds one of its keywords (lowercase),
// so that the rule may be windowed, and whether every match starts with
// one (its window then starts at the keyword).
func windowable(expr string, keywords []string) (n int, ok, prefix bool) {
	re, err := syntax.Parse(expr, syntax.Perl)
	if err != nil {
		return 0, false, false
	}
	re = re.Simplify()
	n, bounded := longest(re)
	if !bounded || n > maxWindowed {
		n = 0
	}
	if startsWithKeyword(re, keywords) {
		return n, true, true // matched from the keyword on, over its longest match when bounded
	}
	if n == 0 || !holdsKeyword(re, keywords) {
		return 0, false, false
	}
	return n, true, false
}

// fromKeyword is the text a rule whose matches start with a keyword is
// matched in, from the keyword at start: its longest match when that is
// bounded, else the rest of the text.
func (r *rule) fromKeyword(text string, start int) string {
	if r.longest == 0 {
		return text[start:]
	}
	return text[start:forward(text, start, r.longest)]
}

// forward is the offset n characters after at in text (or its end).
func forward(text string, at, n int) int {
	for ; at < len(text) && n > 0; n-- {
		_, size := utf8.DecodeRuneInString(text[at:])
		at += size
	}
	return at
}

// windowAround is the text a windowed rule is first run on, around a
// keyword at [start, end): the rule's longest match on either side, in
// characters. (A rule whose matches start with a keyword is instead
// matched from the keyword on: see prefixMatch.)
func (r *rule) windowAround(text string, start, end int) [2]int {
	a := start
	for n := 0; a > 0 && n < r.longest; n++ {
		_, size := utf8.DecodeLastRuneInString(text[:a])
		a -= size
	}
	return [2]int{a, forward(text, end, r.longest)}
}

// anchoredOf compiles a rule's expression to match only from the start
// of a text: where a keyword is, for a rule whose matches start with one.
// A \b before the keyword then holds at the start whatever came before:
// a false start, which the run over the whole text then rules out.
func anchoredOf(expr string) (*regexp.Regexp, error) { return regexp.Compile(`^(?:` + expr + `)`) }

// startsWithKeyword reports whether every match of re starts with one of
// keywords (after what matches no character: \b, ^), as the prefilter
// finds them: A(?:KIA|SIA|3T[A-Z0-9]) starts with akia, asia or a3t.
func startsWithKeyword(re *syntax.Regexp, keywords []string) bool {
	ss, _, ok := starts(re)
	if !ok {
		return false
	}
	for _, s := range ss {
		found := false
		for _, k := range keywords {
			if strings.HasPrefix(s, k) {
				found = true
				break
			}
		}
		if !found {
			return false
		}
	}
	return len(ss) > 0
}

// maxStarts bounds the beginnings starts works out.
const maxStarts = 64

// starts returns the texts (lowercase) one of which every match of re
// begins with; exact says a match is one of them whole (a literal, or
// alternatives of literals), so that what follows it extends them. ok is
// false past maxStarts of them.
func starts(re *syntax.Regexp) (out []string, exact, ok bool) {
	switch re.Op {
	case syntax.OpLiteral:
		return []string{lower(string(re.Rune))}, true, true
	case syntax.OpCapture:
		return starts(re.Sub[0])
	case syntax.OpEmptyMatch, syntax.OpBeginLine, syntax.OpBeginText, syntax.OpWordBoundary, syntax.OpNoWordBoundary:
		return []string{""}, true, true
	case syntax.OpConcat:
		acc := []string{""}
		for _, sub := range re.Sub {
			ss, ex, ok := starts(sub)
			if ok {
				acc, ok = cross(acc, ss, maxStarts)
			}
			if !ok {
				return nil, false, false
			}
			if !ex {
				return acc, false, true
			}
		}
		return acc, true, true
	case syntax.OpAlternate:
		var all []string
		exact := true
		for _, sub := range re.Sub {
			ss, ex, ok := starts(sub)
			if !ok {
				return nil, false, false
			}
			all = append(all, ss...)
			exact = exact && ex
		}
		if len(all) > maxStarts {
			return nil, false, false
		}
		return all, exact, true
	case syntax.OpPlus:
		ss, _, ok := starts(re.Sub[0])
		return ss, false, ok
	case syntax.OpRepeat:
		if re.Min >= 1 {
			ss, _, ok := starts(re.Sub[0])
			return ss, false, ok
		}
	}
	return []string{""}, false, true
}

// longest is the longest match of re in characters; ok is false when it
// is unbounded.
func longest(re *syntax.Regexp) (int, bool) {
	switch re.Op {
	case syntax.OpNoMatch, syntax.OpEmptyMatch, syntax.OpBeginLine, syntax.OpEndLine,
		syntax.OpBeginText, syntax.OpEndText, syntax.OpWordBoundary, syntax.OpNoWordBoundary:
		return 0, true
	case syntax.OpLiteral:
		return len(re.Rune), true
	case syntax.OpCharClass, syntax.OpAnyChar, syntax.OpAnyCharNotNL:
		return 1, true
	case syntax.OpCapture, syntax.OpQuest:
		return longest(re.Sub[0])
	case syntax.OpRepeat:
		if re.Max < 0 {
			return 0, false
		}
		n, ok := longest(re.Sub[0])
		return n * re.Max, ok
	case syntax.OpConcat:
		total := 0
		for _, s := range re.Sub {
			n, ok := longest(s)
			if !ok {
				return 0, false
			}
			total += n
		}
		return total, true
	case syntax.OpAlternate:
		most := 0
		for _, s := range re.Sub {
			n, ok := longest(s)
			if !ok {
				return 0, false
			}
			most = max(most, n)
		}
		return most, true
	}
	return 0, false // *, + and anything else: unbounded
}

// holdsKeyword reports whether every match of re holds one of keywords,
// as the prefilter finds them (in the text lowercased).
func holdsKeyword(re *syntax.Regexp, keywords []string) bool {
	switch re.Op {
	case syntax.OpLiteral:
		return hasKeyword(string(re.Rune), keywords)
	case syntax.OpCapture, syntax.OpPlus:
		return holdsKeyword(re.Sub[0], keywords)
	case syntax.OpRepeat:
		return re.Min >= 1 && holdsKeyword(re.Sub[0], keywords)
	case syntax.OpConcat:
		// Consecutive literals are one run of text: "s" then "." holds "s.".
		run := ""
		for _, s := range re.Sub {
			if s.Op == syntax.OpLiteral {
				run += string(s.Rune)
				if hasKeyword(run, keywords) {
					return true
				}
				continue
			}
			run = ""
			if holdsKeyword(s, keywords) {
				return true
			}
		}
		return false
	case syntax.OpAlternate:
		for _, s := range re.Sub {
			if !holdsKeyword(s, keywords) {
				return false
			}
		}
		return len(re.Sub) > 0
	}
	return false
}

func hasKeyword(lit string, keywords []string) bool {
	l := lower(lit)
	for _, k := range keywords {
		if strings.Contains(l, k) {
			return true
		}
	}
	return false
}

// maxNeeds bounds the texts of one set needs works out.
const maxNeeds = 32

// needs returns sets of texts of which every match of re holds one of
// each (case as written): the runs of what re's top level matches exactly,
// a literal or a choice among a few (curl's [ \t\n\r](?:-u|--user)). A
// rule that matches from its keyword over the rest of a line (curl's .*)
// is read by the expression only where the line holds them.
func needs(re *syntax.Regexp) [][]string {
	for re.Op == syntax.OpCapture {
		re = re.Sub[0]
	}
	if re.Op != syntax.OpConcat {
		return nil
	}
	var out [][]string
	var run []string // the exact texts of the run so far, nil: none
	end := func() {
		if len(run) > 0 && slices.IndexFunc(run, func(s string) bool { return len(s) < 2 }) < 0 {
			out = append(out, run)
		}
		run = nil
	}
	for _, sub := range re.Sub {
		ex := exactly(sub)
		if ex == nil {
			end()
			continue
		}
		if run == nil {
			run = ex
			continue
		}
		next, ok := cross(run, ex, maxNeeds)
		if !ok {
			end()
			next = ex
		}
		run = next
	}
	end()
	return out
}

// exactly returns the texts re matches, when they are few and re matches
// nothing else (no case folding): nil otherwise.
func exactly(re *syntax.Regexp) []string {
	switch re.Op {
	case syntax.OpLiteral:
		if re.Flags&syntax.FoldCase != 0 {
			return nil
		}
		return []string{string(re.Rune)}
	case syntax.OpCapture:
		return exactly(re.Sub[0])
	case syntax.OpEmptyMatch, syntax.OpBeginLine, syntax.OpBeginText, syntax.OpWordBoundary, syntax.OpNoWordBoundary:
		return []string{""}
	case syntax.OpCharClass:
		var out []string
		for i := 0; i+1 < len(re.Rune); i += 2 {
			for r := re.Rune[i]; r <= re.Rune[i+1]; r++ {
				if len(out) == 8 {
					return nil
				}
				out = append(out, string(r))
			}
		}
		return out
	case syntax.OpAlternate:
		var out []string
		for _, sub := range re.Sub {
			ex := exactly(sub)
			if ex == nil || len(out)+len(ex) > maxNeeds {
				return nil
			}
			out = append(out, ex...)
		}
		return out
	case syntax.OpConcat:
		out := []string{""}
		for _, sub := range re.Sub {
			ex := exactly(sub)
			if ex == nil {
				return nil
			}
			var ok bool
			if out, ok = cross(out, ex, maxNeeds); !ok {
				return nil
			}
		}
		return out
	}
	return nil
}

// cross is every text of a followed by one of b; false past max of them.
func cross(a, b []string, max int) ([]string, bool) {
	if len(a)*len(b) > max {
		return nil, false
	}
	out := make([]string, 0, len(a)*len(b))
	for _, x := range a {
		for _, y := range b {
			out = append(out, x+y)
		}
	}
	return out, true
}

// holdsNeeds reports whether text holds one of each set of needs.
func holdsNeeds(text string, needs [][]string) bool {
	for _, set := range needs {
		if !slices.ContainsFunc(set, func(s string) bool { return strings.Contains(text, s) }) {
			return false
		}
	}
	return true
}

// startsBounded reports whether every match of re starts with \b.
func startsBounded(re *syntax.Regexp) bool {
	for {
		switch re.Op {
		case syntax.OpWordBoundary:
			return true
		case syntax.OpCapture:
			re = re.Sub[0]
		case syntax.OpConcat:
			if len(re.Sub) == 0 {
				return false
			}
			re = re.Sub[0]
		default:
			return false
		}
	}
}

// isWordByte reports an ASCII word byte, as \b reads them.
func isWordByte(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '_'
}
