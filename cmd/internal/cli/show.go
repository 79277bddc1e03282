package cli

import (
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/spf13/cobra"

	"github.com/memwatch/memwatch/control"
)

func ShowCmd(g *Globals) *cobra.Command {
	var dir, color string
	var raw bool
	var around int
	cmd := &cobra.Command{
		Use:   "show [--dir ROOT] [-C N] [--raw] CITATION|ARCHIVE",
		Short: "Print the lines a citation names (even after the agent rewrote its log), or an archive",
		Long: `Print the log lines a citation names, as memwatch writes them in history
entries, summaries and recall results: PATH#L10-20 (lines of the log as it
first was) or PATH@3#L10-20 (its third version, after the agent rewrote it).
A message is printed as role: text; --raw prints the line as stored.
A credential in it (a key, a token, a password: gitleaks' rules) is
masked as [REDACTED:kind]; --reveal prints it, for the file's owner.
PATH is relative to ROOT (default: the current directory); a citation with
a whole path, as recall prints for several roots, finds its root. While
those lines are still in the live file they come from there; once the agent
has trimmed, cleared or rewritten it, they come from memwatch's spool, which
keeps every line it captured. -C N shows N lines before and after (the
turns around a message).

Given a file instead (an archive such as memory/2026-01-15-1430.md, one
retention compressed, memory/2026-01-15-1430.md.gz, or a kept copy such as
.memwatch/archive/memory.md.kept-20260115-143000 that memwatch status and
memwatch log --kept list), it prints its content, decompressed.

Exit status: 0 when the lines are shown, 1 when there are no such lines
(past the file's end, a log memwatch never saw), 2 on a usage error.`,
		Example: `  memwatch show MEMORY.md#L3           # line 3 of a memory file, with the lines around it
  memwatch show -C 10 MEMORY.md#L3-5   # lines 3 to 5, ten either side
  memwatch show MEMORY.md              # the whole file`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			colored, err := UseColor(color, g.RawOut)
			if err != nil {
				return err
			}
			if !strings.Contains(args[0], "#L") {
				if fi, err := os.Stat(args[0]); err == nil && fi.Mode().IsRegular() {
					return g.Backend.ShowArchive(args[0], raw, Paint(colored))
				}
			}
			cite := args[0]
			if around < 0 || around > 1000 {
				return UsageError{fmt.Errorf("-C %d: give a number from 0 to 1000", around)}
			}
			if around > 0 {
				if cite, err = widenCitation(cite, around); err != nil {
					return UsageError{err}
				}
			}
			lines, where, err := g.Backend.ShowCitation(cmd.Context(), cite, dir)
			if abs, ok := cwdCitation(cite); err != nil && ok && dir == "" {
				// A path relative to the current directory above its
				// root, as recall prints it (rg's way): by its whole path.
				if l, w, aerr := g.Backend.ShowCitation(cmd.Context(), abs, dir); aerr == nil {
					lines, where, err = l, w, nil
				}
			}
			if err != nil {
				return notFoundError(err)
			}
			shown := 0
			for _, l := range lines {
				if l.Source != "missing" {
					shown++
				}
			}
			if shown == 0 {
				return notFoundError(fmt.Errorf("show %s: no such line", args[0]))
			}
			PrintShown(g, cite, where, lines, raw, Paint(colored))
			return nil
		},
	}
	cmd.Flags().StringVar(&dir, "dir", "", "the root the citation's path is relative to (default: the current directory; a citation with a whole path, as recall prints for several roots, finds its root)")
	cmd.Flags().IntVarP(&around, "context", "C", 0, "show N lines before and after the cited ones")
	cmd.Flags().BoolVar(&raw, "raw", false, "print each line as stored (a log's JSON), not decoded")
	cmd.Flags().BoolVar(&g.Reveal, "reveal", false, "print credentials as they are (they are masked, [REDACTED:kind]): yours only, through the daemon")
	cmd.Flags().StringVar(&color, "color", "auto", "colour the output: auto (on a terminal), always or never")
	return cmd
}

// widenCitation widens a citation's lines (PATH#L10 or PATH#L10-20) by n
// on each side; the first line is at least 1, and lines past the file's
// end are not shown. A citation without lines is a usage error.
func widenCitation(cite string, n int) (string, error) {
	i := strings.LastIndex(cite, "#L")
	if i < 0 {
		return "", fmt.Errorf("-C needs a citation with lines (PATH#L10), not %q", cite)
	}
	from, to, ok := strings.Cut(cite[i+2:], "-")
	if !ok {
		to = from
	}
	a, err1 := strconv.ParseInt(from, 10, 64)
	b, err2 := strconv.ParseInt(to, 10, 64)
	if err1 != nil || err2 != nil || a < 1 || b < a {
		return "", fmt.Errorf("%q: want lines as #L10 or #L10-20", cite)
	}
	return fmt.Sprintf("%s#L%d-%d", cite[:i], max(1, a-int64(n)), b+int64(min(int64(n), math.MaxInt64-b))), nil
}

// notFoundError is a show that found nothing: said, exit 1.
func notFoundError(err error) error {
	if errors.Is(err, control.ErrUsage) {
		return UsageError{err}
	}
	return err
}

// PrintShown prints the lines of a citation: a header saying where they
// came from, then each line, decoded unless raw.
func PrintShown(g *Globals, cite, where string, lines []control.Shown, raw bool, p Paint) {
	fmt.Fprintf(g.RawOut, "%s %s\n", p.Wrap(SGRPath, InertText(filepath.ToSlash(cite))), p.Wrap(SGRDim, "(from "+where+")"))
	for _, l := range lines {
		text := l.Text
		if raw || text == "" {
			text = strings.ToValidUTF8(string(l.Data), "\uFFFD")
		}
		switch l.Source {
		case "pruned":
			text = "[pruned from the spool by retention]"
		case "missing":
			text = "[no such line in that version of the file]"
		case "omitted":
			text = "[not shown: past the bound of one answer]"
		}
		fmt.Fprintf(g.RawOut, "%s %s\n", p.Wrap(SGRLine, fmt.Sprintf("L%d:", l.Line)), InertText(text))
	}
}
