package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"

	"github.com/spf13/cobra"

	"github.com/memwatch/memwatch/cmd/internal/cli"
	"github.com/memwatch/memwatch/control"
	"github.com/memwatch/memwatch/daemon"
	"github.com/memwatch/memwatch/policy"
	"github.com/memwatch/memwatch/rewrite"
	"github.com/memwatch/memwatch/state"
	"github.com/memwatch/memwatch/undo"
)

func undoCmd(g *globals) *cobra.Command {
	var dryRun, force bool
	cmd := &cobra.Command{
		Use:               "undo ID",
		ValidArgsFunction: completeRecords(g),
		Short:             "Restore a file to what it was before journal record ID",
		Long: `Restore the target of a journal record from its archive. It refuses when
the agent changed the file since, unless --force, which archives the
current content first. When the daemon runs, the undo goes through it so
it cannot race a job.`,
		Example: `  memwatch undo --dry-run 1    # what undoing record 1 would restore (memwatch log lists ids)
  memwatch undo 1              # restore it: its rule leaves the file alone until redo`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			id, err := strconv.ParseInt(args[0], 10, 64)
			if err != nil {
				return cli.UsageError{Err: fmt.Errorf("undo: ID must be a journal record number, not %q", args[0])}
			}
			ctl, _, dir, err := g.controlFor()
			if err != nil {
				return err
			}
			var res undo.Result
			err = ctl.Undo(context.Background(), id, force, dryRun, &res)
			if errors.Is(err, control.ErrNoDaemon) {
				p, perr := g.PolicyIfGiven()
				if perr != nil {
					return perr
				}
				res, err = undoOffline(dir, p, id, force, dryRun)
			}
			if err != nil {
				return err
			}
			fmt.Fprint(g.Stdout, res)
			return nil
		},
	}
	cmd.Flags().BoolVar(&dryRun, "dry-run", false, "only say what would be restored")
	cmd.Flags().BoolVar(&force, "force", false, "restore even if the file changed since (its current content is archived first)")
	return cmd
}

// undoOffline runs an undo with no daemon; the state lock proves none runs.
// With a policy, the record's root must still be one of its roots, in a
// store that allows undo.
func undoOffline(dir string, p *policy.Policy, id int64, force, dryRun bool) (undo.Result, error) {
	if _, err := os.Stat(filepath.Join(dir, state.FileName)); err != nil {
		// Nothing to undo here, and nothing to create: say where we looked.
		return undo.Result{}, fmt.Errorf("no daemon answered and there is no journal in %s: give the daemon's --state-dir or --policy, or set MEMWATCH_STATE_DIR", dir)
	}
	lock, err := state.TryLock(dir)
	if err != nil {
		return undo.Result{}, err
	}
	defer lock.Unlock()
	db, err := state.Open(context.Background(), dir)
	if err != nil {
		return undo.Result{}, err
	}
	defer db.Close()
	rw := rewrite.New(db, slog.New(slog.DiscardHandler))
	if p != nil {
		rw.OpenRoot = daemon.RootOpener(func() *policy.Policy { return p })
		if rec, err := db.GetRecord(context.Background(), id); err == nil {
			for _, s := range p.Stores {
				if s.MatchesRoot(rec.Root) && !s.AllowUndo {
					return undo.Result{}, fmt.Errorf("undo %d: store %s does not allow undo (allow_undo: false in the policy)", id, s.Name)
				}
			}
		}
	}
	res, err := undo.Do(context.Background(), rw, nil, id, force, dryRun)
	if errors.Is(err, state.ErrNoRecord) {
		// Say where we looked: the daemon may journal somewhere else.
		return res, fmt.Errorf("%w in the journal of %s (no daemon answered; give its --state-dir or --policy if it uses another)", err, dir)
	}
	return res, err
}

func redoCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:               "redo ID",
		ValidArgsFunction: completeRecords(g),
		Short:             "Let the rule of a change you undid apply again to its file",
		Long: `An undo is a decision: after memwatch undo ID, the rule that made that change
does not make it again on that file until the file has grown past the
rule's threshold again with the agent's own new content (memwatch status
lists such holds). memwatch redo ID ends the hold at once: the rule
applies again at the next evaluation, which it asks for.`,
		Example: `  memwatch redo 1              # let the rule of record 1 apply to its files again`,
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			id, err := strconv.ParseInt(args[0], 10, 64)
			if err != nil || id < 1 {
				return cli.UsageError{Err: fmt.Errorf("redo: ID must be a journal record number, not %q", args[0])}
			}
			ctl, _, dir, err := g.controlFor()
			if err != nil {
				return err
			}
			res, err := ctl.Redo(context.Background(), id)
			if errors.Is(err, control.ErrNoDaemon) {
				res, err = redoOffline(dir, id)
			}
			if errors.Is(err, control.ErrNotFound) || errors.Is(err, state.ErrNoRecord) {
				return fmt.Errorf("redo %d: %w", id, err)
			}
			if err != nil {
				return err
			}
			for _, h := range append([]state.Hold{res.Hold}, res.Also...) {
				fmt.Fprintf(g.Stdout, "%s: rule %s applies again (the undo of #%d, journal record %d, no longer holds it)\n", filepath.Join(h.Root, h.Target), h.Rule, h.Record, h.Undo)
			}
			return nil
		},
	}
}

// redoOffline ends a hold with no daemon: the next start evaluates.
func redoOffline(dir string, id int64) (control.RedoResult, error) {
	db, err := state.Open(context.Background(), dir)
	if err != nil {
		return control.RedoResult{}, err
	}
	defer db.Close()
	holds, err := undo.Redo(context.Background(), db, id)
	if err != nil {
		return control.RedoResult{}, err
	}
	return control.RedoResult{Hold: holds[0], Also: holds[1:]}, nil
}
