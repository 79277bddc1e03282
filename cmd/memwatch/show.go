package main

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"

	"github.com/spf13/cobra"

	"github.com/memwatch/memwatch/confine"
	"github.com/memwatch/memwatch/control"
	"github.com/memwatch/memwatch/fleet/mirror"
	"github.com/memwatch/memwatch/policy"
	"github.com/memwatch/memwatch/rewrite"
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
			p, err := g.policyIfGiven()
			if err != nil {
				return err
			}
			stateDir := g.resolveStateDir(p)
			// HOST:/path#L5, as recall prints on a central node (fleet:).
			if lines, host, ok, err := mirror.Show(cmd.Context(), stateDir, args[0]); ok {
				if err != nil {
					return err
				}
				fmt.Fprintf(g.stdout, "%s (from what host %s replicated)\n", args[0], host)
				printShown(g, lines)
				return nil
			}
			c, err := spool.ParseCitation(args[0])
			if err != nil {
				return usageError{err}
			}
			// A citation of several roots' results names its file by its
			// whole path: its root is the policy's root holding it, or the
			// nearest directory above it the spool knows the file from.
			var dirs []string
			suffix := strings.TrimPrefix(strings.TrimSpace(args[0]), c.Path)
			abs := filepath.IsAbs(filepath.FromSlash(c.Path))
			switch {
			case dir != "":
				if dir, err = filepath.Abs(dir); err != nil {
					return err
				}
				dirs = []string{dir}
			case abs:
				dirs = citationRoots(p, filepath.FromSlash(c.Path))
			default:
				if dir, err = os.Getwd(); err != nil {
					return err
				}
				dirs = []string{dir}
			}
			var lines []spool.Shown
			var first error
			for pass := 0; pass < 2 && lines == nil; pass++ {
				// The spool's logs first, then, for a note, the file as it is.
				err = nil
				for _, d := range dirs {
					cc := c
					if abs {
						rel, err := filepath.Rel(d, filepath.FromSlash(c.Path))
						if err != nil || rel == ".." || strings.HasPrefix(rel, ".."+string(filepath.Separator)) {
							return fmt.Errorf("show %s: the file is not under --dir %s", args[0], d)
						}
						cc.Path = filepath.ToSlash(rel)
					}
					if lines, err = showIn(cmd.Context(), p, stateDir, d, cc, cc.Path+suffix, pass == 1); err == nil {
						break
					}
					if first == nil || errors.Is(first, spool.ErrUnknownLog) && !errors.Is(err, spool.ErrUnknownLog) {
						first = err
					}
				}
			}
			switch {
			case err == nil:
			case abs && len(dirs) > 1:
				return fmt.Errorf("show %s: no root memwatch knows holds it (tried %s and the %d directories above it): %w", args[0], dirs[0], len(dirs)-1, first)
			case errors.Is(first, spool.ErrUnknownLog):
				return fmt.Errorf("show %s: %w (state %s; is --dir the root the citation belongs to?)", args[0], first, stateDir)
			default:
				return fmt.Errorf("show %s: %w", args[0], first)
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
			printShown(g, lines)
			return nil
		},
	}
	cmd.Flags().StringVar(&dir, "dir", "", "the root the citation's path is relative to (default: the current directory; a citation with a whole path, as recall prints for several roots, finds its root)")
	return cmd
}

// printShown prints the lines of a citation.
func printShown(g *globals, lines []spool.Shown) {
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
}

// showIn returns the lines of citation c of root dir: from memwatch's
// spool, or, when memwatch's state is not this user's to read, from the
// daemon, which shows what this user's roots hold.
func showIn(ctx context.Context, p *policy.Policy, stateDir, dir string, c spool.Citation, cite string, file bool) ([]spool.Shown, error) {
	if stateUnreadable(stateDir) {
		if file {
			return nil, spool.ErrUnknownLog // the daemon showed the file if it could
		}
		var res control.ShowResponse
		err := newControl(socketPath(p, stateDir)).do(ctx, "GET", "/v1/show?"+url.Values{"root": {dir}, "cite": {cite}}.Encode(), nil, &res)
		if err != nil && strings.Contains(err.Error(), spool.ErrUnknownLog.Error()) {
			err = fmt.Errorf("%w", spool.ErrUnknownLog)
		}
		return res.Lines, err
	}
	root, err := confine.Open(dir, confine.Options{})
	if err != nil {
		return nil, err
	}
	defer root.Close()
	sp, err := spool.OpenReadOnly(ctx, stateDir)
	if err != nil {
		return nil, fmt.Errorf("%w (looked in %s: name the daemon's state with --state-dir, --policy or MEMWATCH_STATE_DIR)", err, stateDir)
	}
	defer sp.Close()
	if file {
		if lines, ok, err := spool.ShowFile(ctx, root, c); ok {
			return lines, err
		}
		return nil, fmt.Errorf("%s in %s: %w", c.Path, dir, spool.ErrUnknownLog)
	}
	return sp.Show(ctx, root, c)
}

// maxCitationDepth bounds the directories above a cited file tried as its
// root when no root of the policy holds it.
const maxCitationDepth = 16

// citationRoots are the directories a file cited by its whole path may be
// a root of, best first: the policy's roots holding it (the deepest
// first), then the directories above it, nearest first.
func citationRoots(p *policy.Policy, file string) []string {
	var out []string
	if p != nil {
		for _, s := range p.Stores {
			for _, r := range s.Roots() {
				if strings.HasPrefix(file, r+string(filepath.Separator)) {
					out = append(out, r)
				}
			}
		}
		sort.Slice(out, func(i, j int) bool { return len(out[i]) > len(out[j]) })
	}
	for d := filepath.Dir(file); len(out) < maxCitationDepth+1; d = filepath.Dir(d) {
		if !slices.Contains(out, d) {
			out = append(out, d)
		}
		if d == filepath.Dir(d) {
			break
		}
	}
	return out
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
// user other than root, there is none of its own. It is decided by opening
// the databases, not by their existence (a state directory made 0755 holds
// files only root may open). The commands that read the state then ask the
// daemon over its socket, which answers within what the kernel says this
// user is (SO_PEERCRED).
func stateUnreadable(dir string) bool {
	for _, name := range []string{state.FileName, spool.FileName} {
		f, err := os.Open(filepath.Join(dir, name))
		if err != nil {
			return os.Geteuid() != 0 || errors.Is(err, fs.ErrPermission)
		}
		f.Close()
	}
	return false
}

// readMaybeCompressed reads a file the way show and diff do: through a
// confined root, a .gz archive decompressed.
func readMaybeCompressed(path string) ([]byte, error) {
	root, file, err := fileRoot(path)
	if err != nil {
		return nil, err
	}
	defer root.Close()
	b, err := root.ReadFile(file)
	if err != nil {
		return nil, err
	}
	if strings.HasSuffix(file, ".gz") {
		var ok bool
		if b, ok = rewrite.Unpack(b); !ok {
			return nil, fmt.Errorf("read %s: not a gzip file memwatch can read", path)
		}
	}
	return b, nil
}
