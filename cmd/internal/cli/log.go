package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/memwatch/memwatch/control"
)

func LogCmd(g *Globals) *cobra.Command {
	var f control.JournalQuery
	var asJSON, kept, follow, noPager bool
	var since, until, color string
	cmd := &cobra.Command{
		Use:   "log [-n N] [--since WHEN] [--until WHEN] [-f] [--store S] [--rule R]",
		Short: "Print the action journal: what memwatch did, newest first",
		Long: `Print the action journal, whether or not the daemon runs, newest first as
git log does. Each record is a line (id for memwatch undo, time, outcome:
done, skipped, rejected or failed, rule, file, sizes, what started it),
with its reason and the archive of the pre-image below it, wrapped to the
terminal; on a terminal a long journal goes through a pager ($PAGER, else
less), as git log and journalctl do.

--since and --until take a date (2026-11-27), a date and time
(2026-11-27 14:00), a time of day (14:00, today's), today, yesterday, or a
time ago (90m, 2h, 3d).
-f follows: the last records oldest first, then each new one as it is
journaled, until Ctrl-C.

Exit status: 0 when records are printed (or the journal is empty), 1 when
none matches what --store, --root, --rule, --since or --until asked for,
2 on a usage error (an unknown --store, --rule or --root, a bad time).`,
		Example: `  memwatch log                             # the last 50 records
  memwatch log -n 5 --since 2h             # at most 5, of the last two hours
  memwatch log --rule compress-memory -f   # follow MEMORY.md's compressions
  memwatch log --since 14:00               # what happened since two o'clock`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if f.Limit < 1 || f.Limit > 100_000 {
				return UsageError{fmt.Errorf("-n %d: give a number from 1 to 100000", f.Limit)}
			}
			now := time.Now()
			for _, t := range []struct {
				flag, v string
				to      *time.Time
			}{{"--since", since, &f.Since}, {"--until", until, &f.Until}} {
				if t.v == "" {
					continue
				}
				v, err := parseWhen(t.v, now)
				if err != nil {
					return UsageError{fmt.Errorf("%s: %w", t.flag, err)}
				}
				*t.to = v
			}
			if f.Root != "" {
				if abs, err := filepath.Abs(f.Root); err == nil {
					f.Root = abs // --root . from inside it
				}
			}
			if kept {
				if f.Rule != "" && f.Rule != control.RuleKept {
					return UsageError{fmt.Errorf("--kept lists the kept copies; it cannot be combined with --rule %s", f.Rule)}
				}
				f.Rule = control.RuleKept
			}
			colored, err := UseColor(color, g.RawOut)
			if err != nil {
				return err
			}
			j, err := g.Backend.OpenJournal(cmd.Context())
			if err != nil {
				return err
			}
			defer j.Close()
			if follow {
				return g.followJournal(cmd.Context(), j, f, Paint(colored))
			}
			recs, err := j.Read(cmd.Context(), f)
			if err != nil {
				return err
			}
			if len(recs) == 0 {
				if err := j.CheckNames(cmd.Context(), f); err != nil {
					return err
				}
			}
			filtered := f.Store != "" || f.Root != "" || f.Rule != "" || !f.Since.IsZero() || !f.Until.IsZero()
			if asJSON {
				if err := printJournal(g, recs); err != nil {
					return err
				}
			} else {
				text := control.FormatJournal(g.inertRecords(recs), g.journalFormat(filtered, Paint(colored)))
				if n := j.Kept(cmd.Context(), f); n > 0 {
					// Kept copies are backups the agent never reads: say there are some.
					text += fmt.Sprintf("\n%d kept copies (an agent's version met during a rewrite, kept as a backup; its lines are in the live file): memwatch log --kept\n", n)
				}
				g.Page(text, noPager)
			}
			if len(recs) == 0 && filtered {
				return ErrNotFound // asked for something that is not there, as grep
			}
			return nil
		},
	}
	cmd.Flags().IntVarP(&f.Limit, "limit", "n", 50, "at most this many records")
	cmd.Flags().StringVar(&since, "since", "", "only records from this time on (2026-11-27, '2026-11-27 14:00', today, yesterday, 2h)")
	cmd.Flags().StringVar(&until, "until", "", "only records before this time (as --since)")
	cmd.Flags().BoolVarP(&follow, "follow", "f", false, "print new records as they are journaled, until Ctrl-C")
	cmd.Flags().StringVar(&f.Store, "store", "", "only this store")
	cmd.Flags().StringVar(&f.Root, "root", "", "only this root")
	cmd.Flags().StringVar(&f.Rule, "rule", "", "only this rule (e.g. compact)")
	cmd.Flags().BoolVar(&kept, "kept", false, "only the kept copies (backups of an agent's version met during a rewrite); memwatch show prints one")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	cmd.Flags().BoolVar(&noPager, "no-pager", false, "never page the output")
	cmd.Flags().StringVar(&color, "color", "auto", "colour the output: auto (on a terminal), always or never")
	return cmd
}

