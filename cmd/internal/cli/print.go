package cli

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"unicode/utf8"

	"github.com/mattn/go-isatty"

	"github.com/memwatch/memwatch/control"
)

// What recall and show print for a person, the same whether the daemon
// answered or this process searched: rg's way, a header line per hit
// (project, date, citation) and the text under it, the query's words in
// colour on a terminal. Agents' text is made inert before any colour is
// added (see terminal.go): colour codes are memwatch's, never an agent's.

// SGR sequences, as rg colours its output.
const (
	SGRReset   = "\x1b[0m"
	SGRPath    = "\x1b[35m"   // magenta, as rg's paths
	SGRLine    = "\x1b[32m"   // green, as rg's line numbers
	SGRMatch   = "\x1b[1;31m" // bold red, as rg's matches
	SGRProject = "\x1b[1m"
	SGRDim     = "\x1b[2m"
)

// Paint colours text, or leaves it when colour is off.
type Paint bool

func (p Paint) Wrap(sgr, s string) string {
	if !p || s == "" {
		return s
	}
	return sgr + s + SGRReset
}

// UseColor decides --color: always, never, or auto (a terminal, and
// NO_COLOR not set).
func UseColor(mode string, w io.Writer) (bool, error) {
	switch mode {
	case "always":
		return true, nil
	case "never":
		return false, nil
	case "auto", "":
		if os.Getenv("NO_COLOR") != "" || os.Getenv("TERM") == "dumb" {
			return false, nil
		}
		f, ok := w.(*os.File)
		return ok && isatty.IsTerminal(f.Fd()), nil
	}
	return false, UsageError{fmt.Errorf("--color must be auto, always or never, not %q", mode)}
}

// InertText is an agent's text made safe for a terminal: control
// characters other than tab as visible escapes, invalid UTF-8 as \xNN.
func InertText(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size <= 1:
			fmt.Fprintf(&b, `\x%02x`, s[i])
		case r == '\t':
			b.WriteByte(' ')
		case r == '\n':
			b.WriteString(" ")
		case r < 0x20 || r == 0x7f:
			fmt.Fprintf(&b, `\x%02x`, r)
		case r >= 0x80 && r <= 0x9f:
			fmt.Fprintf(&b, `\u%04x`, r)
		default:
			b.WriteString(s[i : i+size])
		}
		i += size
	}
	return b.String()
}

// highlighter marks a query's words in text (control.MarkWords).
type highlighter struct{ re *regexp.Regexp }

// newHighlighter compiles the query's expression only where it is
// painted: a pipe or NO_COLOR marks nothing.
func newHighlighter(query string, p Paint) highlighter {
	if !p {
		return highlighter{}
	}
	return highlighter{control.MarkWords(query)}
}

func (h highlighter) apply(p Paint, s string) string {
	if h.re == nil || !p {
		return s
	}
	return h.re.ReplaceAllStringFunc(s, func(m string) string { return p.Wrap(SGRMatch, m) })
}

// printResults prints recall's results for a person.
func printResults(w io.Writer, query string, res control.RecallResponse, p Paint, explain bool, cwd string) {
	h := newHighlighter(query, p)
	for i, ps := range control.Passages(res.Results) {
		if i > 0 {
			fmt.Fprintln(w)
		}
		best := res.Results[slices.Min(ps.Members)]
		var head []string
		if best.Host != "" {
			head = append(head, p.Wrap(SGRProject, InertText(best.Host)))
		}
		if best.Project != "" {
			head = append(head, p.Wrap(SGRProject, InertText(best.Project)))
		}
		if !best.Time.IsZero() {
			head = append(head, p.Wrap(SGRDim, best.Time.UTC().Format("2006-01-02 15:04")))
		}
		cite := InertText(relCitation(cwd, best.Citation))
		if k := strings.LastIndex(cite, "#L"); k >= 0 {
			lines := cite[k:]
			if len(ps.Members) > 1 {
				lines = fmt.Sprintf("#L%d-%d", ps.From, ps.To)
			}
			cite = p.Wrap(SGRPath, cite[:k]) + p.Wrap(SGRLine, lines)
		} else {
			cite = p.Wrap(SGRPath, cite)
		}
		head = append(head, cite)
		if best.Moved != "" {
			head = append(head, p.Wrap(SGRDim, "("+best.Moved+")"))
		}
		fmt.Fprintln(w, strings.Join(head, "  "))
		if len(ps.Members) == 1 {
			printOne(w, h, p, best, explain)
			continue
		}
		printPassage(w, h, p, res.Results, ps, explain)
	}
}

