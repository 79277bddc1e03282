package main

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	"github.com/spf13/cobra"

	"github.com/memwatch/memwatch/cmd/internal/cli"
	"github.com/memwatch/memwatch/confine"
	"github.com/memwatch/memwatch/layout/apprecords"
	"github.com/memwatch/memwatch/policy"
	"github.com/memwatch/memwatch/state"
)

func recordsCmd(g *globals) *cobra.Command {
	var dbPath, app, table string
	var ids []string
	var limit int
	cmd := &cobra.Command{
		Use:   "records list|purge|delete|context --db PATH --app ID",
		Short: "Inspect or remove an app's memory records in an app-records database",
		Long: `list: the app's records as JSON ({"memories": [...]}).
purge: delete all of the app's records; delete: the records named with --id.
Both journal every row with its content first (memwatch undo restores it).
context: the text the app injects into its prompt from its records, newest first.`,
		Args:      cobra.ExactArgs(1),
		ValidArgs: []string{"list", "purge", "delete", "context"},
		RunE: func(cmd *cobra.Command, args []string) error {
			if dbPath == "" || app == "" {
				return cli.UsageError{Err: errors.New("--db PATH and --app ID are required")}
			}
			ctx := context.Background()
			switch args[0] {
			case "list", "context":
				db, err := apprecords.OpenPath(ctx, dbPath, table, false)
				if err != nil {
					return err
				}
				defer db.Close()
				rs, err := db.Records(ctx, app)
				if err != nil {
					return err
				}
				if args[0] == "context" {
					fmt.Fprint(g.Stdout, apprecords.Context(app, rs, limit))
					return nil
				}
				if rs == nil {
					rs = []apprecords.Record{}
				}
				return cli.PrintJSON(g.Globals, map[string]any{"memories": rs})
			case "purge", "delete":
				var idList []int64
				for _, s := range ids {
					id, err := strconv.ParseInt(s, 10, 64)
					if err != nil {
						return cli.UsageError{Err: fmt.Errorf("--id %q is not a number", s)}
					}
					idList = append(idList, id)
				}
				if args[0] == "delete" && len(idList) == 0 {
					return cli.UsageError{Err: errors.New("delete needs --id (use purge to delete every record of the app)")}
				}
				var p *policy.Policy
				if g.Policy != "" {
					var err error
					if p, err = g.LoadPolicy(); err != nil {
						return err
					}
				}
				journal, err := state.Open(ctx, g.ResolveStateDir(p))
				if err != nil {
					return err
				}
				defer journal.Close()
				root, err := confine.OpenFile(dbPath, confine.Options{})
				if err != nil {
					return err
				}
				defer root.Close()
				n, err := apprecords.Remove(ctx, journal, "", root, table, app, idList, args[0]+" from the command line")
				if err != nil {
					return err
				}
				fmt.Fprintf(g.Stdout, "deleted %d record(s) of app %s (journaled; memwatch log shows them, memwatch undo ID restores one)\n", n, app)
				return nil
			}
			return cli.UsageError{Err: fmt.Errorf("unknown records action %q: list, purge, delete or context", args[0])}
		},
	}
	cmd.Flags().StringVar(&dbPath, "db", "", "the application's SQLite database")
	cmd.Flags().StringVar(&app, "app", "", "app id")
	cmd.Flags().StringVar(&table, "table", "app_memories", "the memories table")
	cmd.Flags().StringArrayVar(&ids, "id", nil, "with delete: a record id (repeatable)")
	cmd.Flags().IntVar(&limit, "limit", 10, "with context: at most this many records")
	return cmd
}
