// Package memoryhistory is the memory-history layout (docs/layouts.md): a
// workspace with MEMORY.md (long-term facts), HISTORY.md (an append-only
// log of "## <ISO timestamp>" entries), monthly HISTORY-YYYY-MM.md files and
// the agent's session logs (JSONL). memwatch does what the seed's
// MemoryManager and ConsolidationService do, from outside the agent.
package memoryhistory

import (
	"bytes"
	"path/filepath"
	"strings"
	"time"

	"github.com/memwatch/memwatch/markdown"
	"github.com/memwatch/memwatch/policy"
	"github.com/memwatch/memwatch/rotate"
)

// File names of the layout, relative to the root.
const (
	MemoryFile  = "MEMORY.md"
	HistoryFile = "HISTORY.md"
	ArchiveDir  = "memory"
)

// Entry is one "## <timestamp>" entry of a history file.
type Entry struct {
	Heading string    // the heading text after "## "
	Raw     []byte    // the entry's bytes as written, up to the next entry
	Time    time.Time // the heading's timestamp
	OK      bool      // whether the timestamp parsed
}

// Key identifies an entry regardless of line endings and trailing blank lines.
func (e Entry) Key() string {
	return strings.TrimRight(strings.ReplaceAll(string(e.Raw), "\r\n", "\n"), " \t\n")
}

// Month is the entry's monthly file name, e.g. HISTORY-2026-02.md.
func (e Entry) Month() string { return MonthFile(e.Time) }

// files says where a root's memory files live: memory_dir holds MEMORY.md,
// HISTORY.md and the monthly files (the root by default; "memory" for
// agents such as nanobot and Claude Code that keep them there), and
// archive_dir the pre-images (OpenClaw indexes memory/, so its preset
// keeps them elsewhere).
type files struct{ dir, archive string }

func filesOf(s *policy.Store) files {
	return files{dir: OptionsOf(s).MemoryDir, archive: OptionsOf(s).ArchiveDir}
}

func (f files) memory() string       { return filepath.Join(f.dir, MemoryFile) }
func (f files) history() string      { return filepath.Join(f.dir, HistoryFile) }
func (f files) month(e Entry) string { return filepath.Join(f.dir, e.Month()) }

// archiveFor names an archive of base ("MEMORY", "HISTORY") made at now.
func (f files) archiveFor(base string, now time.Time) string {
	return rotate.Stamped(f.archive, base, now)
}

// MonthFile names the monthly history file of t (in t's own zone: an
// ISO timestamp ending in Z is filed by its UTC month).
func MonthFile(t time.Time) string { return rotate.Monthly("HISTORY", t) }

// ParseHistory splits a history file into what precedes the first entry
// and its entries. Headings inside code fences are not entries.
func ParseHistory(src []byte) (preamble []byte, entries []Entry) {
	d := markdown.Parse(src)
	var starts []int
	var heads []string
	for _, h := range d.Headings {
		if h.Level == 2 {
			starts = append(starts, h.Start)
			heads = append(heads, h.Text)
		}
	}
	if len(starts) == 0 {
		return src, nil
	}
	preamble = src[:starts[0]]
	for i, st := range starts {
		end := len(src)
		if i+1 < len(starts) {
			end = starts[i+1]
		}
		e := Entry{Heading: heads[i], Raw: src[st:end]}
		e.Time, e.OK = parseStamp(heads[i])
		entries = append(entries, e)
	}
	return preamble, entries
}

var stampLayouts = []string{time.RFC3339Nano, "2006-01-02T15:04:05", "2006-01-02 15:04:05", "2006-01-02T15:04", "2006-01-02 15:04", "2006-01-02"}

// parseStamp reads the timestamp at the start of a heading ("2026-02-27T14:30:00.000Z",
// optionally followed by " | summary").
func parseStamp(h string) (time.Time, bool) {
	s := strings.TrimSpace(h)
	if i := strings.Index(s, " | "); i >= 0 {
		s = s[:i]
	}
	for _, l := range stampLayouts {
		if t, err := time.Parse(l, s); err == nil {
			return t, true
		}
	}
	if f := strings.Fields(s); len(f) > 0 {
		for _, l := range stampLayouts {
			if t, err := time.Parse(l, f[0]); err == nil {
				return t, true
			}
		}
	}
	return time.Time{}, false
}

// keys returns the set of entry keys in src.
func keys(src []byte) map[string]bool {
	_, es := ParseHistory(src)
	m := make(map[string]bool, len(es))
	for _, e := range es {
		m[e.Key()] = true
	}
	return m
}

// appendEntries returns old with the entries not already in it appended,
// each separated by a blank line, and how many were added.
func appendEntries(old []byte, entries []Entry) ([]byte, int) {
	have := keys(old)
	out := append([]byte{}, old...)
	n := 0
	for _, e := range entries {
		k := e.Key()
		if have[k] {
			continue
		}
		have[k] = true
		out = withBlankLine(out)
		out = append(out, k...)
		out = append(out, '\n')
		n++
	}
	return out, n
}

// blankLineAfter is what goes between a file ending with end and the
// next entry: nothing, or the newlines that make a blank line.
func blankLineAfter(end []byte) []byte {
	switch {
	case len(end) == 0, bytes.HasSuffix(end, []byte("\n\n")):
		return nil
	case bytes.HasSuffix(end, []byte("\n")):
		return []byte("\n")
	}
	return []byte("\n\n")
}

// withBlankLine appends to b (which the caller owns) what it takes to end
// with a blank line, so an appended "## " heading starts a new section.
func withBlankLine(b []byte) []byte {
	switch {
	case len(b) == 0, bytes.HasSuffix(b, []byte("\n\n")):
		return b
	case bytes.HasSuffix(b, []byte("\n")):
		return append(b, '\n')
	}
	return append(b, '\n', '\n')
}
