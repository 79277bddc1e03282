//go:build !lean

package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/spf13/cobra"

	"github.com/memwatch/memwatch/layout/registry"
	"github.com/memwatch/memwatch/policy"
	"github.com/memwatch/memwatch/rewrite"
	"github.com/memwatch/memwatch/state"
)

func logCmd(g *globals) *cobra.Command {
	var f state.Filter
	var asJSON, kept bool
	cmd := &cobra.Command{
		Use:   "log [--policy P | --state-dir DIR]",
		Short: "Print the action journal: what memwatch did, newest first",
		Long: `Print the action journal, whether or not the daemon runs. Each record has an
id (for memwatch undo), the time, store, root, rule, target, outcome
(done, skipped, rejected, failed) and why, the archive of the pre-image,
sizes and LLM tokens.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			p, err := g.readPolicy()
			if err != nil {
				return err
			}
			if kept {
				if f.Rule != "" && f.Rule != rewrite.RuleKept {
					return usageError{fmt.Errorf("--kept lists the kept copies; it cannot be combined with --rule %s", f.Rule)}
				}
				f.Rule = rewrite.RuleKept
			}
			dir := g.resolveStateDir(p)
			if stateUnreadable(dir) {
				// The journal is memwatch's: the daemon gives this user the
				// records of its own roots.
				v := url.Values{"limit": {strconv.Itoa(f.Limit)}}
				for k, val := range map[string]string{"store": f.Store, "root": f.Root, "rule": f.Rule} {
					if val != "" {
						v.Set(k, val)
					}
				}
				var recs []state.Record
				if err := g.control(p, dir).do(cmd.Context(), "GET", "/v1/journal?"+v.Encode(), nil, &recs); err != nil {
					return fmt.Errorf("no journal in %s you can read, and the daemon did not answer: %w", dir, err)
				}
				return printJournal(g, recs, f, asJSON)
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
			if len(recs) == 0 && (f.Store != "" || f.Rule != "") {
				if err := checkNames(context.Background(), db, p, f); err != nil {
					return err
				}
			}
			if asJSON {
				return printJournal(g, recs, f, true)
			}
			printJournal(g, recs, f, false)
			if f.Rule != rewrite.RuleKept {
				// Kept copies are backups the agent never reads: say there are some.
				all, err := db.Journal(context.Background(), state.Filter{Store: f.Store, Root: f.Root, Rule: rewrite.RuleKept})
				if err == nil && len(all) > 0 {
					fmt.Fprintf(g.stdout, "\n%d kept copies (an agent's version met during a rewrite, kept as a backup; its lines are in the live file): memwatch log --kept\n", len(all))
				}
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&f.Store, "store", "", "only this store")
	cmd.Flags().StringVar(&f.Root, "root", "", "only this root")
	cmd.Flags().StringVar(&f.Rule, "rule", "", "only this rule (e.g. compact)")
	cmd.Flags().IntVar(&f.Limit, "limit", 50, "at most this many records")
	cmd.Flags().BoolVar(&kept, "kept", false, "only the kept copies (backups of an agent's version met during a rewrite); memwatch show prints one")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}

// checkNames refuses a --store or --rule that names nothing: neither a
// store of the policy nor a store or rule the journal has ever recorded.
func checkNames(ctx context.Context, db *state.DB, p *policy.Policy, f state.Filter) error {
	stores, rules, err := db.JournalNames(ctx)
	if err != nil {
		return err
	}
	layouts := registry.Names()
	if p != nil {
		layouts = nil
		for _, s := range p.Stores {
			if !slices.Contains(stores, s.Name) {
				stores = append(stores, s.Name)
			}
			layouts = append(layouts, s.Layout)
		}
	}
	// The rules of the safe rewrite and of the layouts in use are valid
	// even before they acted.
	for _, r := range []string{rewrite.RuleKept, rewrite.RuleRestore, "undo"} {
		if !slices.Contains(rules, r) {
			rules = append(rules, r)
		}
	}
	for _, name := range layouts {
		if l, ok := registry.For(name); ok {
			for _, r := range l.Rules() {
				if !slices.Contains(rules, r.Name) {
					rules = append(rules, r.Name)
				}
			}
		}
	}
	slices.Sort(rules)
	if f.Store != "" && !slices.Contains(stores, f.Store) {
		return usageError{fmt.Errorf("--store %s: no such store (known: %s)", f.Store, strings.Join(stores, ", "))}
	}
	if f.Rule != "" && !slices.Contains(rules, f.Rule) {
		return usageError{fmt.Errorf("--rule %s: no such rule (known: %s)", f.Rule, strings.Join(rules, ", "))}
	}
	return nil
}

// printJournal prints journal records as memwatch log does.
func printJournal(g *globals, recs []state.Record, f state.Filter, asJSON bool) error {
	if asJSON {
		if recs == nil {
			recs = []state.Record{}
		}
		enc := json.NewEncoder(g.stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(recs)
	}
	fmt.Fprint(g.stdout, state.FormatJournal(recs, f.Store != "" || f.Root != "" || f.Rule != ""))
	return nil
}
