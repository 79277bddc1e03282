package cli

import (
	"fmt"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/memwatch/memwatch/control"
)

func VersionsCmd(g *Globals) *cobra.Command {
	var asJSON, noPager bool
	var host, color string
	cmd := &cobra.Command{
		Use:   "versions PATH",
		Short: "List every version of a memory file memwatch kept (the agent's writes and its own)",
		Long: `List the versions of a memory file: when each was written, its size,
the lines it added and removed, and who wrote it (the agent, or memwatch
with its journal record). A deleted file lists its deletion last. memwatch
diff FILE@N FILE@M shows what changed between two, memwatch restore FILE@N
puts one back.

With a root directory instead of a file it lists the files that have versions.
On a central node (fleet:), HOST:PATH is a file (or root) of a host it
follows, as recall cites it, read from what the host replicated
(box-1:/home/ana/notes/MEMORY.md, or --host box-1 /home/ana/notes/MEMORY.md).`,
		Example: `  memwatch versions MEMORY.md    # every version of the file, who wrote it
  memwatch versions ..           # the files of this root that have versions`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			colored, err := UseColor(color, g.RawOut)
			if err != nil {
				return err
			}
			return g.Backend.Versions(cmd.Context(), host, args[0], Listing{JSON: asJSON, Colored: colored, NoPager: noPager})
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the versions as JSON")
	cmd.Flags().StringVar(&color, "color", "auto", "colour the output: auto (on a terminal), always or never")
	cmd.Flags().BoolVar(&noPager, "no-pager", false, "never page the output")
	cmd.Flags().StringVar(&host, "host", "", "on a central node (fleet:), PATH is this host's (as HOST:PATH)")
	return cmd
}

// Listing is how a command prints for a person: JSON, or text coloured
// and paged on a terminal.
type Listing struct {
	JSON, Colored, NoPager bool
}

// PrintVersions prints a file's versions as a table (or JSON): the
// agent's deletions in red, memwatch's own writes dimmed.
func PrintVersions(g *Globals, path string, vs []control.Version, o Listing) error {
	if o.JSON {
		return PrintJSON(g, vs)
	}
	if len(vs) == 0 {
		return fmt.Errorf("no versions of %s: it is not a memory file of a store with versions, or memwatch has not seen it written", path)
	}
	var b strings.Builder
	tw := tabwriter.NewWriter(&b, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "VERSION\tTIME\tSIZE\tLINES\tCHANGE\tWRITER")
	for _, v := range vs {
		size, change := g.Size(int64(v.Size)), fmt.Sprintf("+%d -%d", v.Added, v.Removed)
		if v.Deleted() {
			size, change = "-", "deleted"
		}
		who := v.Writer
		if v.Record > 0 {
			who = fmt.Sprintf("%s (journal %d)", v.Writer, v.Record)
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%d\t%s\t%s\n", v.N, v.Time.Local().Format(time.DateTime), size, v.Lines, change, who)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	g.Page(g.TerminalText(b.String(), o.Colored, func(line string) string {
		switch {
		case strings.HasPrefix(line, "VERSION"):
			return SGRHeader
		case strings.Contains(line, " deleted "):
			return SGRDel
		case strings.Contains(line, " memwatch (journal "):
			return SGRDim
		}
		return ""
	}), o.NoPager)
	return nil
}
