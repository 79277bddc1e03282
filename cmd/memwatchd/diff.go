package main

import (
	"fmt"
	"os"
	"strconv"
	"strings"

	"github.com/pmezard/go-difflib/difflib"
	"github.com/spf13/cobra"

	"github.com/memwatch/memwatch/cmd/internal/cli"
)

func diffCmd(g *globals) *cobra.Command {
	var host, color string
	var noPager bool
	cmd := &cobra.Command{
		Use:   "diff OLD NEW",
		Short: "Show what changed between two versions, an archive and a file (compressed archives too)",
		Long: `Print a unified diff from OLD to NEW, e.g. from an archive memwatch made
before a compaction (memory/2026-01-15-1430.md) to the file as it is now.
Either file may be an archive that retention compressed (ARCHIVE.gz): it
is read decompressed, so the diff shows the text. FILE@N is version N of
a memory file (memwatch versions FILE lists them).

On a central node (fleet:), HOST:PATH@N is version N of a host's memory
file (memwatch versions HOST:PATH lists them); --host HOST takes both as
that host's (memwatch diff --host box-1 /p/MEMORY.md@2 /p/MEMORY.md@3).

Nothing is written.`,
		Example: `  memwatch diff MEMORY.md@1 MEMORY.md      # what changed since version 1
  memwatch diff MEMORY.md@1 MEMORY.md@2    # between two versions`,
		Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			var text, label [2]string
			var src *versionSource
			defer func() {
				if src != nil {
					src.close()
				}
			}()
			for i, path := range args {
				if host != "" {
					at := strings.LastIndex(path, "@")
					if at < 0 {
						return cli.UsageError{Err: fmt.Errorf("with --host, give versions: PATH@N, not %q", path)}
					}
					hp, err := onHost(host, path[:at])
					if err != nil {
						return err
					}
					path = hp + path[at:]
				}
				label[i] = path
				if p, n, ok := versionArg(path); ok {
					var err error
					if src == nil {
						if src, err = g.versionSource(); err != nil {
							return err
						}
					}
					b, err := src.content(cmd.Context(), p, n)
					if err != nil {
						return err
					}
					text[i] = string(b)
					continue
				}
				b, err := readMaybeCompressed(path)
				if err != nil {
					return err
				}
				text[i] = string(b)
			}
			if text[0] == text[1] {
				fmt.Fprintf(g.Stdout, "%s and %s hold the same text\n", label[0], label[1])
				return nil
			}
			d, err := difflib.GetUnifiedDiffString(difflib.UnifiedDiff{
				A: difflib.SplitLines(text[0]), B: difflib.SplitLines(text[1]),
				FromFile: label[0], ToFile: label[1], Context: 3,
			})
			if err != nil {
				return fmt.Errorf("diff %s %s: %w", args[0], args[1], err)
			}
			if !strings.HasSuffix(d, "\n") {
				d += "\n"
			}
			colored, err := cli.UseColor(color, g.RawOut)
			if err != nil {
				return err
			}
			g.Page(g.TerminalText(d, colored, diffColour), noPager)
			return nil
		},
	}
	cmd.Flags().StringVar(&host, "host", "", "on a central node (fleet:), both versions are this host's")
	cmd.Flags().StringVar(&color, "color", "auto", "colour the output: auto (on a terminal), always or never")
	cmd.Flags().BoolVar(&noPager, "no-pager", false, "never page the output")
	return cmd
}

// diffColour colours a unified diff as git diff does.
func diffColour(line string) string {
	switch {
	case strings.HasPrefix(line, "---"), strings.HasPrefix(line, "+++"):
		return cli.SGRHeader
	case strings.HasPrefix(line, "@@"):
		return cli.SGRHunk
	case strings.HasPrefix(line, "-"):
		return cli.SGRDel
	case strings.HasPrefix(line, "+"):
		return cli.SGRAdd
	}
	return ""
}

// versionArg reads FILE@N (N a version number) when FILE is not itself a
// file of that name.
func versionArg(arg string) (string, int64, bool) {
	i := strings.LastIndex(arg, "@")
	if i < 0 {
		return "", 0, false
	}
	if _, err := os.Stat(arg); err == nil {
		return "", 0, false
	}
	n, err := strconv.ParseInt(arg[i+1:], 10, 64)
	if err != nil || n < 1 {
		return "", 0, false
	}
	p, err := absOrHost(arg[:i])
	return p, n, err == nil
}
