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
}
