package main

import (
	"fmt"
	"slices"
	"strings"

	"github.com/spf13/cobra"

	"github.com/memwatch/memwatch/cmd/internal/cli"
	"github.com/memwatch/memwatch/layout/nowhistory"
)

func snapshotCmd(g *globals) *cobra.Command {
	var variant string
	cmd := &cobra.Command{
		Use:   "snapshot FILE",
		Short: "Print the injection-ready view of a now-history memory.md",
		Long: `Print the view of memory.md an agent platform injects before a run:
guidance when the file does not exist, the full content up
to 30 lines, and above that the whole "# now" block, the heading outline
with line numbers, and the newest run files in memory/run/. --variant full
or structure forces one form whatever the size.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if !slices.Contains(nowhistory.Variants, variant) {
				return cli.UsageError{Err: fmt.Errorf("--variant: want %s, not %q", strings.Join(nowhistory.Variants, ", "), variant)}
			}
			root, file, err := fileRoot(args[0])
			if err != nil {
				return err
			}
			defer root.Close()
			s, err := nowhistory.SnapshotVariant(root, file, variant)
			if err != nil {
				return err
			}
			fmt.Fprint(g.Stdout, s)
			return nil
		},
	}
	cmd.Flags().StringVar(&variant, "variant", nowhistory.VariantAuto, "auto (by size), full or structure")
	return cmd
}
