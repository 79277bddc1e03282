//go:build !lean

package main

import "github.com/spf13/cobra"

// addCommands adds every command: this is memwatchd, the full binary
// (built without the lean tag), which the lean memwatch runs for every
// command but its own (commands_lean.go).
func addCommands(root *cobra.Command, g *globals) {
	recall := recallCmd(g)
	_ = recall.RegisterFlagCompletionFunc("scope", completeScope(g))
	root.AddCommand(runCmd(g), validateCmd(g), versionCmd(g), logCmd(g), undoCmd(g), redoCmd(g), tokenCmd(g), statusCmd(g), triggerCmd(g),
		snapshotCmd(g), stampCmd(g), compactCmd(g), recall, indexCmd(g), readCmd(g), writeCmd(g), appendCmd(g), patchCmd(g), recordsCmd(g), showCmd(g), diffCmd(g), uiCmd(g), versionsCmd(g), restoreCmd(g), stateCmd(g), mcpCmd(g), initCmd(g), pruneCmd(g), installCmd(g), secretsCmd(g),
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
