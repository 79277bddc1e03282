package markdown

import (
	"regexp"
	"strings"
)

// Pinned memory: what a person marks is never moved or rewritten by a
// compaction, offline or by an LLM. A line is pinned when it ends with
// <!-- pin --> or is in a section whose heading says "pinned" (any level,
// any case; the heading too).

var (
	pinMark       = regexp.MustCompile(`(?i)<!--\s*pin\s*-->\s*$`)
	pinnedHeading = regexp.MustCompile(`(?i)\bpinned\b`)
)

// PinMarked reports whether a line ends with <!-- pin -->.
func PinMarked(line string) bool { return pinMark.MatchString(strings.TrimSpace(line)) }

// PinnedHeading reports whether a heading's text pins its section.
func PinnedHeading(text string) bool { return pinnedHeading.MatchString(text) }

// Pinned lists the pinned lines of src, trimmed, in order (fenced code
// blocks are read as Parse reads them: no heading inside them counts).
func Pinned(src []byte) []string {
	d := Parse(src)
	var out []string
	inPinned := func(off int) bool {
		for _, h := range d.Headings {
			if off >= h.Start && off < h.End && PinnedHeading(h.Text) {
				return true
			}
		}
		return false
	}
	off := 0
	for _, l := range strings.SplitAfter(string(src), "\n") {
		if t := strings.TrimSpace(l); t != "" && (PinMarked(t) || inPinned(off)) {
			out = append(out, t)
		}
		off += len(l)
	}
	return out
}

// MissingPinned returns the first pinned line of old that next lacks,
// verbatim ("" when next keeps them all).
func MissingPinned(old, next []byte) string {
	have := map[string]bool{}
	for _, l := range strings.Split(string(next), "\n") {
		have[strings.TrimSpace(l)] = true
	}
	for _, p := range Pinned(old) {
		if !have[p] {
			return p
		}
	}
	return ""
}
