package main

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"

	"github.com/spf13/cobra"

	"github.com/memwatch/memwatch/answer"
	"github.com/memwatch/memwatch/cmd/internal/cli"
	"github.com/memwatch/memwatch/confine"
	"github.com/memwatch/memwatch/control"
	"github.com/memwatch/memwatch/layout/registry"
	"github.com/memwatch/memwatch/policy"
	"github.com/memwatch/memwatch/recall"
	"github.com/memwatch/memwatch/secrets"
	"github.com/memwatch/memwatch/spool"
)

// secretFinding is one credential where an agent's memory holds it.
type secretFinding = control.SecretFinding

func secretsCmd(g *globals) *cobra.Command {
	var asJSON bool
	var dir string
	cmd := &cobra.Command{
		Use:   "secrets [--dir DIR] [--json]",
		Short: "List the credentials the agents' memory holds, so you know what to rotate",
		Long: `List where credentials sit in the agents' memory, as gitleaks detect lists
them in a repository: the kind (the id of one of gitleaks' rules, revision
` + secrets.Revision() + `: aws-access-token, github-pat,
private-key, ...), the file and line, when the file last
changed, and whether the agent's own file still holds it or only
memwatch's spool does (a log the agent deleted or rewrote since). Values
are never printed: memwatch show --reveal CITATION prints one for you.

It reads the files of every root you can read (or --dir's), and the spool
where you can read memwatch's state (there, a file, or a deleted log's
lines in the spool, that the daemon's count found none in, unchanged
since, is not read again). Where you cannot (a daemon run by root), the
daemon reads your roots and the spool's lines of them for you. memwatch
changes neither unless a store asks for scrub_secrets: true (the
agent's logs masked once idle, no copy kept; see docs/security.md). To
stop a credential leaking, rotate it. memwatch recall KIND (memwatch
recall aws-access-token) finds the lines that hold one, masked.

Exit status: 1 when credentials are found (as gitleaks), 0 when none are,
2 on a usage error.`,
		Example: `  memwatch secrets             # where credentials sit, newest first (exit 1 when any)
  memwatch secrets --json      # the same as JSON, values never printed
  memwatch recall --all github-pat   # the lines holding a GitHub token, masked`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			p, err := g.ReadPolicy()
			if err != nil {
				return err
			}
			if p == nil {
				p = &policy.Policy{}
			}
			stateDir := g.ResolveStateDir(p)
			var sp *spool.Spool
			var tally *answer.SavedTally
			spoolNote := fmt.Sprintf("memwatch's spool in %s is not readable by you", stateDir)
			if !stateUnreadable(stateDir) {
				// The daemon's tally: a file it counted none in, not
				// changed since, is not read again (an error: all are).
				tally, _ = answer.ReadTally(filepath.Join(stateDir, answer.TallyFile))
				if s, err := spool.OpenReadOnly(cmd.Context(), stateDir); err == nil {
					sp = s
					defer sp.Close()
				} else {
					spoolNote = fmt.Sprintf("there is no spool in %s (give the daemon's --state-dir or --policy)", stateDir)
				}
			}
			var found []secretFinding
			var more int
			fromDaemon := false
			if sp == nil && dir == "" {
				// memwatch's state is not this user's to read (a daemon run
				// by root): the daemon reads this user's roots, the spool's
				// lines of them included, as it does for recall.
				res, err := g.Control(p, stateDir).Secrets(cmd.Context())
				switch {
				case err == nil:
					found, more, fromDaemon = res.Findings, res.More, true
				case !errors.Is(err, control.ErrNoDaemon):
					fmt.Fprintf(g.Stderr, "secrets: the daemon did not answer (%v); your files alone are read\n", err)
				}
			}
			if !fromDaemon {
				var err error
				if found, err = findSecrets(cmd.Context(), p, dir, sp, tally); err != nil {
					return err
				}
			}
			if asJSON {
				if found == nil {
					found = []secretFinding{}
				}
				if err := cli.PrintJSON(g.Globals, found); err != nil {
					return err
				}
			} else {
				for _, f := range found {
					where := "the agent's file"
					switch {
					case f.Live:
					case spool.IsRecordLog(f.File):
						// A conversation of a database or a document: the
						// spool holds each as records, whether or not the
						// agent still has it.
						where = "the spool (captured from the agent's transcript)"
					default:
						where = "the spool (gone from the agent's file)"
					}
					fmt.Fprintf(g.RawOut, "%-28s %s  %s  in %s\n", f.Kind, cli.InertText(f.Cite), f.Since.Local().Format("2006-01-02 15:04"), where)
				}
			}
			switch {
			case more > 0:
				fmt.Fprintf(g.Stderr, "secrets: %d more found than listed\n", more)
			case sp == nil && !fromDaemon:
				fmt.Fprintf(g.Stderr, "secrets: %s; the agents' files alone were read\n", spoolNote)
			}
			if len(found) == 0 {
				if !asJSON {
					fmt.Fprintln(g.Stderr, "secrets: no credential found")
				}
				return nil
			}
			kinds := map[string]bool{}
			for _, f := range found {
				kinds[f.Kind] = true
			}
			if !asJSON {
				fmt.Fprintf(g.Stderr, "secrets: %d credential(s) of %d kind(s); rotate them (memwatch show --reveal CITATION prints one)\n", len(found), len(kinds))
			}
			return cli.ErrNotFound // exit 1: found, as gitleaks
		},
	}
	cmd.Flags().StringVar(&dir, "dir", "", "read this root (or directory) only")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON: kind, root, file, line, citation, live, modified")
	return cmd
}

// findSecrets reads the searchable files of the policy's roots (or dir)
// and the spool's held lines for credentials, newest first.
func findSecrets(ctx context.Context, p *policy.Policy, dir string, sp *spool.Spool, tally *answer.SavedTally) ([]secretFinding, error) {
	d := secrets.Default()
	var out answer.SecretList // the user's own process: every finding
	scan := func(root *confine.Root, srcs []recall.Source) {
		answer.SecretsInRoot(ctx, d, root, srcs, sp, tally, &out)
		root.Close()
	}
	if dir != "" {
		root, err := confine.Open(dir, confine.Options{})
		if err != nil {
			return nil, fmt.Errorf("secrets --dir %s: %w", dir, err)
		}
		srcs := answer.DefaultSources
		for _, s := range p.Stores {
			if s.MatchesRoot(root.Path()) {
				if ss, ok := registry.SearchSources(s); ok {
					srcs = ss
				}
			}
		}
		scan(root, srcs)
	} else {
		for _, s := range p.Stores {
			srcs, ok := registry.SearchSources(s)
			if !ok {
				continue
			}
			for _, id := range s.RootIDs() {
				root, err := confine.Open(id.Path, confine.Options{Within: s.Within()})
				if err != nil {
					continue // not this user's to read
				}
				scan(root, srcs)
			}
		}
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	return out.Sorted(), nil
}
