package main

import (
	"fmt"
	"runtime"

	"github.com/spf13/cobra"
)

func versionCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print the version",
		Args:  cobra.NoArgs,
		Run: func(cmd *cobra.Command, args []string) {
			fmt.Fprint(g.stdout, versionLine())
		},
	}
}

// versionLine is what memwatch version and memwatch --version print.
func versionLine() string {
	return fmt.Sprintf("memwatch %s (%s, %s/%s)\n", version, runtime.Version(), runtime.GOOS, runtime.GOARCH)
}
