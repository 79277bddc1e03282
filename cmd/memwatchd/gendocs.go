//go:build gendocs

package main

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/spf13/cobra"
	"github.com/spf13/cobra/doc"
)

// The man pages come from cobra/doc, which brings a Markdown renderer whose
// start-up (regular expressions, tables) every memwatch command would pay
// for: packaging builds it in with -tags gendocs (packaging/package.sh).

// packagingCmds are the commands only packaging needs.
func packagingCmds(g *globals) []*cobra.Command { return []*cobra.Command{genDocsCmd(g)} }

// genDocsCmd writes the man pages and shell completions the packages
// install (make package); hidden, since users never need it.
func genDocsCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:    "gen-docs DIR",
		Short:  "Write man pages (DIR/man1) and shell completions (DIR/completions) for packaging",
		Hidden: true,
		Args:   cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			root := cmd.Root()
			root.DisableAutoGenTag = true // reproducible pages: no generation date
			man := filepath.Join(args[0], "man1")
			comp := filepath.Join(args[0], "completions")
			for _, d := range []string{man, comp} {
				if err := os.MkdirAll(d, 0o755); err != nil {
					return err
				}
			}
			if err := doc.GenManTree(root, &doc.GenManHeader{Title: "MEMWATCH", Section: "1", Source: "memwatch " + version, Manual: "memwatch manual"}, man); err != nil {
				return fmt.Errorf("write man pages: %w", err)
			}
			for name, gen := range map[string]func(string) error{
				"memwatch.bash": func(f string) error { return root.GenBashCompletionFileV2(f, true) },
				"_memwatch":     root.GenZshCompletionFile,
				"memwatch.fish": func(f string) error { return root.GenFishCompletionFile(f, true) },
			} {
				if err := gen(filepath.Join(comp, name)); err != nil {
					return fmt.Errorf("write completion %s: %w", name, err)
				}
			}
			fmt.Fprintf(g.Stdout, "wrote man pages to %s and completions to %s\n", man, comp)
			return nil
		},
	}
}
