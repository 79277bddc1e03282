package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"

	"github.com/spf13/cobra"

	"github.com/memwatch/memwatch/layout/factsepisodes"
	"github.com/memwatch/memwatch/rewrite"
)

func indexCmd(g *globals) *cobra.Command {
	var asJSON bool
	var indexFile string
	cmd := &cobra.Command{
		Use:   "index ROOT [--json]",
		Short: "List a facts-episodes memory with its summary lines (seed 001's memory_list)",
		Long: `Print the memory index of a facts-episodes root (data/memory/) as the seed
injects it: "Available memory:" and one line per file with its size and its
"> Summary:" line, sorted by path. --json gives [{path, summary, size}].`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			es, err := factsepisodes.Index(args[0], indexFile)
			if err != nil {
				return err
			}
			if asJSON {
				if es == nil {
					es = []factsepisodes.IndexEntry{}
				}
				return printJSON(g, es)
			}
			fmt.Fprint(g.stdout, factsepisodes.FormatIndex(es))
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
		Short: "Print a memory file (seed 001's memory_read, sandboxed to ROOT)",
		Args:  cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			b, err := factsepisodes.Read(args[0], args[1])
			if err != nil {
				return err
			}
			_, err = g.stdout.Write(b)
			return err
		},
	}
}

func appendCmd(g *globals) *cobra.Command {
	var entryFile, summary string
	cmd := &cobra.Command{
		Use:   "append ROOT PATH --entry FILE [--summary S]",
		Short: "Append an entry to a memory file (seed 001's memory_append, sandboxed to ROOT)",
		Long:  "Append the markdown block in FILE (- for standard input) to PATH under ROOT, and optionally set the file's \"> Summary:\" line.",
		Args:  cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			if entryFile == "" {
				return usageError{errors.New("--entry FILE is required (- reads standard input)")}
			}
			var entry []byte
			var err error
			if entryFile == "-" {
				entry, err = readAll(os.Stdin)
			} else {
				entry, err = os.ReadFile(entryFile)
			}
			if err != nil {
				return err
			}
			rw := rewrite.New(nil, slog.New(slog.DiscardHandler))
			if err := factsepisodes.Append(context.Background(), rw, args[0], args[1], entry, summary); err != nil {
				return err
			}
			fmt.Fprintf(g.stdout, "appended %d bytes to %s\n", len(entry), args[1])
			return nil
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
		Short: "Replace text in a memory file (seed 001's memory_patch, sandboxed to ROOT)",
		Long: `Replace each --old TEXT with the matching --new TEXT. Every old text must
occur exactly once; if one is absent or ambiguous, nothing is written.`,
		Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(olds) == 0 || len(olds) != len(news) {
				return usageError{errors.New("give --old and --new in pairs")}
			}
			var ps []factsepisodes.Patch
			for i := range olds {
				ps = append(ps, factsepisodes.Patch{Old: olds[i], New: news[i]})
			}
			rw := rewrite.New(nil, slog.New(slog.DiscardHandler))
			n, err := factsepisodes.ApplyPatches(context.Background(), rw, args[0], args[1], ps)
			if err != nil {
				return err
			}
			fmt.Fprintf(g.stdout, "applied %d patch(es) to %s\n", n, args[1])
			return nil
		},
	}
	cmd.Flags().StringArrayVar(&olds, "old", nil, "text to find (exactly once)")
	cmd.Flags().StringArrayVar(&news, "new", nil, "replacement text")
	return cmd
}
