// Package markdown finds the heading structure of agent-written markdown:
// ATX headings outside fenced code blocks, with their line numbers and the
// byte ranges of their sections. It never fails: any input has a structure,
// possibly empty.
package markdown

import (
	"bytes"
	"strings"
)

// Heading is one "#" heading and the section it starts.
type Heading struct {
	Level int    // 1 for "#", 2 for "##", ...
	Text  string // heading text without the #s, trimmed
	Line  int    // 1-based line number
	Start int    // byte offset of the heading line
	// End is the byte offset where the section ends: the next heading of the
	// same or a higher level, or the end of the document.
	End int
	// Lines counts the section's lines, the heading included.
	Lines int
}

// Title is the full heading line as written, e.g. "## State | ok".
func (h Heading) Title() string { return strings.Repeat("#", h.Level) + " " + h.Text }

// Doc is a parsed markdown document.
type Doc struct {
	Src      []byte
	Headings []Heading
	// LineStarts holds the byte offset of each line; len is the line count.
	LineStarts []int
	// OpenFence is true when the document ends inside a fenced code block:
	// anything appended would be code, not markdown.
	OpenFence bool
}

// Parse finds the headings of src. CRLF line endings are accepted.
func Parse(src []byte) *Doc {
	d := &Doc{Src: src}
	fence := ""
	for off, line := 0, 1; off < len(src); line++ {
		end := bytes.IndexByte(src[off:], '\n')
		next := len(src)
		if end >= 0 {
			next = off + end + 1
		}
		d.LineStarts = append(d.LineStarts, off)
		text := strings.TrimRight(string(src[off:next]), "\r\n")
		trimmed := strings.TrimLeft(text, " ")
		indent := len(text) - len(trimmed)
		switch {
		case fence != "":
			if indent < 4 && strings.HasPrefix(trimmed, fence) && strings.Trim(trimmed, fence[:1]) == "" {
				fence = ""
			}
		case indent < 4 && (strings.HasPrefix(trimmed, "```") || strings.HasPrefix(trimmed, "~~~")):
			c := trimmed[:1]
			n := len(trimmed) - len(strings.TrimLeft(trimmed, c))
			fence = strings.Repeat(c, n)
		case indent < 4 && strings.HasPrefix(trimmed, "#"):
			level := len(trimmed) - len(strings.TrimLeft(trimmed, "#"))
			rest := trimmed[level:]
			if level <= 6 && (rest == "" || rest[0] == ' ' || rest[0] == '\t') {
				d.Headings = append(d.Headings, Heading{Level: level, Text: strings.TrimSpace(strings.TrimRight(strings.TrimSpace(rest), "#")), Line: line, Start: off})
			}
		}
		off = next
	}
	d.OpenFence = fence != ""
	for i := range d.Headings {
		h := &d.Headings[i]
		h.End = len(src)
		for _, n := range d.Headings[i+1:] {
			if n.Level <= h.Level {
				h.End = n.Start
				break
			}
		}
		h.Lines = d.lineOf(h.End) - h.Line + 1
		if h.End < len(src) {
			h.Lines--
		}
	}
	return d
}

// lineOf returns the 1-based line number containing byte offset off.
func (d *Doc) lineOf(off int) int {
	lo, hi := 0, len(d.LineStarts)
	for lo < hi {
		mid := (lo + hi) / 2
		if d.LineStarts[mid] <= off {
			lo = mid + 1
		} else {
			hi = mid
		}
	}
	return lo
}

// Section returns the bytes of heading i's section.
func (d *Doc) Section(i int) []byte { return d.Src[d.Headings[i].Start:d.Headings[i].End] }

// Find returns the index of the first heading with that level whose text
// equals name case-insensitively, or -1.
func (d *Doc) Find(level int, name string) int {
	for i, h := range d.Headings {
		if h.Level == level && strings.EqualFold(h.Text, name) {
			return i
		}
	}
	return -1
}

// Children returns the indexes of the headings of level+1 directly under heading i.
func (d *Doc) Children(i int) []int {
	var out []int
	h := d.Headings[i]
	for j := i + 1; j < len(d.Headings) && d.Headings[j].Start < h.End; j++ {
		if d.Headings[j].Level == h.Level+1 {
			out = append(out, j)
		}
	}
	return out
}
