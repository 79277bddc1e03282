package memoryhistory

import (
	"fmt"
	"regexp"
	"strings"

	"github.com/memwatch/memwatch/markdown"
	"github.com/memwatch/memwatch/rewrite"
)

// Pinned memory: what a person marks is never moved or rewritten by a
// compression, offline or by an LLM: a line that ends with <!-- pin -->,
// and every line of a section whose heading says "pinned" (any level,
// any case), heading included. Pinned lines count toward the limits; when
// they alone are over them, the compression says so and leaves them.
//
// What the offline compression moves out first, when nothing is pinned
// there too (the order a person would choose, not the file's order):
//
//  1. dated or episodic entries: a line holding a date (2026-01-15,
//     [2026-01-15 10:00]), and the lines of a section whose heading is a
//     date or names a log (history, log, sessions, notes, recent,
//     episodes, changelog, journal);
//  2. the other facts;
//  3. last, the file's rules: the lines of a section whose heading names
//     them (rules, conventions, guidelines, policies, preferences,
//     instructions, constraints), and lines that state one (Never,
//     Always, Do not, Don't, Must).
//
// Within each, the oldest (nearest the top) first.

var (
	datedLine      = regexp.MustCompile(`\b(19|20)\d\d-[01]\d-[0-3]\d\b`)
	episodicHeader = regexp.MustCompile(`(?i)(^|\W)(history|log|logs|sessions?|notes|recent|episodes?|changelog|journal|done|progress)(\W|$)|\b(19|20)\d\d-[01]\d`)
	rulesHeader    = regexp.MustCompile(`(?i)(^|\W)(rules?|conventions?|guidelines?|polic(y|ies)|preferences?|instructions?|constraints?|principles?|standards?)(\W|$)`)
	ruleLine       = regexp.MustCompile(`(?i)^[-*]?\s*(\*\*)?(never|always|do not|don't|must|must not)\b`)
)

// heading returns a markdown heading's level and text (0 for no heading).
func heading(line string) (int, string) {
	t := strings.TrimSpace(line)
	n := 0
	for n < len(t) && t[n] == '#' {
		n++
	}
	if n == 0 || n > 6 || n < len(t) && t[n] != ' ' {
		return 0, ""
	}
	return n, strings.TrimSpace(t[n:])
}

// lineKind is what a MEMORY.md line is to a compression.
type lineKind int

const (
	kindStructure lineKind = iota // a heading or a blank line
	kindPinned
	kindDated // moved out first
	kindFact
	kindRule // moved out last
)

// classify gives each line of src (split after "\n") its kind.
func classify(lines []string) []lineKind {
	kinds := make([]lineKind, len(lines))
	type section struct {
		level                  int
		pinned, episodic, rule bool
	}
	var stack []section
	for i, l := range lines {
		if lvl, text := heading(l); lvl > 0 {
			for len(stack) > 0 && stack[len(stack)-1].level >= lvl {
				stack = stack[:len(stack)-1]
			}
			s := section{level: lvl, pinned: markdown.PinnedHeading(text), episodic: episodicHeader.MatchString(text), rule: rulesHeader.MatchString(text)}
			if len(stack) > 0 {
				p := stack[len(stack)-1]
				s.pinned = s.pinned || p.pinned
				s.episodic = s.episodic || p.episodic && !s.rule
				s.rule = s.rule || p.rule && !s.episodic
			}
			stack = append(stack, s)
			kinds[i] = kindStructure
			if s.pinned {
				kinds[i] = kindPinned
			}
			continue
		}
		t := strings.TrimSpace(l)
		var in section
		if len(stack) > 0 {
			in = stack[len(stack)-1]
		}
		switch {
		case t == "":
			kinds[i] = kindStructure
		case in.pinned || markdown.PinMarked(t):
			kinds[i] = kindPinned
		case in.rule || ruleLine.MatchString(t):
			kinds[i] = kindRule
		case in.episodic || datedLine.MatchString(t):
			kinds[i] = kindDated
		default:
			kinds[i] = kindFact
		}
	}
	return kinds
}

// guardPinned rejects a new MEMORY.md that lacks a pinned line of old,
// verbatim.
func guardPinned(old, next []byte) error {
	if p := markdown.MissingPinned(old, next); p != "" {
		return &rewrite.Rejected{Reason: fmt.Sprintf("the pinned line %q is missing or changed", clip(p))}
	}
	return nil
}

// pruned says what a compression moved out, for its record.
type pruneReport struct {
	dated, facts, rules, pinned int
	pinnedOver                  bool // the pinned lines alone are over the limits
}

func (p pruneReport) String() string {
	var parts []string
	for _, c := range []struct {
		n    int
		what string
	}{{p.dated, "dated or episodic entries"}, {p.facts, "other facts"}, {p.rules, "rules"}} {
		if c.n > 0 {
			parts = append(parts, fmt.Sprintf("%d %s", c.n, c.what))
		}
	}
	s := "moved out, dated entries first, rules last: " + strings.Join(parts, ", ")
	if len(parts) == 0 {
		s = "nothing moved out"
	}
	if p.pinned > 0 {
		s += fmt.Sprintf("; %d pinned line(s) kept", p.pinned)
	}
	if p.pinnedOver {
		s += " (the pinned lines alone are over the limits: they stay)"
	}
	return s
}

// Prune moves facts out of a MEMORY.md over limit bytes or maxLines lines
// (0: no line limit), in the order above, never a pinned line; headings
// stay, and sections left empty go.
func Prune(src []byte, limit int64, maxLines int) ([]byte, pruneReport) {
	var rep pruneReport
	over := func(size int64, n int) bool { return limit > 0 && size > limit || maxLines > 0 && n > maxLines }
	lines := strings.SplitAfter(string(src), "\n")
	kinds := classify(lines)
	for _, k := range kinds {
		if k == kindPinned {
			rep.pinned++
		}
	}
	size, n := int64(len(src)), lineCount(src)
	for _, want := range []lineKind{kindDated, kindFact, kindRule} {
		for i, l := range lines {
			if !over(size, n) {
				break
			}
			if kinds[i] != want || lines[i] == "" {
				continue
			}
			size -= int64(len(l))
			n--
			lines[i] = ""
			switch want {
			case kindDated:
				rep.dated++
			case kindFact:
				rep.facts++
			case kindRule:
				rep.rules++
			}
		}
	}
	out := CompressHeuristic([]byte(strings.Join(lines, "")))
	rep.pinnedOver = over(int64(len(out)), lineCount(out))
	return out, rep
}
