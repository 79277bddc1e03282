package main

import (
	"fmt"
	"strings"

	"github.com/pmezard/go-difflib/difflib"
	"github.com/spf13/cobra"

	"github.com/memwatch/memwatch/rewrite"
)

func diffCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "diff OLD NEW",
		Short: "Show what changed between an archive and a file (compressed archives too)",
		Long: `Print a unified diff from OLD to NEW, e.g. from an archive memwatch made
before a compaction to the file as it is now:

  memwatch diff memory/2026-01-15-1430.md memory.md

Either file may be an archive that retention compressed (ARCHIVE.gz): it
is read decompressed, so the diff shows the text. Nothing is written.`,
		Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			var text [2]string
			for i, path := range args {
				b, err := readMaybeCompressed(path)
				if err != nil {
					return err
				}
				text[i] = string(b)
			}
			if text[0] == text[1] {
				fmt.Fprintf(g.stdout, "%s and %s hold the same text\n", args[0], args[1])
				return nil
			}
			d, err := difflib.GetUnifiedDiffString(difflib.UnifiedDiff{
				A: difflib.SplitLines(text[0]), B: difflib.SplitLines(text[1]),
				FromFile: args[0], ToFile: args[1], Context: 3,
			})
			if err != nil {
				return fmt.Errorf("diff %s %s: %w", args[0], args[1], err)
			}
			if !strings.HasSuffix(d, "\n") {
				d += "\n"
			}
			_, err = fmt.Fprint(g.stdout, d)
			return err
		},
	}
}

// readMaybeCompressed reads a file the way show and diff do: through a
// confined root, a .gz archive decompressed.
func readMaybeCompressed(path string) ([]byte, error) {
	root, file, err := fileRoot(path)
	if err != nil {
		return nil, err
	}
	defer root.Close()
	b, err := root.ReadFile(file)
	if err != nil {
		return nil, err
	}
	if strings.HasSuffix(file, ".gz") {
		var ok bool
		if b, ok = rewrite.Unpack(b); !ok {
			return nil, fmt.Errorf("read %s: not a gzip file memwatch can read", path)
		}
	}
	return b, nil
}
