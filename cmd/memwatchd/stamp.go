package main

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/spf13/cobra"

	"github.com/memwatch/memwatch/cmd/internal/cli"
	"github.com/memwatch/memwatch/layout/nowhistory"
	"github.com/memwatch/memwatch/mcpserver"
	"github.com/memwatch/memwatch/rewrite"
	"github.com/memwatch/memwatch/state"
)

func stampCmd(g *globals) *cobra.Command {
	var at string
	cmd := &cobra.Command{
		Use:   "stamp FILE",
		Short: "Insert the run's ## YYYY-MM-DD-HHmm heading at the top of # History",
		Long: `Insert "## YYYY-MM-DD-HHmm" (local time) at the top of "# History" in a
now-history memory.md, creating "# History" if it is missing, so the agent
writes this run's summary under it. Running it twice in the same minute
changes nothing. The write is atomic and only inserts, so no archive is
needed.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			t := time.Now()
			if at != "" {
				var err error
				if t, err = time.ParseInLocation("2006-01-02T15:04", at, time.Local); err != nil {
					if t, err = time.ParseInLocation(nowhistory.TimeFormat, at, time.Local); err != nil {
						return cli.UsageError{Err: fmt.Errorf("--at: want YYYY-MM-DDTHH:MM or YYYY-MM-DD-HHmm, not %q", at)}
					}
				}
			}
			root, file, err := fileRoot(args[0])
			if err != nil {
				return err
			}
			defer root.Close()
			stamp := t.Format(nowhistory.TimeFormat)
			rw := rewrite.New(nil, slog.New(slog.DiscardHandler))
			out, err := rw.Apply(context.Background(), rewrite.Request{Root: root, Target: file, AllowCreate: true,
				Compute: func(_ context.Context, old []byte) ([]byte, error) { return nowhistory.Stamp(old, stamp) }},
				&state.Record{Rule: "stamp"})
			if err != nil {
				return err
			}
			fmt.Fprint(g.Stdout, mcpserver.StampMessage(out, stamp, args[0]))
			return nil
		},
	}
	cmd.Flags().StringVar(&at, "at", "", "time to stamp instead of now (YYYY-MM-DDTHH:MM, local time)")
	return cmd
}
