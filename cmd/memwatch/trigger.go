//go:build !lean

package main

import (
	"context"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/memwatch/memwatch/daemon"
)

func triggerCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:               "trigger STORE [ROOT]",
		ValidArgsFunction: completeStores(g),
		Short:             "Ask the running daemon to evaluate a store's rules now",
		Args:              cobra.RangeArgs(1, 2),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctl, _, _, err := g.controlFor()
			if err != nil {
				return err
			}
			req := daemon.TriggerRequest{Store: args[0]}
			if len(args) == 2 {
				req.Root = args[1]
			}
			var out map[string]int
			if err := ctl.Trigger(context.Background(), req.Store, req.Root, &out); err != nil {
				return err
			}
			fmt.Fprintf(g.stdout, "queued evaluation of %d root(s) of store %s\n", out["queued"], req.Store)
			return nil
		},
	}
}
