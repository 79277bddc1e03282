package state

import (
	"fmt"
	"path/filepath"
	"strings"
	"time"
	"unicode/utf8"
)

// Format says how FormatJournal lays records out.
type Format struct {
	// Filtered: the records were selected by a filter, so an empty list
	// means "no record matches" rather than "nothing happened yet".
	Filtered bool
	// Width wraps each record's reason to this many columns (0: one line).
	Width int
	// Size prints a size (nil: a count of bytes).
	Size func(int64) string
	// Mark colours a part of a record ("id", "done", "failed", "rejected",
	// "skipped", "dim"); nil leaves it plain.
	Mark func(part, s string) string
}

// FormatJournal renders records as memwatch log prints them, in the order
// given, as git log does: a header line per record (id, time, outcome,
// rule, the file, the sizes, what started it), then its reason and
// archive indented below, wrapped to the width.
//
//	12  2026-11-27 14:03:11  done  compress  billing/MEMORY.md  15 KiB → 8.2 KiB  (change)
//	    MEMORY.md 247 lines, over memory_max_lines 200
//	    archive: /var/lib/memwatch/archive/…
func FormatJournal(recs []Record, f Format) string {
	if len(recs) == 0 {
		if f.Filtered {
			return "no journal record matches\n"
		}
		return "journal is empty: memwatch has not changed anything yet\n"
	}
	size := f.Size
	if size == nil {
		size = func(n int64) string { return fmt.Sprintf("%d B", n) }
	}
	mark := f.Mark
	if mark == nil {
		mark = func(_, s string) string { return s }
	}
	var b strings.Builder
	for _, r := range recs {
		target := filepath.Join(filepath.Base(r.Root), r.Target)
		if r.Target == "" {
			target = filepath.Base(r.Root)
		}
		type part struct{ kind, text string }
		head := []part{{"id", fmt.Sprintf("%d", r.ID)}, {"", r.Time.Local().Format(time.DateTime)}, {r.Outcome, r.Outcome}, {"", r.Rule}, {"", target}}
		var tail []part // what the header gives up, last first, to fit
		if r.BeforeSize != 0 || r.AfterSize != 0 {
			tail = append(tail, part{"", size(r.BeforeSize) + " → " + size(r.AfterSize)})
		}
		var about []string
		if r.Store != "" {
			about = append(about, "store "+r.Store)
		}
		if r.Trigger != "" {
			about = append(about, "by "+r.Trigger)
		}
		if r.Tokens > 0 {
			about = append(about, fmt.Sprintf("%d LLM tokens", r.Tokens))
		}
		if len(about) > 0 {
			tail = append(tail, part{"dim", "(" + strings.Join(about, ", ") + ")"})
		}
		width := func(ps []part) int {
			n := 0
			for _, p := range ps {
				n += utf8.RuneCountInString(p.text) + 2
			}
			return n - 2
		}
		fits := len(tail)
		for f.Width > 0 && fits > 0 && width(append(head[:len(head):len(head)], tail[:fits]...)) > f.Width {
			fits--
		}
		var line []string
		for _, p := range append(head, tail[:fits]...) {
			if p.kind != "" {
				line = append(line, mark(p.kind, p.text))
			} else {
				line = append(line, p.text)
			}
		}
		b.WriteString(strings.Join(line, "  "))
		b.WriteByte('\n')
		if fits < len(tail) {
			var rest []string
			for _, p := range tail[fits:] {
				rest = append(rest, p.text)
			}
			wrapTo(&b, strings.Join(rest, "  "), f.Width)
		}
		if reason := oneLine(r.Reason); reason != "" {
			wrapTo(&b, reason, f.Width)
		}
		if r.Archive != "" {
			wrapTo(&b, "archive: "+r.Archive, f.Width)
		}
	}
	return b.String()
}

// wrapTo writes s indented by four spaces, broken at spaces to fit width
// columns (a word longer than the line stays whole).
func wrapTo(b *strings.Builder, s string, width int) {
	const indent = "    "
	room := width - len(indent)
	if width <= 0 || room < 20 {
		b.WriteString(indent + s + "\n")
		return
	}
	line, n := "", 0
	for _, w := range strings.Fields(s) {
		wn := utf8.RuneCountInString(w)
		if n > 0 && n+1+wn > room {
			b.WriteString(indent + line + "\n")
			line, n = "", 0
		}
		if n > 0 {
			line += " "
			n++
		}
		line += w
		n += wn
	}
	if n > 0 {
		b.WriteString(indent + line + "\n")
	}
}

// oneLine keeps a reason on its own lines.
func oneLine(s string) string { return strings.Join(strings.Fields(s), " ") }
