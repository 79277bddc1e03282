package main

import (
	"context"
	"errors"
	"fmt"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/memwatch/memwatch/cmd/internal/cli"
	"github.com/memwatch/memwatch/policy"
	"github.com/memwatch/memwatch/prune"
	"github.com/memwatch/memwatch/rotate"
	"github.com/memwatch/memwatch/state"
)

func pruneCmd(g *globals) *cobra.Command {
	var dryRun, asJSON bool
	var store string
	cmd := &cobra.Command{
		Use:   "prune [--dry-run] [--store S]",
		Short: "Apply retention now: remove or compress old archives and journal records, and say what it frees",
		Long: `Apply each store's archive retention (archive_keep, archive_max_age,
archive_max_bytes, compress_after) to every root now, as the daemon does
every hour, and print what was removed or compressed and the space freed.
The newest archive of each file is never removed; every removal and
compression is journaled (memwatch log --rule archive-prune).

The policy's journal_max_age and journal_max_bytes bound the journal
itself: older records go, except the newest of each file (the rules
decide from it) and those naming an archive still on disk. An undo of a
removed record says it was pruned.

With --dry-run nothing changes. Without retention keys everything is kept.`,
		Example: `  memwatch prune --dry-run     # what retention would remove and free; nothing removed`,
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			p, err := g.LoadPolicy()
			if err != nil {
				return err
			}
			if store != "" && !hasStore(p, store) {
				return cli.UsageError{Err: fmt.Errorf("--store %s: no such store in the policy", store)}
			}
			db, err := state.Open(context.Background(), g.ResolveStateDir(p))
			if err != nil {
				return err
			}
			defer db.Close()
			var jres *rotate.JournalResult
			if jr := prune.JournalRetention(p); jr.Active() && store == "" {
				res, err := rotate.PruneJournal(cmd.Context(), db, jr, time.Now(), dryRun)
				if err != nil {
					return err
				}
				jres = &res
			}
			reps := prune.Archives(cmd.Context(), db, p, store, time.Now(), dryRun, nil)
			if asJSON {
				if reps == nil {
					reps = []prune.ArchiveReport{}
				}
				return cli.PrintJSON(g.Globals, struct {
					Archives []prune.ArchiveReport `json:"archives"`
					Journal  *rotate.JournalResult `json:"journal,omitempty"`
				}{reps, jres})
			}
			var freed int64
			var failed error
			tw := tabwriter.NewWriter(g.Stdout, 0, 4, 2, ' ', 0)
			for _, r := range reps {
				for _, a := range r.Actions {
					op := map[string]string{"archive-prune": "remove", "archive-compress": "compress"}[a.Op]
					fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", op, r.Store, a.Archive.Path, g.Size(int64(a.Archive.Size)), a.Reason)
				}
				freed += r.Result.Freed
				if r.Error != "" {
					failed = errors.Join(failed, fmt.Errorf("%s: %s", r.Root, r.Error))
				}
			}
			tw.Flush()
			verb := "freed"
			if dryRun {
				verb = "would free"
			}
			if jres != nil {
				fmt.Fprintf(g.Stdout, "journal: %d record(s), about %s, %s; %d kept (about %s)\n", jres.Records, g.Size(int64(jres.Freed)),
					map[bool]string{true: "would go", false: "removed"}[dryRun], jres.Kept, g.Size(int64(jres.Held)))
			}
			if len(reps) == 0 {
				fmt.Fprintln(g.Stdout, "no archive to prune: every archive is within its store's retention (or no store sets one)")
			} else {
				fmt.Fprintf(g.Stdout, "%s %s\n", verb, g.Size(int64(freed)))
			}
			return failed
		},
	}
	cmd.Flags().BoolVar(&dryRun, "dry-run", false, "only say what would be removed or compressed")
	cmd.Flags().StringVar(&store, "store", "", "only this store")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}

func hasStore(p *policy.Policy, name string) bool {
	for _, s := range p.Stores {
		if s.Name == name {
			return true
		}
	}
	return false
}
