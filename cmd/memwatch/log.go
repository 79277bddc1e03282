package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"

	"github.com/spf13/cobra"

	"github.com/memwatch/memwatch/state"
)

func logCmd(g *globals) *cobra.Command {
	var f state.Filter
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "log [--policy P | --state-dir DIR]",
		Short: "Print the action journal: what memwatch did, newest first",
		Long: `Print the action journal, whether or not the daemon runs. Each record has an
id (for memwatch undo), the time, store, root, rule, target, outcome
(done, skipped, rejected, failed) and why, the archive of the pre-image,
sizes and LLM tokens.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			var dir string
			if g.policy != "" {
				p, err := g.loadPolicy()
				if err != nil {
					return err
				}
				dir = g.resolveStateDir(p)
			} else {
				dir = g.resolveStateDir(nil)
			}
			if _, err := os.Stat(filepath.Join(dir, state.FileName)); err != nil {
				return fmt.Errorf("no journal in %s (is --state-dir or --policy right?): %w", dir, err)
			}
			db, err := state.Open(context.Background(), dir)
			if err != nil {
				return err
			}
			defer db.Close()
			recs, err := db.Journal(context.Background(), f)
			if err != nil {
				return err
			}
			if asJSON {
				if recs == nil {
					recs = []state.Record{}
				}
				enc := json.NewEncoder(g.stdout)
				enc.SetIndent("", "  ")
				return enc.Encode(recs)
			}
			fmt.Fprint(g.stdout, state.FormatJournal(recs, f != (state.Filter{Limit: f.Limit})))
			return nil
		},
	}
	cmd.Flags().StringVar(&f.Store, "store", "", "only this store")
	cmd.Flags().StringVar(&f.Root, "root", "", "only this root")
	cmd.Flags().StringVar(&f.Rule, "rule", "", "only this rule (e.g. compact)")
	cmd.Flags().IntVar(&f.Limit, "limit", 50, "at most this many records")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}
