package markdown

import (
	"strings"
	"testing"
)

func TestParse(t *testing.T) {
	src := "intro\n# now\n## State | ok\n- a: 1\n```\n# not a heading\n```\n## Patterns\n# History\n## 2026-01-15-1430 | x\n#nospace\n"
	d := Parse([]byte(src))
	type h struct {
		level int
		text  string
		line  int
		lines int
	}
	want := []h{{1, "now", 2, 7}, {2, "State | ok", 3, 5}, {2, "Patterns", 8, 1}, {1, "History", 9, 3}, {2, "2026-01-15-1430 | x", 10, 2}}
	if len(d.Headings) != len(want) {
		t.Fatalf("got %d headings %+v, want %d", len(d.Headings), d.Headings, len(want))
	}
	for i, w := range want {
		g := d.Headings[i]
		if g.Level != w.level || g.Text != w.text || g.Line != w.line || g.Lines != w.lines {
			t.Errorf("heading %d = {%d %q L%d %d lines}, want %+v", i, g.Level, g.Text, g.Line, g.Lines, w)
		}
	}
	if got := string(d.Section(0)); got != "# now\n## State | ok\n- a: 1\n```\n# not a heading\n```\n## Patterns\n" {
		t.Errorf("section now = %q", got)
	}
	if got := d.Children(d.Find(1, "history")); len(got) != 1 {
		t.Errorf("children of history = %v", got)
	}
}

func TestParseCRLF(t *testing.T) {
	d := Parse([]byte("# now\r\n## State\r\nx\r\n"))
	if len(d.Headings) != 2 || d.Headings[1].Text != "State" || d.Headings[0].Lines != 3 {
		t.Errorf("CRLF headings = %+v", d.Headings)
	}
}

func FuzzParse(f *testing.F) {
	f.Add([]byte("# a\n## b\n```\n# c\n```\n"))
	f.Add([]byte("~~~~\n#x\n~~~\n# y\r\n"))
	f.Fuzz(func(t *testing.T, src []byte) {
		d := Parse(src)
		prev := -1
		for i, h := range d.Headings {
			if h.Start <= prev || h.End < h.Start || h.End > len(src) || h.Lines < 1 {
				t.Fatalf("heading %d out of order or range: %+v (len %d)", i, h, len(src))
			}
			prev = h.Start
		}
	})
}

func BenchmarkParse100KiB(b *testing.B) {
	var src []byte
	for len(src) < 100<<10 {
		src = append(src, "## 2026-01-15-1430 | routine check\n### Details\n- price unchanged\n\n"...)
	}
	b.SetBytes(int64(len(src)))
	for b.Loop() {
		Parse(src)
	}
}

func TestPinned(t *testing.T) {
	src := "# Memory\n\n## Pinned rules\n- never on Fridays\n\n### More pinned? no: a subsection\n- still pinned\n\n## Facts\n- a fact\n- keep me <!-- pin -->\n- keep me too <!--PIN-->  \n```\n# not a heading\n```\n"
	got := Pinned([]byte(src))
	want := []string{"## Pinned rules", "- never on Fridays", "### More pinned? no: a subsection", "- still pinned", "- keep me <!-- pin -->", "- keep me too <!--PIN-->"}
	if strings.Join(got, "|") != strings.Join(want, "|") {
		t.Errorf("Pinned:\n got %q\nwant %q", got, want)
	}
	if m := MissingPinned([]byte(src), []byte("- never on Fridays\n")); m != "## Pinned rules" {
		t.Errorf("MissingPinned = %q", m)
	}
}
