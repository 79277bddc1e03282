package main

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/spf13/cobra"

	"github.com/memwatch/memwatch/answer"
	"github.com/memwatch/memwatch/control"
)

// Completion that knows the policy (memwatch __complete, which the shells'
// completion scripts run): store names, record ids, --scope values.

// completeStores completes a store name of the policy the command uses.
func completeStores(g *globals) cobra.CompletionFunc {
	return func(cmd *cobra.Command, args []string, toComplete string) ([]cobra.Completion, cobra.ShellCompDirective) {
		if len(args) > 0 {
			return nil, cobra.ShellCompDirectiveDefault // ROOT: a directory
		}
		p, err := g.ReadPolicy()
		if err != nil || p == nil {
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		var out []cobra.Completion
		for _, s := range p.Stores {
			if strings.HasPrefix(s.Name, toComplete) {
				out = append(out, cobra.CompletionWithDesc(s.Name, s.Layout))
			}
		}
		return out, cobra.ShellCompDirectiveNoFileComp
	}
}

// completeRecords completes a journal record id: the newest first, each
// with its one-line summary.
func completeRecords(g *globals) cobra.CompletionFunc {
	return func(cmd *cobra.Command, args []string, toComplete string) ([]cobra.Completion, cobra.ShellCompDirective) {
		if len(args) > 0 {
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		j, err := g.OpenJournal(cmd.Context())
		if err != nil {
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		defer j.Close()
		recs, err := j.Read(cmd.Context(), control.JournalQuery{Limit: 20})
		if err != nil {
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		var out []cobra.Completion
		for _, r := range recs {
			id := strconv.FormatInt(r.ID, 10)
			if strings.HasPrefix(id, toComplete) {
				out = append(out, cobra.CompletionWithDesc(id, fmt.Sprintf("%s %s %s %s", r.Time.Local().Format("01-02 15:04"), r.Outcome, r.Rule, r.Target)))
			}
		}
		return out, cobra.ShellCompDirectiveNoFileComp | cobra.ShellCompDirectiveKeepOrder
	}
}

// completeScope completes recall's --scope: all, or the sources.
func completeScope(g *globals) cobra.CompletionFunc {
	return func(cmd *cobra.Command, args []string, toComplete string) ([]cobra.Completion, cobra.ShellCompDirective) {
		p, _ := g.ReadPolicy()
		return append([]cobra.Completion{"all"}, answer.Labels(p)...), cobra.ShellCompDirectiveNoFileComp
	}
}
