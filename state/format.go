package state

import (
	"fmt"
	"path/filepath"
	"strings"
	"text/tabwriter"
	"time"
)

// FormatJournal renders records as the table memwatch log prints, one line
// per record, newest first as given. filtered says the records were
// selected by a filter, so an empty list means "no record matches" rather
// than "nothing happened yet".
func FormatJournal(recs []Record, filtered bool) string {
	if len(recs) == 0 {
		if filtered {
			return "no journal record matches\n"
		}
		return "journal is empty: memwatch has not changed anything yet\n"
	}
	var b strings.Builder
	tw := tabwriter.NewWriter(&b, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tTIME\tSTORE\tRULE\tTARGET\tOUTCOME\tSIZE\tARCHIVE\tTRIGGER\tREASON")
	for _, r := range recs {
		size := fmt.Sprintf("%d→%d", r.BeforeSize, r.AfterSize)
		if r.Tokens > 0 {
			size += fmt.Sprintf(" (%d tok)", r.Tokens)
		}
		target := filepath.Join(filepath.Base(r.Root), r.Target)
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", r.ID, r.Time.Local().Format(time.DateTime), r.Store, r.Rule, target, r.Outcome, size, dash(r.Archive), dash(r.Trigger), dash(oneLine(r.Reason)))
	}
	tw.Flush()
	return b.String()
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// oneLine keeps a reason on its table row.
func oneLine(s string) string { return strings.Join(strings.Fields(s), " ") }