// journalFormat is how log prints records here: sizes as --bytes says,
// wrapped to the terminal, coloured as git log colours its commits.
func (g *Globals) journalFormat(filtered bool, p Paint) control.Format {
	return control.Format{
		Filtered: filtered,
		Width:    terminalWidth(g.RawOut),
		Size:     g.Size,
		Mark: func(part, s string) string {
			switch part {
			case "id":
				return p.Wrap(SGRID, s)
			case "done":
				return p.Wrap(SGRLine, s)
			case "failed", "rejected":
				return p.Wrap(SGRMatch, s)
			case "skipped", "dim":
				return p.Wrap(SGRDim, s)
			}
			return s
		},
	}
}

// inertRecords makes what an agent could have named (files, roots,
// reasons quoting them) inert on a terminal before colour is added: the
// text then goes to the terminal or pager as it is.
func (g *Globals) inertRecords(recs []control.Record) []control.Record {
	if g.Stdout == g.RawOut {
		return recs
	}
	out := make([]control.Record, len(recs))
	for i, r := range recs {
		r.Root, r.Target, r.Store, r.Rule = InertText(r.Root), InertText(r.Target), InertText(r.Store), InertText(r.Rule)
		r.Archive, r.Reason, r.Outcome, r.Trigger = InertText(r.Archive), InertText(r.Reason), InertText(r.Outcome), InertText(r.Trigger)
		out[i] = r
	}
	return out
}

// ReadDaemon asks the daemon for the records f selects, newest first, a
// page at a time (one answer holds at most control.MaxJournalPage).
func ReadDaemon(ctx context.Context, ctl *control.Client, f control.JournalQuery) ([]control.Record, error) {
	want := min(f.Limit, 100_000)
	var recs []control.Record
	for len(recs) < want {
		page := f
		page.Limit = min(want-len(recs), control.MaxJournalPage)
		if len(recs) > 0 {
			page.BeforeID = recs[len(recs)-1].ID
		}
		got, err := ctl.Journal(ctx, page)
		if err != nil {
			return nil, err
		}
		recs = append(recs, got...)
		if len(got) == 0 {
			break
		}
	}
	return recs, nil
}

// KeptDaemon asks the daemon how many kept copies f's store and root
// have (0 when f lists them, or on any error: it is a hint).
func KeptDaemon(ctx context.Context, ctl *control.Client, f control.JournalQuery) int {
	if f.Rule == control.RuleKept {
		return 0
	}
	q := control.JournalQuery{Store: f.Store, Root: f.Root, Rule: control.RuleKept}
	n, err := ctl.JournalCount(ctx, q)
	if err != nil {
		return 0
	}
	return n.Count
}

// followJournal prints the last records oldest first, then each new one
// as it is journaled (a look every second), until Ctrl-C.
func (g *Globals) followJournal(ctx context.Context, j Journal, f control.JournalQuery, p Paint) error {
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()
	format := g.journalFormat(true, p)
	recs, err := j.Read(ctx, f)
	if err != nil {
		return err
	}
	f.Limit = 1000
	for {
		if len(recs) > 0 {
			slices.Reverse(recs)
			fmt.Fprint(g.RawOut, control.FormatJournal(g.inertRecords(recs), format))
			g.Flush() // a pipe (log -f | grep) sees each record as it comes
			f.AfterID = recs[len(recs)-1].ID
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(time.Second):
		}
		if recs, err = j.Read(ctx, f); err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
	}
}

// parseWhen reads a time as log's --since and --until take it.
func parseWhen(s string, now time.Time) (time.Time, error) {
	t := strings.TrimSpace(s)
	day := time.Date(now.Year(), now.Month(), now.Day(), 0, 0, 0, 0, time.Local)
	switch strings.ToLower(t) {
	case "now":
		return now, nil
	case "today":
		return day, nil
	case "yesterday":
		return day.AddDate(0, 0, -1), nil
	case "tomorrow":
		return day.AddDate(0, 0, 1), nil
	}
	for _, layout := range []string{time.RFC3339Nano, time.DateTime, "2006-01-02 15:04", "2006-01-02T15:04:05", "2006-01-02T15:04", time.DateOnly} {
		if v, err := time.ParseInLocation(layout, t, time.Local); err == nil {
			return v, nil
		}
	}
	// A time of day, as journalctl takes it: today's.
	for _, layout := range []string{"15:04", "15:04:05"} {
		if v, err := time.ParseInLocation(layout, t, time.Local); err == nil {
			return time.Date(day.Year(), day.Month(), day.Day(), v.Hour(), v.Minute(), v.Second(), 0, time.Local), nil
		}
	}
	ago := strings.TrimSuffix(strings.TrimPrefix(t, "-"), " ago")
	if d, err := control.ParseDuration(ago); err == nil && ago != "" {
		return now.Add(-d), nil
	}
	return time.Time{}, fmt.Errorf("unknown time %q: give 2026-11-27, '2026-11-27 14:00', 14:00 (today), today, yesterday or a time ago (90m, 2h, 3d)", s)
}

// printJournal prints journal records as JSON.
func printJournal(g *Globals, recs []control.Record) error {
	if recs == nil {
		recs = []control.Record{}
	}
	enc := json.NewEncoder(g.Stdout)
	enc.SetIndent("", "  ")
	return enc.Encode(recs)
}
