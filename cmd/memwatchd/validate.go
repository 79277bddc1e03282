package main

import (
	"fmt"
	"strings"

	"github.com/spf13/cobra"

	"github.com/memwatch/memwatch/layout/registry"
	"github.com/memwatch/memwatch/policy"
	"github.com/memwatch/memwatch/watcher"
)

func validateCmd(g *globals) *cobra.Command {
	var strict, expand bool
	cmd := &cobra.Command{
		Use:   "validate [--policy PATH] [--strict] [--expand]",
		Short: "Check a policy and show what it would maintain",
		Long: `Check a policy file or directory. Exit 0 with a summary of the stores and
how many roots each glob matches now, or exit 2 listing every error as
FILE:LINE:COLUMN: message.

Warnings flag what is valid but probably wrong: a store path that starts at /
or reaches a system directory (/proc, /sys, /dev, /etc, ...), or one that
overlaps memwatch's state directory. --strict makes them errors.

--expand prints the policy with every key spelled out: the top level and its
sections, what each preset (` + strings.Join(policy.PresetNames(), ", ") + `)
stands for, and every default, ready to copy and edit (a key with no value
as a comment saying what it is for).

The keys (docs/policy.md, "Every key", says what each means, its default and
bounds):

` + policy.KeySummary(registry.Specs()),
		Example: `  memwatch validate            # check the policy every command reads
  memwatch validate --expand   # and show every key its presets stand for`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			p, err := g.LoadPolicy()
			if err != nil {
				return err
			}
			warns := p.Warnings(g.daemonStateDir(p))
			if strict && len(warns) > 0 {
				return warns
			}
			w := g.Stdout
			for _, warn := range warns {
				fmt.Fprintf(g.Stderr, "warning: %s\n", warn)
			}
			if expand {
				fmt.Fprint(w, expandPolicy(p))
				return nil
			}
			fmt.Fprintf(w, "policy OK: %s\n", strings.Join(p.Files, ", "))
			if p.Fleet != nil {
				fmt.Fprintf(w, "fleet: a central node, following every host that replicates to %s/<host> (read-only; at most %d hosts, checked every %v)\n", strings.TrimSuffix(p.Fleet.URL, "/"), p.Fleet.MaxHosts, p.Fleet.Interval)
			}
			if len(p.Stores) == 0 && p.Fleet == nil {
				fmt.Fprintln(w, "no stores configured: memwatch will run idle until one is added")
			}
			for _, s := range p.Stores {
				compactor := s.Compactor
				if s.Compactor == "llm" {
					ep := p.LLM[s.LLM]
					compactor = fmt.Sprintf("llm (%s: %s at %s)", s.LLM, ep.Model, ep.BaseURL)
				}
				layout := "layout " + s.Layout
				if s.Preset != "" {
					layout = fmt.Sprintf("preset %s (layout %s)", s.Preset, s.Layout)
				}
				fmt.Fprintf(w, "store %s: %s, compactor %s, settle %v\n", s.Name, layout, compactor, s.Settle)
				for _, glob := range s.Paths {
					n := 0
					for _, r := range s.Roots() {
						if ok, _ := matchGlob(glob, r); ok {
							n++
						}
					}
					fmt.Fprintf(w, "  %s: %d root(s) now\n", glob, n)
				}
			}
			for name, ep := range p.LLM {
				key := "no key"
				switch {
				case ep.APIKeyEnv != "":
					key = "key from $" + ep.APIKeyEnv
				case ep.APIKeyFile != "":
					key = "key from " + ep.APIKeyFile
				}
				fmt.Fprintf(w, "llm %s: %s at %s, %s, timeout %v, budget %d tokens/day\n", name, ep.Model, ep.BaseURL, key, ep.Timeout, ep.DailyTokenBudget)
			}
			return nil
		},
	}
	cmd.Flags().BoolVar(&strict, "strict", false, "treat warnings as errors (exit 2)")
	cmd.Flags().BoolVar(&expand, "expand", false, "print the policy with presets expanded and every key and default spelled out")
	return cmd
}

// expandPolicy renders the policy with every key spelled out (presets
// expanded, defaults written, an automatic max_watches as what it is here).
func expandPolicy(p *policy.Policy) string {
	return policy.Expand(p, watcher.AutoMaxWatches())
}
