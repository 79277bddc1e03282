package rewrite

import (
	"bytes"
	"sort"
	"strings"

	"github.com/pmezard/go-difflib/difflib"
)

// The line-level merge of a genuine conflict. Memory files are markdown
// and JSONL: what agents do to them is add lines (an entry, a fact, a
// message) to what they read. When two versions of a file both carry an
// agent's write, the live file keeps one and the lines the other added are
// inserted into it, each block after the lines it followed. Nothing is
// taken out: an agent's deletion in the other version is not replayed.

// Block is a run of lines an agent added to a version of a file, with up
// to anchorLines lines it followed there (none: it started the file).
type Block struct {
	After []string `json:"after,omitempty"`
	Lines []string `json:"lines"` // each with its newline, when it had one
}

const anchorLines = 3

// maxDiffCells bounds the line diff: above it (two files of tens of
// thousands of lines) additions are found by a set of the base's lines.
const maxDiffCells = 50_000_000

// splitLines splits b into lines, each keeping its newline.
func splitLines(b []byte) []string {
	if len(b) == 0 {
		return nil
	}
	s := string(b)
	n := strings.Count(s, "\n")
	out := make([]string, 0, n+1)
	for len(s) > 0 {
		i := strings.IndexByte(s, '\n')
		if i < 0 {
			out = append(out, s)
			break
		}
		out = append(out, s[:i+1])
		s = s[i+1:]
	}
	return out
}

// Added returns the blocks of lines next has and base lacks, in next's
// order: what an agent added when it wrote next from base.
func Added(base, next []byte) []Block {
	a, b := splitLines(base), splitLines(next)
	var blocks []Block
	add := func(j1, j2 int) {
		if j1 >= j2 {
			return
		}
		blk := Block{Lines: append([]string(nil), b[j1:j2]...)}
		blk.After = append([]string(nil), b[max(0, j1-anchorLines):j1]...)
		blocks = append(blocks, blk)
	}
	if len(a)*len(b) > maxDiffCells {
		have := make(map[string]bool, len(a))
		for _, l := range a {
			have[l] = true
		}
		start := -1
		for j, l := range b {
			switch {
			case !have[l] && start < 0:
				start = j
			case have[l] && start >= 0:
				add(start, j)
				start = -1
			}
		}
		if start >= 0 {
			add(start, len(b))
		}
		return blocks
	}
	m := difflib.NewMatcherWithJunk(a, b, false, nil)
	for _, op := range m.GetOpCodes() {
		if op.Tag == 'i' || op.Tag == 'r' {
			add(op.J1, op.J2)
		}
	}
	return blocks
}

// Missing returns the blocks that are not in live, where a block is in live
// when its lines appear there one after the other.
func Missing(live []byte, bs []Block) []Block {
	lines := splitLines(live)
	var out []Block
	for _, b := range bs {
		if !containsRun(lines, b.Lines) {
			out = append(out, b)
		}
	}
	return out
}

// Insert puts each block missing from live into it, after the last place
// its anchor lines occur (fewer of them if the whole anchor is gone), at the
// end when none is found. It returns live unchanged when nothing is missing.
func Insert(live []byte, bs []Block) []byte {
	lines := splitLines(live)
	changed := false
	for _, b := range bs {
		if len(b.Lines) == 0 || containsRun(lines, b.Lines) {
			continue
		}
		pos := anchorPos(lines, b.After)
		blk := append([]string(nil), b.Lines...)
		if pos < len(lines) && !strings.HasSuffix(blk[len(blk)-1], "\n") {
			blk[len(blk)-1] += "\n"
		}
		if pos > 0 && !strings.HasSuffix(lines[pos-1], "\n") {
			lines[pos-1] += "\n"
		}
		lines = append(lines[:pos], append(blk, lines[pos:]...)...)
		changed = true
	}
	if !changed {
		return live
	}
	return []byte(strings.Join(lines, ""))
}

// anchorPos is the index after the last occurrence of the anchor lines
// (or of their last ones); len(lines) when none occurs, 0 for no anchor.
func anchorPos(lines, after []string) int {
	if len(after) == 0 {
		return 0
	}
	for k := 0; k < len(after); k++ {
		want := after[k:]
		for i := len(lines) - len(want); i >= 0; i-- {
			if runAt(lines, i, want) {
				return i + len(want)
			}
		}
	}
	return len(lines)
}

func containsRun(lines, run []string) bool {
	if len(run) == 0 {
		return true
	}
	for i := 0; i+len(run) <= len(lines); i++ {
		if runAt(lines, i, run) {
			return true
		}
	}
	return false
}

// runAt reports whether run is at lines[i:], a last line of either side
// matching with or without its newline.
func runAt(lines []string, i int, run []string) bool {
	for k, r := range run {
		l := lines[i+k]
		if l != r && strings.TrimSuffix(l, "\n") != strings.TrimSuffix(r, "\n") {
			return false
		}
	}
	return true
}

// lineSample returns up to n distinct non-blank lines of a that b lacks,
// longest first: lines that tell a version written from a from one
// written from b.
func lineSample(a, b []byte, n int) []string {
	in := map[string]bool{}
	for _, l := range splitLines(b) {
		in[strings.TrimSuffix(l, "\n")] = true
	}
	seen := map[string]bool{}
	var out []string
	for _, l := range splitLines(a) {
		l = strings.TrimSuffix(l, "\n")
		if strings.TrimSpace(l) == "" || in[l] || seen[l] {
			continue
		}
		seen[l] = true
		out = append(out, l)
	}
	// Longest first: a long line is the least likely to recur by chance.
	sort.SliceStable(out, func(i, j int) bool { return len(out[i]) > len(out[j]) })
	return out[:min(n, len(out))]
}

// hasLine reports whether data holds the line l (without its newline).
func hasLine(data []byte, l string) bool {
	for rest := data; len(rest) > 0; {
		i := bytes.Index(rest, []byte(l))
		if i < 0 {
			return false
		}
		end := i + len(l)
		if (i == 0 || rest[i-1] == '\n') && (end == len(rest) || rest[end] == '\n') {
			return true
		}
		rest = rest[i+1:]
	}
	return false
}
