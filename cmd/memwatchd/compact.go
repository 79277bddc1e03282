package main

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"

	"github.com/memwatch/memwatch/cmd/internal/cli"
	"github.com/memwatch/memwatch/control"
	"github.com/memwatch/memwatch/daemon"
	"github.com/memwatch/memwatch/state"
)

// journalRef names a journal record in a message ("" when none).
func journalRef(id int64) string {
	if id == 0 {
		return ""
	}
	return fmt.Sprintf("; journal record %d", id)
}

func compactCmd(g *globals) *cobra.Command {
	var req daemon.CompactRequest
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "compact PATH [--dry-run] [--compactor heuristic|llm]",
		Short: "Compact the root (or file) at PATH now",
		Long: `Run the layout's compaction for the store root containing PATH now, even
under its size threshold. The pre-image is archived and the change journaled
like any other. --dry-run writes nothing and prints a unified diff of what
would change, the guard verdict and the token estimate. --compactor
overrides the store's compactor for this run. When the daemon runs, the
compaction goes through it so it cannot race a job.`,
		Example: `  memwatch compact --dry-run MEMORY.md   # what compaction would do now; nothing written`,
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			log, err := g.logger()
			if err != nil {
				return err
			}
			ctl, p, stateDir, err := g.controlFor()
			if err != nil {
				return err
			}
			if p == nil {
				return cli.UsageError{Err: errors.New("compact needs --policy: the store and its layout come from it")}
			}
			switch req.Compactor {
			case "", "heuristic", "llm":
			default:
				return cli.UsageError{Err: fmt.Errorf("--compactor must be heuristic or llm, not %q", req.Compactor)}
			}
			if req.Path, err = filepath.Abs(args[0]); err != nil {
				return err
			}
			var res daemon.CompactResult
			err = ctl.Compact(context.Background(), req, &res)
			if errors.Is(err, control.ErrNoDaemon) {
				d, derr := daemon.New(daemon.Config{Policy: p, PolicyPath: g.Policy, StateDir: stateDir, Socket: listenSocket(p, stateDir), Version: version}, log)
				if derr != nil {
					return derr
				}
				res, err = d.Compact(context.Background(), req)
				d.Close()
			}
			if err != nil {
				return err
			}
			if asJSON {
				return cli.PrintJSON(g.Globals, res)
			}
			w := g.Stdout
			if res.Diff != "" {
				fmt.Fprint(w, res.Diff)
			}
			fmt.Fprintf(w, "store %s, root %s, %s: %s -> %s with the %s compactor\n", res.Store, res.Root, res.Target, g.Size(int64(res.BeforeSize)), g.Size(int64(res.AfterSize)), res.Compactor)
			fmt.Fprintf(w, "guards: %s\n", res.Verdict)
			if res.FallbackReason != "" {
				fmt.Fprintf(w, "note: %s\n", res.FallbackReason)
			}
			fmt.Fprintf(w, "tokens: ~%d input (estimate), %d used\n", res.InputTokens, res.Tokens)
			switch {
			case res.DryRun:
				fmt.Fprintln(w, "dry run: nothing was written")
			case res.Outcome == state.Rejected || strings.HasPrefix(res.Verdict, "rejected"):
				// The guards kept the file as it was: that is a failure of
				// the compaction asked for, not a success.
				return fmt.Errorf("compact %s: nothing was written: the guards rejected the result (%s)%s", args[0], res.Verdict, journalRef(res.Journal))
			case res.Outcome == state.Done && res.Archive != "":
				fmt.Fprintf(w, "written; pre-image archived to %s; journal record %d (memwatch undo %d reverts it)\n", res.Archive, res.Journal, res.Journal)
			case res.Outcome == state.Done:
				fmt.Fprintf(w, "written (nothing removed, so no archive); journal record %d (memwatch undo %d reverts it)\n", res.Journal, res.Journal)
			default:
				fmt.Fprintf(w, "nothing was written: %s\n", res.Verdict)
			}
			return nil
		},
	}
	cmd.Flags().BoolVar(&req.DryRun, "dry-run", false, "write nothing; print the diff, guard verdict and token estimate")
	cmd.Flags().StringVar(&req.Compactor, "compactor", "", "heuristic or llm, instead of the store's compactor")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}
