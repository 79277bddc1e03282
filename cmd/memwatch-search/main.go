// Command memwatch-search is memwatch recall when no daemon answers: it
// opens the state and the index itself and searches as the user running
// it, as memwatchd does (cmd/internal/local, shared), but links no
// replica, metrics, MCP or service code. memwatchd's start is some 230
// package initializers and 1,200 page faults (44-47 ms here), most of a
// search with no daemon; this binary's is a third of it. The client
// (memwatch) becomes it for such a search; anything else it is asked it
// hands to memwatchd, installed beside it.
package main

import (
	"context"
	"fmt"
	"os"
	"runtime/debug"
	"slices"

	"github.com/spf13/cobra"

	"github.com/memwatch/memwatch/cmd/internal/cli"
	"github.com/memwatch/memwatch/cmd/internal/local"
	"github.com/memwatch/memwatch/control"
)

// version is set at build time with -ldflags "-X main.version=...".
var version = "dev"

// searchMemoryLimit is the heap at which a search's first garbage
// collection runs (as the client's lean commands).
const searchMemoryLimit = 64 << 20

func main() {
	os.Exit(cli.Execute(cli.Program{
		Version:  version,
		Commands: addCommands,
		Route:    route,
		IsUsage:  local.IsPolicyError,
		Delegate: runFull,
	}, os.Args[1:], os.Stdout, os.Stderr))
}

func addCommands(root *cobra.Command, g *cli.Globals) {
	g.Backend = searcher{&local.Env{Globals: g}}
	root.CompletionOptions.DisableDefaultCmd = true
	root.AddCommand(cli.RecallCmd(g), cli.VersionCmd(g))
}

// route hands memwatchd every command but recall and version.
func route(root *cobra.Command, args []string) (code int, done bool) {
	c, _, err := root.Find(args)
	if err != nil || c == root && !slices.Contains(args, "--version") {
		return runFull(args), true
	}
	if os.Getenv("GOGC") == "" && os.Getenv("GOMEMLIMIT") == "" {
		// A search is a short process: no collection until its heap
		// nears the limit (the index's search is bounded well below it).
		debug.SetGCPercent(-1)
		debug.SetMemoryLimit(searchMemoryLimit)
	}
	return 0, false
}

// runFull becomes memwatchd with args; it returns only when it cannot.
func runFull(args []string) int {
	path, err := cli.Beside("memwatchd")
	if err != nil {
		fmt.Fprintf(os.Stderr, "memwatch: this command is memwatchd's, the full binary: install memwatch whole (memwatch, memwatchd and memwatch-search together) (%v)\n", err)
		return cli.ExitFailure
	}
	return cli.Become(path, args)
}

// searcher answers recall here (local.Env.AnswerRecall); the commands
// it does not have are memwatchd's.
type searcher struct{ *local.Env }

func (searcher) ShowCitation(context.Context, string, string) ([]control.Shown, string, error) {
	return nil, "", cli.ErrDelegate
}
func (searcher) ShowArchive(string, bool, cli.Paint) error { return cli.ErrDelegate }
func (searcher) FileStatus(string, bool) error             { return cli.ErrDelegate }
func (searcher) DaemonStatus(context.Context) (control.Status, error) {
	return control.Status{}, cli.ErrDelegate
}
func (searcher) OpenJournal(context.Context) (cli.Journal, error) { return nil, cli.ErrDelegate }
func (searcher) Versions(context.Context, string, string, cli.Listing) error {
	return cli.ErrDelegate
}
