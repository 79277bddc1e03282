package main

import (
	"errors"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/memwatch/memwatch/policy"
	"github.com/memwatch/memwatch/replica"
	"github.com/memwatch/memwatch/state"
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
		Use:   "restore --policy P [--state-dir D] [--force]",
		Short: "Rebuild the state directory from the bucket the policy replicates to",
		Long: `Rebuild memwatch's state on a new host from the replica the policy's
replicate: names: the journal, the spool (every session line captured) and
every version of every memory file, as they were a fraction of a second
before the old host stopped. The recall index is rebuilt by the daemon.

  memwatch state restore --policy /etc/memwatch/policy.d
  memwatch run --policy /etc/memwatch/policy.d          # or start the service
  memwatch restore --missing ~/notes                     # memory files not on disk, back

It refuses a state directory that holds anything (give --force to replace
its databases) and a running daemon's.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			p, err := g.loadPolicy()
			if err != nil {
				return err
			}
			if p.Replicate == nil {
				return usageError{fmt.Errorf("%s has no replicate: section: there is no bucket to restore from", g.policy)}
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
				return usageError{err}
			}
			if err != nil {
				return err
			}
			found := 0
			for _, r := range res {
				if !r.Found {
					fmt.Fprintf(g.stdout, "%s: nothing in the bucket (the daemon starts it afresh)\n", r.Name)
					continue
				}
				found++
				fmt.Fprintf(g.stdout, "%s: restored, %s\n", r.Name, policy.Size(r.Bytes))
			}
			if found == 0 {
				return fmt.Errorf("%s holds no state of memwatch's: check replicate.url and the credentials", p.Replicate.URL)
			}
			fmt.Fprintf(g.stdout, "restored %s from %s; next: start the daemon, then memwatch restore --missing ROOT for memory files not on disk\n", dir, p.Replicate.URL)
			return nil
		},
	}
	cmd.Flags().BoolVar(&force, "force", false, "replace the databases of a state directory that holds some")
	return cmd
}
