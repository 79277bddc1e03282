package markdown

import (
	"regexp"
	"strings"
)

// Pinned memory: what a person marks is never moved or rewritten by a
// compaction, offline or by an LLM. A line is pinned when it ends with
// <!-- pin --> (and so is every line of the block it is in: a pinned line
// of a code block, a table or a list item keeps its whole block), or when
// it is in a section whose heading starts with "Pinned" (## Pinned,
// ### Pinned rules; the heading too, and the sections under it). A
// heading that only mentions the word (## Not pinned, ## pinned lower)
// pins nothing.

var (
	pinMark       = regexp.MustCompile(`(?i)<!--\s*pin\s*-->\s*$`)
	pinnedHeading = regexp.MustCompile(`^Pinned(\W|$)`)
)

// PinMarked reports whether a line ends with <!-- pin -->.
func PinMarked(line string) bool { return pinMark.MatchString(strings.TrimSpace(line)) }

// PinnedHeading reports whether a heading's text pins its section.
func PinnedHeading(text string) bool { return pinnedHeading.MatchString(strings.TrimSpace(text)) }

// PinnedLines marks the pinned lines of lines (Lines), read as Blocks
// reads them: no heading inside a code block counts.
func PinnedLines(lines []string) []bool {
	pinned := make([]bool, len(lines))
	var stack []struct {
		level  int
		pinned bool
	}
	for _, b := range Blocks(lines) {
		if b.Kind == BlockHeading {
			for len(stack) > 0 && stack[len(stack)-1].level >= b.Level {
				stack = stack[:len(stack)-1]
			}
			p := PinnedHeading(b.Text) || len(stack) > 0 && stack[len(stack)-1].pinned
			stack = append(stack, struct {
				level  int
				pinned bool
			}{b.Level, p})
		}
		in := len(stack) > 0 && stack[len(stack)-1].pinned
		if !in && b.Content() {
			for _, l := range lines[b.Start:b.End] {
				if PinMarked(l) {
					in = true
					break
				}
			}
		}
		for i := b.Start; i < b.End; i++ {
			pinned[i] = in && !blank(lines[i])
		}
	}
	return pinned
}

// Pinned lists the pinned lines of src, trimmed, in order.
func Pinned(src []byte) []string {
	lines := Lines(src)
	var out []string
	for i, p := range PinnedLines(lines) {
		if p {
			out = append(out, strings.TrimSpace(lines[i]))
		}
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