// printOne prints a result alone: its text, the turns around it dimmed.
func printOne(w io.Writer, h highlighter, p Paint, r control.Result, explain bool) {
	for _, t := range r.Before {
		printTurn(w, p, t)
	}
	fmt.Fprintf(w, "  %s\n", h.apply(p, InertText(r.Text)))
	for _, t := range r.After {
		printTurn(w, p, t)
	}
	printNotes(w, p, r, explain)
}

// printPassage prints neighbouring results as one passage, as rg prints
// overlapping context once: each line once, in order, a result's line
// marked as rg marks a match (L41:), a turn around them dimmed (L40-).
func printPassage(w io.Writer, h highlighter, p Paint, results []control.Result, ps control.Passage, explain bool) {
	hits := map[int64]control.Result{}
	turns := map[int64]control.Turn{}
	for _, m := range ps.Members {
		r := results[m]
		hits[r.LineNumber] = r
		for _, t := range append(append([]control.Turn{}, r.Before...), r.After...) {
			turns[t.Line] = t
		}
	}
	for n := ps.From; n <= ps.To; n++ {
		if r, ok := hits[n]; ok {
			fmt.Fprintf(w, "  %s %s\n", p.Wrap(SGRLine, fmt.Sprintf("L%d:", n)), h.apply(p, InertText(r.Text)))
			printNotes(w, p, r, explain)
			continue
		}
		if t, ok := turns[n]; ok {
			text := t.Text
			if t.Role != "" {
				text = t.Role + ": " + text
			}
			fmt.Fprintf(w, "  %s\n", p.Wrap(SGRDim, fmt.Sprintf("L%d- %s", n, InertText(text))))
		}
	}
}

// printNotes prints what is said of a result below it: its copies, and
// with --explain why it ranked there.
func printNotes(w io.Writer, p Paint, r control.Result, explain bool) {
	if r.Copies > 0 {
		fmt.Fprintf(w, "  %s\n", p.Wrap(SGRDim, InertText(fmt.Sprintf("(+%s)", copiesText(r)))))
	}
	if explain && r.Why != "" {
		fmt.Fprintf(w, "  %s\n", p.Wrap(SGRDim, InertText(fmt.Sprintf("score %.3f: %s", r.Score, r.Why))))
	}
}

// relCitation is a citation's path relative to the current directory
// when it is under it, as rg prints paths (memwatch show takes it from
// there); "./" before a path that would read as a flag (Claude Code's
// project folders start with "-").
func relCitation(cwd, cite string) string {
	if cwd == "" || !filepath.IsAbs(cite) {
		return cite
	}
	path, rest := cite, ""
	if k := strings.IndexAny(cite, "@#"); k >= 0 {
		path, rest = cite[:k], cite[k:]
	}
	rel, err := filepath.Rel(cwd, path)
	if err != nil || rel == "." || strings.HasPrefix(rel, "..") {
		return cite
	}
	if strings.HasPrefix(rel, "-") {
		rel = "./" + rel
	}
	return rel + rest
}

// cwdCitation is a relative citation made whole from the current
// directory; ok is false for one that is whole already.
func cwdCitation(cite string) (string, bool) {
	path, rest := cite, ""
	if k := strings.IndexAny(cite, "@#"); k >= 0 {
		path, rest = cite[:k], cite[k:]
	}
	if path == "" || filepath.IsAbs(path) {
		return cite, false
	}
	abs, err := filepath.Abs(path)
	if err != nil {
		return cite, false
	}
	return abs + rest, true
}

// printTurn prints a turn around a result, dimmed, with its line.
func printTurn(w io.Writer, p Paint, t control.Turn) {
	text := t.Text
	if t.Role != "" {
		text = t.Role + ": " + text
	}
	fmt.Fprintf(w, "  %s\n", p.Wrap(SGRDim, fmt.Sprintf("L%d %s", t.Line, InertText(text))))
}

// copiesText says how often more a result's text was found, and where.
func copiesText(r control.Result) string {
	s := fmt.Sprintf("%d more of the same text", r.Copies)
	if r.Copies == 1 {
		s = "1 more of the same text"
	}
	if len(r.Folded) > 0 {
		s += ": " + strings.Join(r.Folded, ", ")
		if r.Copies > len(r.Folded) {
			s += fmt.Sprintf(", and %d more", r.Copies-len(r.Folded))
		}
	}
	return s
}
