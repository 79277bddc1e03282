package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"text/tabwriter"
	"time"

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
			printJournal(g, recs)
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

func printJournal(g *globals, recs []state.Record) {
	if len(recs) == 0 {
		fmt.Fprintln(g.stdout, "journal is empty: memwatch has not changed anything yet")
		return
	}
	tw := tabwriter.NewWriter(g.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tTIME\tSTORE\tRULE\tTARGET\tOUTCOME\tSIZE\tARCHIVE\tREASON")
	for _, r := range recs {
		size := fmt.Sprintf("%d→%d", r.BeforeSize, r.AfterSize)
		if r.Tokens > 0 {
			size += fmt.Sprintf(" (%d tok)", r.Tokens)
		}
		target := filepath.Join(filepath.Base(r.Root), r.Target)
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", r.ID, r.Time.Local().Format(time.DateTime), r.Store, r.Rule, target, r.Outcome, size, dash(r.Archive), r.Reason)
	}
	tw.Flush()
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
