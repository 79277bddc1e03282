// Package nowhistory is the now-history layout (docs/layouts.md): an app directory
// with memory.md ("# now" working memory and a "# History" timeline, newest
// first), memory/run/YYYY-MM-DD-HHmm-run.md files written by the agent's
// platform, and memory/YYYY-MM-DD-HHmm.md compaction archives written by
// memwatch.
package nowhistory

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"sort"
	"strings"

	"github.com/memwatch/memwatch/confine"
	"github.com/memwatch/memwatch/markdown"
	"github.com/memwatch/memwatch/rotate"
)

// File names of the layout, relative to the root.
const (
	MemoryFile = "memory.md"
	RunDir     = "memory/run"
	ArchiveDir = "memory"
	// TimeFormat is the seed's unified YYYY-MM-DD-HHmm (local time).
	TimeFormat = rotate.StampFormat
)

// smallFile is the seed's threshold between the full-content and the
// structure-only snapshot.
const smallFile = 30

// countLines counts lines the way an editor shows them.
func countLines(b []byte) int {
	if len(b) == 0 {
		return 0
	}
	n := bytes.Count(b, []byte{'\n'})
	if b[len(b)-1] != '\n' {
		n++
	}
	return n
}

// humanKB renders a size as the seed does: "8.5KB".
func humanKB(n int) string { return fmt.Sprintf("%.1fKB", float64(n)/1024) }

// runFiles lists memory/run/*-run.md newest first (names sort by time).
func runFiles(root *confine.Root) []string {
	ents, err := root.ReadDir(RunDir)
	if err != nil {
		return nil
	}
	var out []string
	for _, e := range ents {
		if e.Type().IsRegular() && strings.HasSuffix(e.Name(), ".md") {
			out = append(out, e.Name())
		}
	}
	sort.Sort(sort.Reverse(sort.StringSlice(out)))
	return out
}

// compactionArchives lists memory/YYYY-MM-DD-HHmm*.md newest first.
func compactionArchives(root *confine.Root) []string {
	ents, err := root.ReadDir(ArchiveDir)
	if err != nil {
		return nil
	}
	var out []string
	for _, e := range ents {
		n := e.Name()
		if e.Type().IsRegular() && (strings.HasSuffix(n, ".md") || strings.HasSuffix(n, ".md.gz") || strings.HasSuffix(n, ".md.zst")) && len(n) >= len(TimeFormat) {
			out = append(out, n)
		}
	}
	sort.Sort(sort.Reverse(sort.StringSlice(out)))
	return out
}

// firstSection is the seed's firstSection: from the first "#" heading to the
// next "#" heading, which with "# now" / "# History" is the whole "# now" block.
func firstSection(d *markdown.Doc) (start, end int, idx int) {
	for i, h := range d.Headings {
		if h.Level == 1 {
			return h.Start, h.End, i
		}
	}
	return 0, len(d.Src), -1
}

// maxListedRuns bounds the archive listing of a snapshot.
const maxListedRuns = 10

// Snapshot variants (now-history, 3.2 in its design): which of the injected forms to render.
const (
	// VariantAuto picks by size: the full content up to 30 lines, else the
	// structure view.
	VariantAuto = "auto"
	// VariantFull is the full content whatever the size.
	VariantFull = "full"
	// VariantStructure is the "# now" block, the heading outline and the run
	// files whatever the size.
	VariantStructure = "structure"
)

// Variants lists the snapshot variants, VariantAuto first.
var Variants = []string{VariantAuto, VariantFull, VariantStructure}

// Snapshot renders the seed's injection text (3.2, 3.3) for the memory file
// file of the app directory root.
func Snapshot(root *confine.Root, file string) (string, error) {
	return SnapshotVariant(root, file, VariantAuto)
}

