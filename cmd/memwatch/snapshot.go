package main

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/memwatch/memwatch/layout/nowhistory"
)

func snapshotCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "snapshot FILE",
		Short: "Print the injection-ready view of a now-history memory.md",
		Long: `Print the view of memory.md an agent platform injects before a run (seed
000, 3.2/3.3): guidance when the file does not exist, the full content up
to 30 lines, and above that the whole "# now" block, the heading outline
with line numbers, and the newest run files in memory/run/.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			root, file, err := fileRoot(args[0])
			if err != nil {
				return err
			}
			defer root.Close()
			s, err := nowhistory.Snapshot(root, file)
			if err != nil {
				return err
			}
			fmt.Fprint(g.stdout, s)
			return nil
		},
	}
}
