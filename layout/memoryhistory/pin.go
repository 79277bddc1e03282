package memoryhistory

import (
	"fmt"
	"regexp"
	"slices"
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

// lineKind is what a block of MEMORY.md is to a compression.
type lineKind int

const (
	kindStructure lineKind = iota // a heading, a blank line, a code block never closed
	kindPinned
	kindDated // moved out first
	kindFact
	kindRule // moved out last
)

// unit is a block of MEMORY.md (markdown.Blocks: a code block, a table, a
// list item with what is nested under it, a paragraph, a heading, a blank
// line) with what a compression makes of it: it goes or stays whole.
type unit struct {
	markdown.Block
	kind lineKind
	// path are the heading lines of the sections it is in, outermost first.
	path []string
	// text is the unit's lines (movedUnits fills it in).
	text string
}

// units splits lines (markdown.Lines) into units and gives each its kind.
func units(lines []string) []unit {
	pinned := markdown.PinnedLines(lines)
	type section struct {
		level          int
		line           string
		episodic, rule bool
	}
	var stack []section
	var out []unit
	for _, b := range markdown.Blocks(lines) {
		if b.Kind == markdown.BlockHeading {
			for len(stack) > 0 && stack[len(stack)-1].level >= b.Level {
				stack = stack[:len(stack)-1]
			}
			s := section{level: b.Level, line: strings.TrimRight(lines[b.Start], "\r\n"), episodic: episodicHeader.MatchString(b.Text), rule: rulesHeader.MatchString(b.Text)}
			if len(stack) > 0 {
				p := stack[len(stack)-1]
				s.episodic = s.episodic || p.episodic && !s.rule
				s.rule = s.rule || p.rule && !s.episodic
			}
			stack = append(stack, s)
		}
		u := unit{Block: b}
		for _, s := range stack {
			u.path = append(u.path, s.line)
		}
		if b.Kind == markdown.BlockHeading {
			u.path = u.path[:len(u.path)-1] // a heading is in its parents' sections
		}
		var in section
		if len(stack) > 0 {
			in = stack[len(stack)-1]
		}
		first := strings.TrimSpace(lines[b.Start])
		switch {
		case pinned[b.Start] || b.Content() && slices.Contains(pinned[b.Start:b.End], true):
			u.kind = kindPinned
		case !b.Content():
			u.kind = kindStructure
		case b.Kind == markdown.BlockFence && !markdown.FencesBalance([]byte(b.Lines(lines))):
			u.kind = kindStructure // a code block never closed: moving it would open one elsewhere
		case in.rule || b.Kind != markdown.BlockFence && ruleLine.MatchString(first):
			u.kind = kindRule
		case in.episodic || (b.Kind == markdown.BlockItem || b.Kind == markdown.BlockParagraph) && datedLine.MatchString(first):
			u.kind = kindDated
		default:
			u.kind = kindFact
		}
		out = append(out, u)
	}
	return out
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
// (0: no line limit), in the order above, a whole unit at a time (a code
// block, a table, a list item with its nested items, a paragraph), never
// a pinned one; a heading goes only when everything under it went.
// Duplicate items and paragraphs (the same text again) are dropped first.
func Prune(src []byte, limit int64, maxLines int) ([]byte, pruneReport) {
	var rep pruneReport
	over := func(size int64, n int) bool { return limit > 0 && size > limit || maxLines > 0 && n > maxLines }
	src = CompressHeuristic(src)
	lines := markdown.Lines(src)
	us := units(lines)
	gone := make([]bool, len(us))
	for _, u := range us {
		if u.kind == kindPinned {
			rep.pinned += u.End - u.Start
		}
	}
	size, n := int64(len(src)), lineCount(src)
	for _, want := range []lineKind{kindDated, kindFact, kindRule} {
		for i, u := range us {
			if !over(size, n) {
				break
			}
			if u.kind != want || gone[i] {
				continue
			}
			gone[i] = true
			size -= int64(len(u.Lines(lines)))
			n -= u.End - u.Start
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
	out := assemble(lines, us, gone)
	rep.pinnedOver = over(int64(len(out)), lineCount(out))
	return out, rep
}

// assemble is the document of the units not gone: a heading whose
// section held something and now holds nothing goes too, and the blank
// lines around what went do not pile up.
func assemble(lines []string, us []unit, gone []bool) []byte {
	// A heading stays while a unit under it (before the next heading of
	// its level or above) stays, or when nothing under it ever went.
	keep := make([]bool, len(us))
	for i, u := range us {
		keep[i] = !gone[i]
		if u.Kind != markdown.BlockHeading {
			continue
		}
		left, went := false, false
		for j := i + 1; j < len(us); j++ {
			if us[j].Kind == markdown.BlockHeading && us[j].Level <= u.Level {
				break
			}
			if us[j].Content() {
				left = left || !gone[j]
				went = went || gone[j]
			}
		}
		keep[i] = left || !went
	}
	var b strings.Builder
	lastBlank := true
	for i, u := range us {
		if !keep[i] {
			continue
		}
		if u.Kind == markdown.BlockBlank {
			if lastBlank {
				continue
			}
			lastBlank = true
		} else {
			lastBlank = false
		}
		b.WriteString(u.Lines(lines))
	}
	return []byte(b.String())
}

// moved are the units of old with a line next lacks (what a compression,
// offline or by an LLM, took out), each whole, with its sections'
// headings: what goes to the topic file, so that no line of old is in
// neither file.
func movedUnits(old, next []byte) []unit {
	have := map[string]bool{}
	for _, l := range markdown.Lines(next) {
		have[strings.TrimRight(l, "\r\n")] = true
	}
	lines := markdown.Lines(old)
	var out []unit
	for _, u := range units(lines) {
		if u.Kind == markdown.BlockBlank {
			continue
		}
		for _, l := range lines[u.Start:u.End] {
			if k := strings.TrimRight(l, "\r\n"); strings.TrimSpace(k) != "" && !have[k] {
				out = append(out, u)
				break
			}
		}
	}
	for i := range out {
		out[i].text = out[i].Lines(lines)
	}
	return out
}

// movedText is what the topic file gets of moved units: each unit whole,
// under the headings of its sections (each said once while it stays the
// same), a blank line between units that are not items of one list.
func movedText(moved []unit) string {
	var b strings.Builder
	var path []string
	prev := markdown.BlockBlank
	for _, u := range moved {
		heads := u.path
		if u.Kind == markdown.BlockHeading {
			heads = append(append([]string{}, u.path...), strings.TrimRight(u.text, "\r\n"))
		}
		common := 0
		for common < len(path) && common < len(heads) && path[common] == heads[common] {
			common++
		}
		for _, h := range heads[common:] {
			if b.Len() > 0 {
				b.WriteString("\n")
			}
			b.WriteString(h + "\n")
			prev = markdown.BlockHeading
		}
		path = heads
		if u.Kind == markdown.BlockHeading {
			continue
		}
		if prev != markdown.BlockHeading && !(prev == markdown.BlockItem && u.Kind == markdown.BlockItem) {
			b.WriteString("\n")
		}
		b.WriteString(strings.TrimRight(u.text, "\n") + "\n")
		prev = u.Kind
	}
	return b.String()
}
