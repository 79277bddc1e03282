package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/spf13/cobra"

	"github.com/memwatch/memwatch/cmd/internal/cli"
	"github.com/memwatch/memwatch/confine"
	"github.com/memwatch/memwatch/layout/factsepisodes"
	"github.com/memwatch/memwatch/mcpserver"
	"github.com/memwatch/memwatch/rewrite"
	"github.com/memwatch/memwatch/state"
)

func indexCmd(g *globals) *cobra.Command {
	var asJSON bool
	var indexFile string
	cmd := &cobra.Command{
		Use:   "index ROOT [--json]",
		Short: "List the memory files of a facts-and-episodes root with their summaries",
		Long: `Print what an agent with a facts-and-episodes memory (facts/*.md,
episodes/YYYY-MM.md) sees as its memory index: "Available memory:", one line
per markdown file under ROOT with its size and its "> Summary:" line, sorted
by path, and the closing hint to read files before answering. Hidden files,
archive directories and the index file itself are left out; a symlink that
leads outside ROOT is never followed. --json gives [{path, summary, size}].`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			root, err := confine.Open(args[0], confine.Options{})
			if err != nil {
				return err
			}
			defer root.Close()
			es, skipped, err := factsepisodes.Index(root, indexFile)
			if err != nil {
				return err
			}
			for _, s := range skipped {
				fmt.Fprintf(g.Stderr, "memwatch: skipped %s: it leads outside %s or is not readable\n", s, args[0])
			}
			if asJSON {
				return cli.PrintJSON(g.Globals, es)
			}
			fmt.Fprint(g.Stdout, factsepisodes.FormatIndex(es))
			return nil
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	cmd.Flags().StringVar(&indexFile, "index-file", "INDEX.md", "the index file itself, left out of the listing")
	return cmd
}

func readCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "read ROOT PATH",
		Short: "Print one memory file; PATH is relative to ROOT and cannot leave it",
		Args:  cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			root, err := confine.Open(args[0], confine.Options{})
			if err != nil {
				return err
			}
			defer root.Close()
			b, err := factsepisodes.Read(root, args[1])
			if err != nil {
				return err
			}
			_, err = g.Stdout.Write(b)
			return err
		},
	}
}

// readInput reads FILE, or standard input for "-".
func readInput(name string) ([]byte, error) {
	if name == "-" {
		return io.ReadAll(io.LimitReader(os.Stdin, confine.DefaultMaxFileSize))
	}
	return os.ReadFile(name)
}

// withJournal opens the state database so a memory edit is journaled and
// can be undone; it works whether or not the daemon runs.
func (g *globals) withJournal(fn func(db *state.DB) error) error {
	p, err := g.PolicyIfGiven()
	if err != nil {
		return err
	}
	db, err := state.Open(context.Background(), g.ResolveStateDir(p))
	if err != nil {
		return err
	}
	defer db.Close()
	return fn(db)
}

// editRoot runs one journaled edit of a memory file under the root dir
// (the seeds' write, append and patch) and says what it did, with the
// journal record that undoes it.
func (g *globals) editRoot(dir string, edit func(rw *rewrite.Rewriter, root *confine.Root) (string, rewrite.Outcome, error)) error {
	root, err := confine.Open(dir, confine.Options{})
	if err != nil {
		return err
	}
	defer root.Close()
	return g.withJournal(func(db *state.DB) error {
		said, out, err := edit(g.rewriter(db), root)
		if err != nil {
			return err
		}
		fmt.Fprintf(g.Stdout, "%s%s\n", said, mcpserver.JournalNote(out))
		return nil
	})
}

func writeCmd(g *globals) *cobra.Command {
	var from string
	cmd := &cobra.Command{
		Use:   "write ROOT PATH --content FILE",
		Short: "Create or overwrite a memory file (journaled: memwatch undo restores the old content)",
		Long: `Write the content of FILE (- for standard input) to PATH under ROOT, creating
it and its directories if needed. PATH must be a markdown file inside ROOT.
An overwritten file's old content is archived first; the change is
journaled, so "memwatch undo ID" restores it.`,
		Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			if from == "" {
				return cli.UsageError{Err: errors.New("--content FILE is required (- reads standard input)")}
			}
			content, err := readInput(from)
			if err != nil {
				return err
			}
			return g.editRoot(args[0], func(rw *rewrite.Rewriter, root *confine.Root) (string, rewrite.Outcome, error) {
				out, err := factsepisodes.Write(context.Background(), rw, root, "", args[1], content)
				return fmt.Sprintf("wrote %s to %s", g.Size(int64(len(content))), args[1]), out, err
			})
		},
	}
	cmd.Flags().StringVar(&from, "content", "", "file holding the new content (- for standard input)")
	return cmd
}

func appendCmd(g *globals) *cobra.Command {
	var entryFile, summary string
	cmd := &cobra.Command{
		Use:   "append ROOT PATH --entry FILE [--summary S]",
		Short: "Append an entry to a memory file, optionally setting its summary line",
		Long: `Append the markdown block in FILE (- for standard input) to PATH under ROOT,
creating the file if needed, and with --summary set its "> Summary:" line.
A summary given here is kept by the daemon until the file's entries change.`,
		Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			if entryFile == "" {
				return cli.UsageError{Err: errors.New("--entry FILE is required (- reads standard input)")}
			}
			entry, err := readInput(entryFile)
			if err != nil {
				return err
			}
			return g.editRoot(args[0], func(rw *rewrite.Rewriter, root *confine.Root) (string, rewrite.Outcome, error) {
				out, err := factsepisodes.Append(context.Background(), rw, root, "", args[1], entry, summary)
				return fmt.Sprintf("appended %s to %s", g.Size(int64(len(entry))), args[1]), out, err
			})
		},
	}
	cmd.Flags().StringVar(&entryFile, "entry", "", "file holding the entry (- for standard input)")
	cmd.Flags().StringVar(&summary, "summary", "", "set the file-level > Summary: line")
	return cmd
}

func patchCmd(g *globals) *cobra.Command {
	var olds, news []string
	cmd := &cobra.Command{
		Use:   "patch ROOT PATH --old TEXT --new TEXT [--old TEXT --new TEXT ...]",
		Short: "Replace text in a memory file; nothing is written unless every replacement applies",
		Long: `Replace each --old TEXT with the matching --new TEXT in PATH under ROOT. Every
old text must occur exactly once; if one is absent or ambiguous, nothing is
written. Line endings do not matter: an LF text matches a CRLF file, which
keeps its CRLF endings.`,
		Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(olds) == 0 || len(olds) != len(news) {
				return cli.UsageError{Err: errors.New("give --old and --new in pairs")}
			}
			var ps []factsepisodes.Patch
			for i := range olds {
				ps = append(ps, factsepisodes.Patch{Old: olds[i], New: news[i]})
			}
			return g.editRoot(args[0], func(rw *rewrite.Rewriter, root *confine.Root) (string, rewrite.Outcome, error) {
				n, out, err := factsepisodes.ApplyPatches(context.Background(), rw, root, "", args[1], ps)
				return fmt.Sprintf("applied %d patch(es) to %s", n, args[1]), out, err
			})
		},
	}
	cmd.Flags().StringArrayVar(&olds, "old", nil, "text to find (exactly once)")
	cmd.Flags().StringArrayVar(&news, "new", nil, "replacement text")
	return cmd
}