// SnapshotVariant renders one variant of the injection text; "" is
// VariantAuto.
func SnapshotVariant(root *confine.Root, file, variant string) (string, error) {
	switch variant {
	case "", VariantAuto, VariantFull, VariantStructure:
	default:
		return "", fmt.Errorf("snapshot variant %q: want %s", variant, strings.Join(Variants, ", "))
	}
	path := root.Join(file)
	src, err := root.ReadFile(file)
	if errors.Is(err, fs.ErrNotExist) {
		return fmt.Sprintf("## Memory\n\n**File**: `%s`\n\nNo memory file yet. Create it with the Write tool: start with `# now` and a `## State | one-line summary` section, then add `# History` for the timeline (newest entry first, headings `## YYYY-MM-DD-HHmm | summary`).\n", path), nil
	}
	if err != nil {
		return "", fmt.Errorf("read memory file: %w", err)
	}
	lines := countLines(src)
	var b strings.Builder
	fmt.Fprintf(&b, "## Memory\n\n**File**: `%s`\n**Size**: %d lines, %s\n\n", path, lines, humanKB(len(src)))
	if variant == VariantFull || variant != VariantStructure && lines <= smallFile {
		b.Write(src)
		if len(src) > 0 && src[len(src)-1] != '\n' {
			b.WriteByte('\n')
		}
		return b.String(), nil
	}
	d := markdown.Parse(src)
	start, end, loaded := firstSection(d)
	b.WriteString("### Current State (auto-loaded):\n\n")
	now := strings.ReplaceAll(string(src[start:end]), "\r\n", "\n")
	b.WriteString(strings.TrimRight(now, "\n"))
	b.WriteString("\n\n### Structure:\n")
	for i, h := range d.Headings {
		fmt.Fprintf(&b, "%sL%d: %s (%d lines)", strings.Repeat("  ", h.Level), h.Line, h.Title(), h.Lines)
		if i == loaded {
			b.WriteString(" ← loaded above")
		}
		b.WriteByte('\n')
	}
	runs := runFiles(root)
	fmt.Fprintf(&b, "\n**Archive** (`%s/`, %d files):\n", RunDir, len(runs))
	for i, r := range runs {
		if i == maxListedRuns {
			b.WriteString("  ...\n")
			break
		}
		fmt.Fprintf(&b, "  - %s\n", r)
	}
	return b.String(), nil
}

// HeadingInfo is one heading in Status.
type HeadingInfo struct {
	Level int    `json:"level"`
	Text  string `json:"text"`
	Line  int    `json:"line"`
	Lines int    `json:"lines"`
}

// StatusInfo is the seed's memory_status: structure, no content.
type StatusInfo struct {
	Path     string        `json:"path"`
	Exists   bool          `json:"exists"`
	Size     int           `json:"size"`
	Lines    int           `json:"lines"`
	Headings []HeadingInfo `json:"headings"`
	Archive  ArchiveInfo   `json:"archive"`
	// Warnings name what breaks the seed's rules: ## State not first in
	// # now, a file over max_size.
	Warnings []string `json:"warnings"`
}

// StateWarning says what is wrong with the place of ## State, which seed
// 000 wants first in the first # section (the part injected before every
// run); "" when it is first.
func StateWarning(src []byte) string {
	d := markdown.Parse(src)
	first := -1
	for i, h := range d.Headings {
		if h.Level == 1 {
			first = i
			break
		}
	}
	if first < 0 {
		return ""
	}
	var sub []markdown.Heading
	for _, h := range d.Headings[first+1:] {
		if h.Level == 1 {
			break
		}
		if h.Level == 2 {
			sub = append(sub, h)
		}
	}
	isState := func(h markdown.Heading) bool {
		t := strings.TrimSpace(h.Text)
		return t == "State" || strings.HasPrefix(t, "State ") || strings.HasPrefix(t, "State|")
	}
	for i, h := range sub {
		if isState(h) {
			if i == 0 {
				return ""
			}
			return fmt.Sprintf("## State (L%d) is not the first section of %s: %s (L%d) comes before it; move ## State up, it is what every run loads first", h.Line, d.Headings[first].Title(), sub[0].Title(), sub[0].Line)
		}
	}
	return fmt.Sprintf("%s has no ## State section: start it with ## State | one-line summary", d.Headings[first].Title())
}

// ArchiveInfo describes memory/run and the compaction archives.
type ArchiveInfo struct {
	RunDir      string   `json:"run_dir"`
	RunFiles    int      `json:"run_files"`
	NewestRun   string   `json:"newest_run,omitempty"`
	Compactions []string `json:"compactions"`
}

