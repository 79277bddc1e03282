package main

import (
	"errors"
	"fmt"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"

	"github.com/memwatch/memwatch/layout/sessiondetail"
	"github.com/memwatch/memwatch/policy"
)

func recallCmd(g *globals) *cobra.Command {
	var dir, scope, store string
	var limit int
	var all, asJSON bool
	cmd := &cobra.Command{
		Use:   "recall --dir SESSION [--scope all|detail|messages] [--limit N] [--json] QUERY...",
		Short: "Search a session's detail/ notes and raw log, with citations",
		Long: `Search a session-detail session (seed 003's recall_memory): the notes in
working-memory/detail/ and the raw messages.jsonl, case-insensitively. Several
words match lines holding all of them; a query in double quotes matches the
exact phrase. Log hits show the decoded message, not raw JSON. Results come
detail first, then messages, newest first, with citations such as
detail/auth.md#L10 or messages.jsonl#L45. --all searches every session root
of the store (from --policy) and cites the session directory.`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			q, err := sessiondetail.ParseQuery(strings.Join(args, " "))
			if err != nil {
				return usageError{err}
			}
			if scope != "all" && scope != "detail" && scope != "messages" {
				return usageError{fmt.Errorf("--scope must be all, detail or messages, not %q", scope)}
			}
			opts := sessiondetail.Options{Scope: scope, Limit: limit}
			switch {
			case all:
				roots, err := g.storeRoots(dir, store)
				if err != nil {
					return err
				}
				opts.Roots, opts.Session = roots, true
			case dir == "":
				return usageError{errors.New("--dir SESSION is required (or --all with --policy)")}
			default:
				opts.Roots = []string{dir}
			}
			results, err := sessiondetail.Recall(q, opts)
			if err != nil {
				return err
			}
			if asJSON {
				if results == nil {
					results = []sessiondetail.Result{}
				}
				return printJSON(g, results)
			}
			fmt.Fprint(g.stdout, sessiondetail.Format(q, results))
			return nil
		},
	}
	cmd.Flags().StringVar(&dir, "dir", "", "session directory (holding messages.jsonl and working-memory/)")
	cmd.Flags().StringVar(&scope, "scope", "all", "all, detail or messages")
	cmd.Flags().IntVar(&limit, "limit", 5, "at most this many results")
	cmd.Flags().BoolVar(&all, "all", false, "search every session root of the store (needs --policy)")
	cmd.Flags().StringVar(&store, "store", "", "with --all: the store (default: the one whose root contains --dir, or the only session-detail store)")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON (seed 003's SearchResult fields)")
	return cmd
}

// storeRoots finds the session-detail store for --all.
func (g *globals) storeRoots(dir, name string) ([]string, error) {
	p, err := g.loadPolicy()
	if err != nil {
		return nil, err
	}
	var cands []*policy.Store
	for _, s := range p.Stores {
		if s.Layout == "session-detail" && (name == "" || s.Name == name) {
			cands = append(cands, s)
		}
	}
	if dir != "" && name == "" {
		abs, _ := filepath.Abs(dir)
		for _, s := range cands {
			for _, r := range s.Roots() {
				if r == abs {
					return s.Roots(), nil
				}
			}
		}
	}
	if len(cands) != 1 {
		return nil, usageError{fmt.Errorf("--all: name the session-detail store with --store (found %d)", len(cands))}
	}
	return cands[0].Roots(), nil
}
