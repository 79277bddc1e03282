package markdown

import (
	"slices"
	"strings"
	"testing"
)

func TestBlocks(t *testing.T) {
	src := "# Memory\n" + // 0 heading
		"\n" + // 1
		"- a fact\n" + // 2 item
		"- a parent\n" + // 3 item with nested items and a fence
		"  - a child\n" +
		"    - a grandchild\n" +
		"  ```go\n" +
		"# not a heading\n" +
		"  ```\n" +
		"\n" + // 9
		"| a | b |\n" + // 10 table
		"|---|---|\n" +
		"| 1 | 2 |\n" +
		"A paragraph\n" + // 13 paragraph
		"goes on.\n" +
		"```\n" + // 15 fence
		"- not an item\n" +
		"```\n" +
		"1. numbered\n" + // 18 item, a lazy line
		"continued\n" +
		"```\n" // 20 a fence never closed
	lines := Lines([]byte(src))
	type want struct {
		kind       BlockKind
		start, end int
	}
	got := Blocks(lines)
	var g []want
	for _, b := range got {
		g = append(g, want{b.Kind, b.Start, b.End})
	}
	w := []want{{BlockHeading, 0, 1}, {BlockBlank, 1, 2}, {BlockItem, 2, 3}, {BlockItem, 3, 9}, {BlockBlank, 9, 10},
		{BlockTable, 10, 13}, {BlockParagraph, 13, 15}, {BlockFence, 15, 18}, {BlockItem, 18, 20}, {BlockFence, 20, 21}}
	if !slices.Equal(g, w) {
		t.Errorf("blocks\n got %v\nwant %v", g, w)
	}
}

func TestPinnedLines(t *testing.T) {
	for _, tc := range []struct {
		src  string
		want []string
	}{
		{"## Pinned\n- a\n## Facts\n- b\n", []string{"## Pinned", "- a"}},
		{"## Pinned rules\n### Sub\n- a\n", []string{"## Pinned rules", "### Sub", "- a"}},
		{"## Not pinned\n- a\n## pinned lower\n- b\n## Unpinned\n- c\n", nil},
		// A # comment in a fence does not end the pinned section.
		{"## Pinned\n```sh\n# comment\nrm -rf build\n```\n- kept\n## Facts\n- x\n", []string{"## Pinned", "```sh", "# comment", "rm -rf build", "```", "- kept"}},
		// A pin in a block pins the block.
		{"- parent\n  - child <!-- pin -->\n- other\n", []string{"- parent", "- child <!-- pin -->"}},
		{"```\ncode <!-- pin -->\n```\n", []string{"```", "code <!-- pin -->", "```"}},
	} {
		if got := Pinned([]byte(tc.src)); !slices.Equal(got, tc.want) {
			t.Errorf("Pinned(%q)\n got %q\nwant %q", tc.src, got, tc.want)
		}
	}
}

func FuzzBlocks(f *testing.F) {
	f.Add([]byte("# a\n- b\n  - c\n```\nx\n```\n| t |\n\npara\n"))
	f.Add([]byte("~~~~\n#x\n~~~\n# y\r\n  * i\n\n    more\n"))
	f.Fuzz(func(t *testing.T, src []byte) {
		lines := Lines(src)
		if got := strings.Join(lines, ""); got != string(src) {
			t.Fatalf("Lines does not cover the source")
		}
		next := 0
		for _, b := range Blocks(lines) {
			if b.Start != next || b.End <= b.Start || b.End > len(lines) {
				t.Fatalf("block %+v after line %d of %d", b, next, len(lines))
			}
			next = b.End
			if b.Kind == BlockFence && b.End-b.Start >= 2 && !FencesBalance([]byte(b.Lines(lines))) && b.End != len(lines) {
				t.Fatalf("a closed fence block that does not balance: %q", b.Lines(lines))
			}
		}
		if next != len(lines) {
			t.Fatalf("blocks end at %d of %d lines", next, len(lines))
		}
		PinnedLines(lines)
	})
}
