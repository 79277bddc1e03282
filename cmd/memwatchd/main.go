// Command memwatchd runs every command of memwatch: the daemon, MCP,
// install, the seeds' memory tools, and the commands the client (memwatch,
// cmd/memwatch) runs itself when a daemon answers, which memwatchd runs
// when none does (a search: memwatch-search, cmd/memwatch-search, when it
// is installed beside them).
package main

import (
	"io"
	"os"

	"github.com/spf13/cobra"

	"github.com/memwatch/memwatch/cmd/internal/cli"
	"github.com/memwatch/memwatch/cmd/internal/local"
)

// version is set at build time with -ldflags "-X main.version=...".
var version = "dev"

func main() {
	os.Exit(execute(os.Args[1:], os.Stdout, os.Stderr))
}

// execute runs the command args name and returns its exit code.
func execute(args []string, stdout, stderr io.Writer) int {
	return cli.Execute(cli.Program{
		Version:  version,
		Commands: addCommands,
		Context:  commandContext,
		IsUsage:  local.IsPolicyError,
	}, args, stdout, stderr)
}

// globals are the shared flags and what memwatchd's commands keep beside
// them.
type globals struct {
	*local.Env
}

// addCommands adds every command; memwatchd answers the shared ones
// itself (g is their backend).
func addCommands(root *cobra.Command, cg *cli.Globals) {
	g := &globals{Env: &local.Env{Globals: cg}}
	cg.Backend = g
	recall := cli.RecallCmd(cg)
	_ = recall.RegisterFlagCompletionFunc("scope", completeScope(g))
	root.AddCommand(runCmd(g), validateCmd(g), cli.VersionCmd(cg), cli.LogCmd(cg), undoCmd(g), redoCmd(g), tokenCmd(g), cli.StatusCmd(cg), triggerCmd(g),
		snapshotCmd(g), stampCmd(g), compactCmd(g), recall, indexCmd(g), readCmd(g), writeCmd(g), appendCmd(g), patchCmd(g), recordsCmd(g), cli.ShowCmd(cg), diffCmd(g), uiCmd(g), cli.VersionsCmd(cg), restoreCmd(g), stateCmd(g), mcpCmd(g), initCmd(g), pruneCmd(g), installCmd(g), secretsCmd(g),
		serviceActionCmd(g, "uninstall", "Stop, disable and remove the memwatch service"),
		serviceActionCmd(g, "start", "Start the memwatch service"),
		serviceActionCmd(g, "stop", "Stop the memwatch service"),
		serviceActionCmd(g, "restart", "Restart the memwatch service"),
		serviceCmd(g))
	root.AddCommand(packagingCmds(g)...)
	groupCommands(root)
}

// Groups: --help lists what a person uses every day first, the service's
// care next, and the seeds' memory tools (what agents call, over MCP too)
// under their own heading.
var commandGroups = []struct {
	id, title string
	names     []string
}{
	{"daily", "Everyday:", []string{"recall", "show", "log", "status", "undo", "redo", "versions", "diff", "restore", "secrets", "ui"}},
	{"setup", "Setting up and running:", []string{"init", "validate", "run", "install", "uninstall", "start", "stop", "restart", "service", "mcp", "trigger", "compact", "prune", "state", "token", "version"}},
	{"tools", "The seeds' memory tools (what agents call; over MCP too):", []string{"read", "write", "append", "patch", "stamp", "snapshot", "index", "records"}},
}

func groupCommands(root *cobra.Command) {
	group := map[string]string{}
	for _, gr := range commandGroups {
		root.AddGroup(&cobra.Group{ID: gr.id, Title: gr.title})
		for _, n := range gr.names {
			group[n] = gr.id
		}
	}
	root.AddGroup(&cobra.Group{ID: "other", Title: "More:"})
	for _, c := range root.Commands() {
		if id, ok := group[c.Name()]; ok {
			c.GroupID = id
		} else {
			c.GroupID = "other"
		}
	}
	root.SetHelpCommandGroupID("other")
	root.SetCompletionCommandGroupID("other")
}