// Status returns the structure of the memory file file of root; limit is
// its max_size (0: not checked).
func Status(root *confine.Root, file string, limit int64) (StatusInfo, error) {
	path := root.Join(file)
	st := StatusInfo{Path: path, Headings: []HeadingInfo{}, Warnings: []string{}}
	src, err := root.ReadFile(file)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return st, fmt.Errorf("read memory file: %w", err)
	}
	if err == nil {
		st.Exists, st.Size, st.Lines = true, len(src), countLines(src)
		for _, h := range markdown.Parse(src).Headings {
			st.Headings = append(st.Headings, HeadingInfo{Level: h.Level, Text: h.Text, Line: h.Line, Lines: h.Lines})
		}
		if w := StateWarning(src); w != "" {
			st.Warnings = append(st.Warnings, w)
		}
		if limit > 0 && int64(len(src)) > limit {
			st.Warnings = append(st.Warnings, fmt.Sprintf("%s is %s, over max_size %s: memwatch compacts it (memwatch compact runs it now)", file, humanKB(len(src)), humanKB(int(limit))))
		}
	}
	runs := runFiles(root)
	st.Archive = ArchiveInfo{RunDir: RunDir, RunFiles: len(runs), Compactions: compactionArchives(root)}
	if st.Archive.Compactions == nil {
		st.Archive.Compactions = []string{}
	}
	if len(runs) > 0 {
		st.Archive.NewestRun = runs[0]
	}
	return st, nil
}

// FormatStatus renders Status for a terminal.
func FormatStatus(st StatusInfo) string {
	var b strings.Builder
	if !st.Exists {
		fmt.Fprintf(&b, "%s: does not exist\n", st.Path)
	} else {
		fmt.Fprintf(&b, "%s: %d lines, %s\n", st.Path, st.Lines, humanKB(st.Size))
		for _, h := range st.Headings {
			fmt.Fprintf(&b, "%sL%d: %s %s (%d lines)\n", strings.Repeat("  ", h.Level), h.Line, strings.Repeat("#", h.Level), h.Text, h.Lines)
		}
	}
	fmt.Fprintf(&b, "run files (%s/): %d", st.Archive.RunDir, st.Archive.RunFiles)
	if st.Archive.NewestRun != "" {
		fmt.Fprintf(&b, ", newest %s", st.Archive.NewestRun)
	}
	fmt.Fprintf(&b, "\ncompaction archives (%s/): %d\n", ArchiveDir, len(st.Archive.Compactions))
	for _, c := range st.Archive.Compactions {
		fmt.Fprintf(&b, "  - %s\n", c)
	}
	for _, w := range st.Warnings {
		fmt.Fprintf(&b, "warning: %s\n", w)
	}
	return b.String()
}

// ErrOpenFence means a file ends inside an unclosed code block, so a
// heading appended to it would be code; the agent's block is not touched.
var ErrOpenFence = errors.New("memory.md ends inside an unclosed ``` code block; close it, then stamp again")

// Stamp returns src with "## <stamp>" inserted at the top of "# History"
// (seed 6.4), creating "# History" at the end when it is missing. It
// returns src unchanged when the newest entry already has that stamp.
func Stamp(src []byte, stamp string) ([]byte, error) {
	nl := "\n"
	if bytes.Contains(src, []byte("\r\n")) {
		nl = "\r\n"
	}
	heading := "## " + stamp
	d := markdown.Parse(src)
	h := d.Find(1, "History")
	if h < 0 && d.OpenFence {
		return nil, ErrOpenFence
	}
	if h < 0 {
		// Never append to a sub-slice of src: it would overwrite the caller's bytes.
		out := append([]byte{}, bytes.TrimRight(src, "\r\n")...)
		if len(out) > 0 {
			out = append(out, []byte(nl+nl)...)
		}
		return append(out, []byte("# History"+nl+nl+heading+nl)...), nil
	}
	if kids := d.Children(h); len(kids) > 0 {
		t := d.Headings[kids[0]].Text
		if t == stamp || strings.HasPrefix(t, stamp+" ") {
			return src, nil
		}
	}
	// Insert right after the "# History" line (and one blank line, if any).
	at := d.Headings[h].Start
	if i := bytes.IndexByte(src[at:], '\n'); i >= 0 {
		at += i + 1
	} else {
		src = append(append([]byte{}, src...), nl...)
		at = len(src)
	}
	if bytes.HasPrefix(src[at:], []byte(nl)) {
		at += len(nl)
	}
	out := append([]byte{}, src[:at]...)
	out = append(out, []byte(heading+nl)...)
	return append(out, src[at:]...), nil
}
