package main

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/spf13/cobra"

	"github.com/memwatch/memwatch/answer"
	"github.com/memwatch/memwatch/cmd/internal/cli"
	"github.com/memwatch/memwatch/confine"
	"github.com/memwatch/memwatch/control"
	"github.com/memwatch/memwatch/daemon"
	"github.com/memwatch/memwatch/mcpserver"
	"github.com/memwatch/memwatch/policy"
	"github.com/memwatch/memwatch/recall"
	"github.com/memwatch/memwatch/rewrite"
	"github.com/memwatch/memwatch/spool"
	"github.com/memwatch/memwatch/state"
	"github.com/memwatch/memwatch/undo"
)

func mcpCmd(g *globals) *cobra.Command {
	var root string
	cmd := &cobra.Command{
		Use:   "mcp [--root DIR]",
		Short: "Serve the memory tools to an agent over MCP (stdio)",
		Long: `Serve memwatch's memory tools over the Model Context Protocol on standard
input and output, for an MCP client to start: an agent gets the tools of
its memory's layout, with the names its design gives them.

  memory.md with # now and # History:  memory_status, memory_snapshot, memory_stamp
  facts/ and episodes/:                memory_list, memory_read, memory_write,
                                       memory_append, memory_patch
  MEMORY.md and HISTORY.md:            memory_read, history_search
  working-memory/ and messages.jsonl:  recall_memory
  an app's records in SQLite:          records_list, records_context
  every layout:                        memory_changes (the journal), and
                                       memory_undo when the policy sets
                                       mcp: {allow_undo: true}

With --root DIR the tools work on that root of the policy and only its
layout's tools are listed; without it every tool takes a root argument
(memory_roots lists the roots). Writes go through the same safe rewrite and
journal as the daemon's: archived, journaled, undoable with memwatch undo.
A path outside the root is refused. The root's markdown files are also
offered as read-only file:// resources. The running daemon serves the same
tools over Streamable HTTP at /mcp on its control socket.

Add it to Claude Code with
  claude mcp add memwatch -- memwatch mcp --policy P --root DIR`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			log, err := g.logger()
			if err != nil {
				return err
			}
			p, err := g.LoadPolicy()
			if err != nil {
				return err
			}
			var cwd string
			if root != "" {
				if root, err = filepath.Abs(root); err != nil {
					return cli.UsageError{Err: err}
				}
			} else if cwd, err = os.Getwd(); err != nil {
				cwd = ""
			}
			dir := g.ResolveStateDir(p)
			if stateIsOthers(dir) {
				// The system service's state: its daemon serves this user
				// the tools (mcp_proxy.go).
				return g.serveMCPProxy(p, dir, root, cwd, log)
			}
			db, err := state.Open(context.Background(), dir)
			if errors.Is(err, fs.ErrPermission) {
				return g.serveMCPProxy(p, dir, root, cwd, log)
			}
			if err != nil {
				return err
			}
			defer db.Close()
			rw := rewrite.New(db, log)
			rw.OpenRoot = daemon.RootOpener(func() *policy.Policy { return p })
			cfg := mcpserver.Config{Policy: func() *policy.Policy { return p }, Root: root, Cwd: cwd, Version: version, Rewriter: rw, StateDir: fleetState(p, dir)}
			cfg.Undo = func(ctx context.Context, id int64, force, dryRun bool) (undo.Result, error) {
				var res undo.Result
				err := g.Control(p, dir).Undo(ctx, id, force, dryRun, &res)
				if errors.Is(err, control.ErrNoDaemon) {
					return undoOffline(dir, p, id, force, dryRun)
				}
				return res, err
			}
			if idx := recall.ReadableIndex(dir); idx != "" {
				cfg.Index = idx
			}
			if sp, err := spool.OpenReadOnly(context.Background(), dir); err == nil {
				defer sp.Close()
				cfg.Generation = func(ctx context.Context) func(*confine.Root, string) int64 { return sp.Gens(ctx).Of }
				cfg.Held = sp.SearchHeld
				cfg.Show = func(ctx context.Context, root *confine.Root, c spool.Citation) ([]spool.Shown, error) {
					return answer.ShowIn(ctx, sp, root, c)
				}
			} else {
				cfg.Show = func(ctx context.Context, root *confine.Root, c spool.Citation) ([]spool.Shown, error) {
					return answer.ShowIn(ctx, nil, root, c)
				}
			}
			srv, err := mcpserver.New(cfg, log)
			if err != nil {
				return cli.UsageError{Err: err}
			}
			ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			return srv.Serve(ctx, &mcp.StdioTransport{})
		},
	}
	cmd.Flags().StringVar(&root, "root", "", "serve this root of the policy only (default: every root; tools take a root argument)")
	return cmd
}

// serveMCPProxy serves the daemon's tools on stdio (mcp_proxy.go): what
// memwatch mcp does for a user whose state is the daemon's.
func (g *globals) serveMCPProxy(p *policy.Policy, dir, root, cwd string, log *slog.Logger) error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	px, err := newMCPProxy(ctx, g.Control(p, dir), root, cwd, log)
	if err != nil {
		if errors.Is(err, control.ErrNoDaemon) {
			return fmt.Errorf("memwatch mcp: the state in %s is memwatch's service's, and the service does not answer: %w", dir, err)
		}
		return err
	}
	defer px.Close()
	srv, err := px.server(ctx)
	if err != nil {
		return err
	}
	err = srv.Run(ctx, &mcp.StdioTransport{})
	if ctx.Err() != nil || errors.Is(err, mcp.ErrConnectionClosed) {
		return nil
	}
	return err
}
