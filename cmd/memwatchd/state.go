package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/spf13/cobra"

	"github.com/memwatch/memwatch/cmd/internal/cli"
	"github.com/memwatch/memwatch/confine"
	"github.com/memwatch/memwatch/policy"
	"github.com/memwatch/memwatch/replica"
	"github.com/memwatch/memwatch/spool"
	"github.com/memwatch/memwatch/state"
	"github.com/memwatch/memwatch/versions"
)

func stateCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "state",
		Short: "The state directory: restore it from the replica bucket",
		Args:  cobra.NoArgs,
	}
	cmd.AddCommand(stateRestoreCmd(g))
	return cmd
}

func stateRestoreCmd(g *globals) *cobra.Command {
	var force bool
	cmd := &cobra.Command{
		Use:   "restore [--state-dir D] [--force]",
		Short: "Rebuild the state directory from the bucket the policy replicates to",
		Long: `Rebuild memwatch's state on a new host from the replica the policy's
replicate: names: the journal, the spool (every session line captured) and
every version of every memory file, as they were a fraction of a second
before the old host stopped. The recall index is rebuilt by the daemon.
On a new host, with the old host's policy in place: memwatch state restore,
then memwatch run (or start the service), then memwatch restore --missing
ROOT for each root, to put back the memory files that are not on disk.

It refuses a state directory that holds anything (give --force to replace
its databases) and a running daemon's.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			p, err := g.LoadPolicy()
			if err != nil {
				return err
			}
			if p.Replicate == nil {
				return cli.UsageError{Err: fmt.Errorf("%s has no replicate: section: there is no bucket to restore from", g.Policy)}
			}
			dir := g.daemonStateDir(p)
			if force {
				lock, err := state.TryLock(dir)
				if err != nil {
					return fmt.Errorf("restore into %s: %w (stop the daemon first)", dir, err)
				}
				defer lock.Unlock()
			}
			log, err := g.logger()
			if err != nil {
				return err
			}
			res, err := replica.Restore(cmd.Context(), p.Replicate, dir, force, log)
			if errors.Is(err, replica.ErrNotEmpty) {
				return cli.UsageError{Err: err}
			}
			if err != nil {
				return err
			}
			found := 0
			for _, r := range res {
				if !r.Found {
					fmt.Fprintf(g.Stdout, "%s: nothing in the bucket (the daemon starts it afresh)\n", r.Name)
					continue
				}
				found++
				fmt.Fprintf(g.Stdout, "%s: restored, %s\n", r.Name, g.Size(int64(r.Bytes)))
			}
			if found == 0 {
				return fmt.Errorf("%s holds no state of memwatch's: check replicate.url and the credentials", p.Replicate.URL)
			}
			// What was captured on the old host belongs to its directories
			// (their device and inode numbers): here it goes to the first
			// directory found at the same path with the same owner.
			if n, err := unbindRestored(cmd.Context(), dir, p); err != nil {
				return fmt.Errorf("restored %s, but could not unbind its roots from the old host's directories: %w", dir, err)
			} else if n > 0 {
				fmt.Fprintf(g.Stdout, "%d root(s) of the old host; each goes to the directory found at its path with the same owner (those of the policy found here now: at once)\n", n)
			}
			fmt.Fprintf(g.Stdout, "restored %s from %s; next: start the daemon, then memwatch restore --missing ROOT for memory files not on disk\n", dir, p.Replicate.URL)
			return nil
		},
	}
	cmd.Flags().BoolVar(&force, "force", false, "replace the databases of a state directory that holds some")
	return cmd
}

// unbindRestored unbinds the spool's and the versions' roots of a state
// restored into dir (spool.Spool.Unbind, versions.Store.Unbind), then
// binds those of the policy's roots found here now, each opened as the
// daemon opens it (the same owner takes them): what was restored is
// searchable at once, before the daemon first runs. It returns how many
// roots were unbound.
func unbindRestored(ctx context.Context, dir string, p *policy.Policy) (int, error) {
	var ids []confine.ID
	for _, s := range p.Stores {
		for _, r := range s.Roots() {
			if root, err := s.OpenRoot(r); err == nil {
				ids = append(ids, root.ID())
				root.Close()
			}
		}
	}
	n := 0
	if _, err := os.Stat(filepath.Join(dir, spool.FileName)); err == nil {
		sp, err := spool.Open(ctx, dir)
		if err != nil {
			return n, err
		}
		m, err := sp.Unbind(ctx)
		for _, id := range ids {
			sp.Bind(ctx, id)
		}
		sp.Close()
		if err != nil {
			return n, err
		}
		n = max(n, m)
	}
	if _, err := os.Stat(filepath.Join(dir, versions.FileName)); err == nil {
		vs, err := versions.Open(ctx, dir)
		if err != nil {
			return n, err
		}
		m, err := vs.Unbind(ctx)
		for _, id := range ids {
			vs.Bind(ctx, id)
		}
		vs.Close()
		if err != nil {
			return n, err
		}
		n = max(n, m)
	}
	return n, nil
}
