// Command memwatch-search is memwatch recall when no daemon answers: it
// opens the state and the index itself and searches as the user running
// it, as memwatchd does (cmd/internal/local, shared), but links no
// replica, metrics, MCP or service code. memwatchd's start is some 230
// package initializers and 1,200 page faults (44-53 ms here), most of a
// search with no daemon; this binary's is 137 and 640 (26-30 ms). The client
// (memwatch) becomes it for such a search; anything else it is asked it
// hands to memwatchd, installed beside it.
package main

import (
	"context"
	"os"

	"github.com/spf13/cobra"

	"github.com/memwatch/memwatch/cmd/internal/cli"
	"github.com/memwatch/memwatch/cmd/internal/local"
	"github.com/memwatch/memwatch/control"
)

// version is set at build time with -ldflags "-X main.version=...".
var version = "dev"

func main() {
	os.Exit(cli.Execute(cli.Program{
		Version:  version,
		Commands: addCommands,
		Route:    cli.LeanRoute,
		IsUsage:  local.IsPolicyError,
		Delegate: func(args []string) int { return cli.BecomeBeside("memwatchd", args) },
	}, os.Args[1:], os.Stdout, os.Stderr))
}

func addCommands(root *cobra.Command, g *cli.Globals) {
	g.Backend = searcher{&local.Env{Globals: g}}
	root.CompletionOptions.DisableDefaultCmd = true
	root.AddCommand(cli.RecallCmd(g), cli.VersionCmd(g))
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
