package markdown

import (
	"regexp"
	"strings"
)

// The units of a memory file that a compression moves or keeps whole. An
// agent's MEMORY.md holds code blocks, tables and nested lists, not only
// one fact per line: a closing fence moved without its opening one leaves
// the file the agent loads at every start with an unclosed code block, and
// a nested item moved without its parent reads as something else. So a
// compression works on blocks:
//
//   - a heading line;
//   - a blank line;
//   - a fenced code block, its fences included (to the end of the document
//     when it is never closed);
//   - a table: consecutive lines that start with "|";
//   - a list item with everything under it: its nested items, the lines
//     indented under it (a fence among them to its closing fence), the
//     lines that continue its text, and blank lines between them;
//   - a paragraph: consecutive lines of text.

// BlockKind is what a block is.
type BlockKind int

// Kinds of block.
const (
	BlockHeading BlockKind = iota
	BlockBlank
	BlockFence
	BlockTable
	BlockItem
	BlockParagraph
)

// Block is a run of lines [Start, End) of a document that goes or stays
// whole.
type Block struct {
	Kind       BlockKind
	Start, End int
	// Level and Text are a heading's.
	Level int
	Text  string
}

var listMarker = regexp.MustCompile(`^(\s*)([-*+]|\d{1,9}[.)])(\s+|$)`)

// Lines splits src after each "\n" (the last line may lack one): what
// Blocks takes.
func Lines(src []byte) []string {
	if len(src) == 0 {
		return nil
	}
	out := strings.SplitAfter(string(src), "\n")
	if out[len(out)-1] == "" {
		out = out[:len(out)-1]
	}
	return out
}

// fenceOpen reports the fence a line opens ("" for none): ``` or ~~~ (or
// longer), indented less than 4 spaces.
func fenceOpen(line string) string {
	text := strings.TrimRight(line, "\r\n")
	trimmed := strings.TrimLeft(text, " ")
	if len(text)-len(trimmed) >= 4 || !(strings.HasPrefix(trimmed, "```") || strings.HasPrefix(trimmed, "~~~")) {
		return ""
	}
	c := trimmed[:1]
	return strings.Repeat(c, len(trimmed)-len(strings.TrimLeft(trimmed, c)))
}

// fenceCloses reports whether line closes fence.
func fenceCloses(line, fence string) bool {
	text := strings.TrimRight(line, "\r\n")
	trimmed := strings.TrimLeft(text, " ")
	return len(text)-len(trimmed) < 4 && strings.HasPrefix(trimmed, fence) && strings.Trim(trimmed, fence[:1]) == ""
}

// headingOf returns an ATX heading's level and text (0 for none).
func headingOf(line string) (int, string) {
	text := strings.TrimRight(line, "\r\n")
	trimmed := strings.TrimLeft(text, " ")
	if len(text)-len(trimmed) >= 4 || !strings.HasPrefix(trimmed, "#") {
		return 0, ""
	}
	level := len(trimmed) - len(strings.TrimLeft(trimmed, "#"))
	rest := trimmed[level:]
	if level > 6 || rest != "" && rest[0] != ' ' && rest[0] != '\t' {
		return 0, ""
	}
	return level, strings.TrimSpace(strings.TrimRight(strings.TrimSpace(rest), "#"))
}

func blank(line string) bool { return strings.TrimSpace(line) == "" }

func indentOf(line string) int {
	n := 0
	for _, r := range line {
		switch r {
		case ' ':
			n++
		case '\t':
			n += 4 - n%4
		default:
			return n
		}
	}
	return n
}

// fenceEnd is the line after the fence opened at line i closes (len(lines)
// when it never does).
func fenceEnd(lines []string, i int, fence string) int {
	for j := i + 1; j < len(lines); j++ {
		if fenceCloses(lines[j], fence) {
			return j + 1
		}
	}
	return len(lines)
}

// Blocks splits lines (Lines) into the blocks a compression moves whole.
// Every line is in exactly one block, in order.
func Blocks(lines []string) []Block {
	var out []Block
	for i := 0; i < len(lines); {
		l := lines[i]
		switch {
		case blank(l):
			out = append(out, Block{Kind: BlockBlank, Start: i, End: i + 1})
			i++
		case fenceOpen(l) != "":
			end := fenceEnd(lines, i, fenceOpen(l))
			out = append(out, Block{Kind: BlockFence, Start: i, End: end})
			i = end
		default:
			if level, text := headingOf(l); level > 0 {
				out = append(out, Block{Kind: BlockHeading, Start: i, End: i + 1, Level: level, Text: text})
				i++
				continue
			}
			if strings.HasPrefix(strings.TrimSpace(l), "|") {
				j := i + 1
				for j < len(lines) && strings.HasPrefix(strings.TrimSpace(lines[j]), "|") {
					j++
				}
				out = append(out, Block{Kind: BlockTable, Start: i, End: j})
				i = j
				continue
			}
			if m := listMarker.FindStringSubmatch(l); m != nil {
				end := itemEnd(lines, i, indentOf(m[1]))
				out = append(out, Block{Kind: BlockItem, Start: i, End: end})
				i = end
				continue
			}
			j := i + 1
			for j < len(lines) && !blank(lines[j]) && !startsBlock(lines[j]) {
				j++
			}
			out = append(out, Block{Kind: BlockParagraph, Start: i, End: j})
			i = j
		}
	}
	return out
}

// startsBlock reports whether a line begins a block of its own (a
// heading, a fence, a table row, a list item), ending a paragraph.
func startsBlock(l string) bool {
	if lv, _ := headingOf(l); lv > 0 {
		return true
	}
	return fenceOpen(l) != "" || strings.HasPrefix(strings.TrimSpace(l), "|") || listMarker.MatchString(l)
}

// itemEnd is the line after the list item at line i (its marker indented
// by indent) and everything under it ends.
func itemEnd(lines []string, i, indent int) int {
	j := i + 1
	for j < len(lines) {
		l := lines[j]
		switch {
		case blank(l):
			// A blank line belongs to the item only when what follows it
			// is indented under the item.
			k := j
			for k < len(lines) && blank(lines[k]) {
				k++
			}
			if k < len(lines) && indentOf(lines[k]) > indent {
				j = k
				continue
			}
			return j
		case indentOf(l) > indent:
			if f := fenceOpen(l); f != "" {
				j = fenceEnd(lines, j, f)
				continue
			}
			j++
		case startsBlock(l):
			return j // a sibling item, a heading, a fence, a table
		default:
			j++ // the item's text goes on (a lazy continuation line)
		}
	}
	return j
}

// Lines is the block's text: its lines joined.
func (b Block) Lines(lines []string) string { return strings.Join(lines[b.Start:b.End], "") }

// Content reports whether the block holds something to keep or move (not
// a heading or a blank line).
func (b Block) Content() bool { return b.Kind != BlockHeading && b.Kind != BlockBlank }

// FencesBalance reports whether every fenced code block of src is closed.
func FencesBalance(src []byte) bool { return !Parse(src).OpenFence }
