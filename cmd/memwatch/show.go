package main

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net/url"
	"os"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"

	"github.com/memwatch/memwatch/confine"
	"github.com/memwatch/memwatch/daemon"
	"github.com/memwatch/memwatch/spool"
	"github.com/memwatch/memwatch/state"
)

func showCmd(g *globals) *cobra.Command {
	var dir string
	cmd := &cobra.Command{
		Use:   "show [--dir ROOT] CITATION|ARCHIVE",
		Short: "Print the lines a citation names (even after the agent rewrote its log), or an archive",
		Long: `Print the log lines a citation names, as memwatch writes them in history
entries, summaries and recall results: PATH#L10-20 (lines of the log as it
first was) or PATH@3#L10-20 (its third version, after the agent rewrote it).
PATH is relative to ROOT (default: the current directory). While those lines
are still in the live file they come from there; once the agent has trimmed,
cleared or rewritten it, they come from memwatch's spool, which keeps every
line it captured.

Given a file instead (an archive such as memory/2026-01-15-1430.md, one
retention compressed, memory/2026-01-15-1430.md.gz, or a kept copy such as
.memwatch/archive/memory.md.kept-20260115-143000 that memwatch status and
memwatch log --kept list), it prints its content, decompressed.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if !strings.Contains(args[0], "#L") {
				if fi, err := os.Stat(args[0]); err == nil && fi.Mode().IsRegular() {
					return showArchive(g, args[0])
				}
			}
			c, err := spool.ParseCitation(args[0])
			if err != nil {
				return usageError{err}
			}
			if dir == "" {
				if dir, err = os.Getwd(); err != nil {
					return err
				}
			}
			if dir, err = filepath.Abs(dir); err != nil {
				return err
			}
			p, err := g.policyIfGiven()
			if err != nil {
				return err
			}
			stateDir := g.resolveStateDir(p)
			var lines []spool.Shown
			if stateUnreadable(stateDir) {
				// memwatch's state is not this user's to read: the daemon
				// shows what this user's roots hold.
				var res daemon.ShowResponse
				err := newControl(socketPath(p, stateDir)).do(cmd.Context(), "GET", "/v1/show?"+url.Values{"root": {dir}, "cite": {args[0]}}.Encode(), nil, &res)
				if err != nil {
					return fmt.Errorf("show %s: %w", args[0], err)
				}
				lines = res.Lines
			} else {
				root, err := confine.Open(dir, confine.Options{})
				if err != nil {
					return err
				}
				defer root.Close()
				sp, err := spool.OpenReadOnly(context.Background(), stateDir)
				if err != nil {
					return fmt.Errorf("%w (looked in %s: name the daemon's state with --state-dir, --policy or MEMWATCH_STATE_DIR)", err, stateDir)
				}
				defer sp.Close()
				lines, err = sp.Show(context.Background(), root, c)
				if errors.Is(err, spool.ErrUnknownLog) {
					return fmt.Errorf("%w (state %s; is --dir the root the citation belongs to?)", err, stateDir)
				}
				if err != nil {
					return err
				}
			}
			sources := map[string]bool{}
			for _, l := range lines {
				sources[l.Source] = true
			}
			var from []string
			if sources["live"] {
				from = append(from, "the live file")
			}
			if sources["spool"] || sources["pruned"] {
				from = append(from, "the spool: the agent has rewritten the file since")
			}
			fmt.Fprintf(g.stdout, "%s (from %s)\n", filepath.ToSlash(args[0]), strings.Join(from, " and "))
			for _, l := range lines {
				switch l.Source {
				case "pruned":
					fmt.Fprintf(g.stdout, "L%d: [pruned from the spool by retention]\n", l.Line)
				case "missing":
					fmt.Fprintf(g.stdout, "L%d: [no such line in that version of the file]\n", l.Line)
				default:
					fmt.Fprintf(g.stdout, "L%d: %s\n", l.Line, l.Data)
				}
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&dir, "dir", "", "the root the citation's path is relative to (default: the current directory)")
	return cmd
}

// showArchive prints an archive, decompressing one retention compressed.
func showArchive(g *globals, path string) error {
	b, err := readMaybeCompressed(path)
	if err != nil {
		return err
	}
	_, err = g.stdout.Write(b)
	return err
}

// stateUnreadable reports that memwatch's state is not this user's to
// read: its state directory is the daemon's (running as root), or, for a
// user other than root, there is none of its own. The commands that read
// the state then ask the daemon over its socket, which answers within
// what the kernel says this user is (SO_PEERCRED).
func stateUnreadable(dir string) bool {
	_, err := os.Stat(filepath.Join(dir, state.FileName))
	return errors.Is(err, fs.ErrPermission) || errors.Is(err, fs.ErrNotExist) && os.Geteuid() != 0
}
