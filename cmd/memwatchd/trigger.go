package main

import (
	"context"
	"fmt"
	"path/filepath"

	"github.com/spf13/cobra"

	"github.com/memwatch/memwatch/cmd/internal/cli"
	"github.com/memwatch/memwatch/daemon"
)

func triggerCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:               "trigger STORE [ROOT]",
		ValidArgsFunction: completeStores(g),
		Short:             "Ask the running daemon to evaluate a store's rules now",
		Long: `Ask the running daemon to evaluate the rules of store STORE now (of
its root ROOT only, if given), as a change on disk or its schedule would:
what is due runs, what is not is skipped and says why in memwatch log.`,
		Example: `  memwatch trigger claude-code        # evaluate every Claude Code project now
  memwatch trigger claude-code ..     # only its root above this memory folder`,
		Args: cobra.RangeArgs(1, 2),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctl, _, _, err := g.controlFor()
			if err != nil {
				return err
			}
			req := daemon.TriggerRequest{Store: args[0]}
			if len(args) == 2 {
				root, err := filepath.Abs(args[1])
				if err != nil {
					return cli.UsageError{Err: fmt.Errorf("trigger: root %s: %w", args[1], err)}
				}
				req.Root = root
			}
			var out map[string]int
			if err := ctl.Trigger(context.Background(), req.Store, req.Root, &out); err != nil {
				return err
			}
			fmt.Fprintf(g.Stdout, "queued evaluation of %d root(s) of store %s\n", out["queued"], req.Store)
			return nil
		},
	}
}
