package cli

import (
	"fmt"
	"runtime"

	"github.com/spf13/cobra"
)

func VersionCmd(g *Globals) *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print the version",
		Args:  cobra.NoArgs,
		Run: func(cmd *cobra.Command, args []string) {
			fmt.Fprint(g.Stdout, g.versionLine())
		},
	}
}

// versionLine is what memwatch version and memwatch --version print.
func (g *Globals) versionLine() string {
	return fmt.Sprintf("memwatch %s (%s, %s/%s)\n", g.Version, runtime.Version(), runtime.GOOS, runtime.GOARCH)
}
