package cli

import (
	"fmt"
	"io"
	"path/filepath"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/memwatch/memwatch/control"
)

func StatusCmd(g *Globals) *cobra.Command {
	var asJSON, noPager bool
	var color string
	cmd := &cobra.Command{
		Use:   "status [FILE]",
		Short: "Show the daemon's status, or the structure of a memory file",
		Long: `Without FILE: the running daemon's stores, roots, queue, running jobs and
LLM budget use. With FILE (a now-history memory.md): its path, size, line
count, headings with line numbers and line counts, and archive info, with
no content (what the memory_status tool returns).`,
		Example: `  memwatch status              # the daemon: stores, roots, queue, jobs, holds
  memwatch status MEMORY.md    # a memory file's structure against its limits`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(args) == 1 {
				return g.Backend.FileStatus(args[0], asJSON)
			}
			st, err := g.Backend.DaemonStatus(cmd.Context())
			if err != nil {
				return err
			}
			if asJSON {
				return PrintJSON(g, st)
			}
			colored, err := UseColor(color, g.RawOut)
			if err != nil {
				return err
			}
			var b strings.Builder
			printStatus(g, &b, st)
			g.Page(g.TerminalText(b.String(), colored, statusColour), noPager)
			return nil
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	cmd.Flags().StringVar(&color, "color", "auto", "colour the output: auto (on a terminal), always or never")
	cmd.Flags().BoolVar(&noPager, "no-pager", false, "never page the output")
	return cmd
}

// statusColour colours status as git status does its sections: what is
// wrong in red, what waits for a person in yellow, headings bold.
func statusColour(line string) string {
	switch {
	case strings.HasPrefix(line, "PROBLEM:"), strings.HasPrefix(line, "warning:"), strings.HasPrefix(line, "agents deleted or cut"), strings.HasPrefix(line, "credentials:"):
		return SGRDel
	case strings.HasPrefix(line, "held by an undo"), strings.HasPrefix(line, "files not captured yet"), strings.HasPrefix(line, "catching up"):
		return SGRWarn
	case strings.HasPrefix(line, "STORE "), strings.HasPrefix(line, "memwatch "):
		return SGRHeader
	}
	return ""
}

// printStatus prints the daemon's status as a person reads it.
func printStatus(g *Globals, w io.Writer, st control.Status) {
	fmt.Fprintf(w, "memwatch %s, pid %d, up %s\n", st.Version, st.PID, time.Since(st.Started).Round(time.Second))
	fmt.Fprintf(w, "state %s, policy %s\n", st.StateDir, st.Policy)
	fmt.Fprintf(w, "watching %d roots with %d directory watches (%d polled)\n\n", st.Watcher.Roots, st.Watcher.Watches, st.Watcher.Polled)
	if p := st.StateProblem; p != nil {
		fmt.Fprintf(w, "PROBLEM: memwatch cannot write its state directory %s since %s: %s\n", p.Dir, p.Since.Local().Format(time.DateTime), p.Error)
		fmt.Fprintf(w, "  not recorded meanwhile: %s; %d root(s) will be caught up on its own once it can write again (free space there)\n\n",
			strings.Join(p.Missed, ", "), p.Roots)
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "STORE\tLAYOUT\tCOMPACTOR\tROOTS\tARCHIVES\tKEPT")
	for _, s := range st.Stores {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%d (%s)\t%d\n", s.Name, s.Layout, s.Compactor, len(s.Roots), s.Archives, g.Size(int64(s.ArchiveBytes)), s.Kept)
	}
	tw.Flush()
	for _, s := range st.Stores {
		if s.Kept == 0 {
			continue
		}
		fmt.Fprintf(w, "\n%s: %d kept copies (backups of an agent's version met during a rewrite; its lines are in the live file). Read one with memwatch show, compare with memwatch diff:\n", s.Name, s.Kept)
		for _, k := range s.KeptCopies {
			fmt.Fprintf(w, "  %s  %s  (journal %d, %s): %s\n", k.Time.Local().Format(time.DateTime), filepath.Join(k.Root, k.Path), k.Record, g.Size(int64(k.Size)), k.Reason)
		}
		if s.Kept > len(s.KeptCopies) {
			fmt.Fprintf(w, "  ... and %d older: memwatch log --store %s --rule kept\n", s.Kept-len(s.KeptCopies), s.Name)
		}
	}
	fmt.Fprintf(w, "\nstate directory holds: journal %s, spool %s, recall index %s, versions %s\n", g.Size(int64(st.Disk.Journal)), g.Size(int64(st.Disk.Spool)), g.Size(int64(st.Disk.Index)), g.Size(int64(st.Disk.Versions)))
	if r := st.Replica; r != nil {
		fmt.Fprintf(w, "replica: %s\n", g.replicaLine(*r))
	}
	if len(st.Fleet) > 0 {
		fmt.Fprintf(w, "\nfleet: %d host(s) followed\n", len(st.Fleet))
		for _, h := range st.Fleet {
			fmt.Fprintf(w, "  %s\n", g.fleetLine(h))
		}
	}
	if len(st.Holds) > 0 {
		fmt.Fprintf(w, "\nheld by an undo (the rule applies again when the file grows past its threshold again, or at once with memwatch redo ID):\n")
		for _, h := range st.Holds {
			fmt.Fprintf(w, "  %s: %s held since the undo of #%d (%s, %s, %d lines then): memwatch redo %d\n", filepath.Join(h.Root, h.Target), h.Rule, h.Record,
				h.Time.Local().Format(time.DateTime), g.Size(int64(h.Size)), h.Lines, h.Record)
		}
	}
	if len(st.Losses) > 0 {
		fmt.Fprintf(w, "\nagents deleted or cut memory files (their versions are kept; memwatch versions PATH lists them):\n")
		for _, l := range st.Losses {
			what := fmt.Sprintf("cut from %d to %d lines", l.LinesBefore, l.LinesAfter)
			fix := fmt.Sprintf("memwatch restore %s@%d", filepath.Join(l.Root, l.Path), l.Before)
			if l.Kind == "deleted" {
				what = fmt.Sprintf("deleted (%d lines)", l.LinesBefore)
				fix = fmt.Sprintf("memwatch restore --deleted %s --since 1h", l.Root)
			}
			if l.Restored {
				fix = "put back at once (restore_deleted)"
			}
			fmt.Fprintf(w, "  %s  %s %s: %s\n", l.Time.Local().Format(time.DateTime), filepath.Join(l.Root, l.Path), what, fix)
		}
	}
	if c := st.CatchUp; c != nil {
		fmt.Fprintf(w, "\ncatching up since start: %s\n", c)
		under := 0
		for _, r := range c.Roots {
			if r.Files == 0 && r.Bytes == 0 && c.Waiting > 0 {
				break // said below, in one line
			}
			under++
			fmt.Fprintf(w, "  %s (%s): %d of %d files, %s of %s\n", r.Root, r.Store, r.Files, r.FilesTotal, g.Size(int64(r.Bytes)), g.Size(int64(r.BytesTotal)))
		}
		if c.Waiting > 0 {
			and := map[bool]string{true: "and ", false: ""}[under > 0]
			fmt.Fprintf(w, "  %s%d root(s) not started yet, %s (memwatch status --json lists them)\n", and, c.Waiting, g.Size(c.WaitingBytes))
		}
	}
	if len(st.Uncaptured) > 0 {
		fmt.Fprintf(w, "\nfiles not captured yet (a flood of writes; a pass through the root captures them):\n")
		for _, r := range st.Uncaptured {
			fmt.Fprintf(w, "  %s\n", r)
		}
	}
	for _, p := range st.Progress {
		total, left := "?", ""
		if p.Total > 0 {
			total = fmt.Sprint(p.Total)
		}
		if p.Left > 0 {
			left = fmt.Sprintf(", about %s left", p.Left)
		}
		fmt.Fprintf(w, "  %s (%s, %s): %d of %s files looked at, %.0f a second%s\n", p.Root, p.Store, p.Rule, p.Files, total, p.Rate, left)
	}
	fmt.Fprintf(w, "\njobs: %d queued, %d running, %d cooling; %d run, %d failed, %d retried since start\n",
		max(len(st.Jobs.Queued), st.Jobs.QueuedCount), len(st.Jobs.Running), st.Jobs.Cooling, st.Jobs.Stats.Finished, st.Jobs.Stats.Failed, st.Jobs.Stats.Retried)
	if st.Background > 0 {
		fmt.Fprintf(w, "background: %d capture(s), version(s) and index update(s) waiting\n", st.Background)
	}
	for _, j := range st.Jobs.Running {
		fmt.Fprintf(w, "  running: %s %s %s %s\n", j.Store, j.Rule, j.Root, j.Target)
	}
	for _, warn := range st.Warnings {
		fmt.Fprintf(w, "warning: %s\n", warn)
	}
	if sc := st.Secrets; sc != nil && sc.Found > 0 {
		kinds := make([]string, 0, len(sc.Kinds))
		for k := range sc.Kinds {
			kinds = append(kinds, k)
		}
		sort.Strings(kinds)
		fmt.Fprintf(w, "credentials: %d in the agents' memory, of %d kind(s): %s (counted %s); rotate them: memwatch secrets lists where\n",
			sc.Found, len(kinds), strings.Join(kinds, ", "), sc.At.Local().Format(time.DateTime))
	}
	for _, l := range st.LLM {
		fmt.Fprintf(w, "llm %s: %d of %d tokens used today\n", l.Endpoint, l.Used, l.Budget)
	}
}

// replicaLine says in one line how the replication of the state is doing.
func (g *Globals) replicaLine(r control.ReplicaStatus) string {
	switch {
	case r.Refused != "":
		return fmt.Sprintf("%s: not replicating: %s", r.URL, r.Refused)
	case r.Outage != "":
		return fmt.Sprintf("%s: unreachable since %s (%s); %d failed sync(s), changes kept here until it answers", r.URL, r.Since.Local().Format(time.DateTime), r.Outage, r.Failures)
	}
	bytes := "not counted yet"
	if r.Bytes >= 0 {
		bytes = g.Size(int64(r.Bytes))
	}
	lag := "in sync"
	if r.Pending {
		lag = fmt.Sprintf("%.1fs behind (%s)", r.Lag, strings.Join(r.Behind, ", "))
	}
	return fmt.Sprintf("%s: %s, last in sync %s, bucket holds %s, %d failed sync(s)", r.URL, lag, r.LastSync.Local().Format(time.DateTime), bytes, r.Failures)
}

// fleetLine says where a central node is with one host: what it holds of
// it, how far behind the bucket, whether the host still replicates.
func (g *Globals) fleetLine(h control.HostStatus) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s: %s restored", h.Host, g.Size(int64(h.Bytes)))
	if !h.LastChange.IsZero() {
		fmt.Fprintf(&b, ", last change %s (%s ago)", h.LastChange.Local().Format(time.DateTime), time.Since(h.LastChange).Round(time.Second))
	}
	switch {
	case len(h.Databases) == 0:
		b.WriteString(", nothing restored yet")
	case h.Checked.IsZero():
		b.WriteString(", bucket not reached")
	case h.Lag > 0:
		fmt.Fprintf(&b, ", %.1fs behind the bucket", h.Lag)
	default:
		b.WriteString(", up to date with the bucket")
	}
	switch {
	case len(h.Databases) == 0:
	case h.Copied.IsZero():
		b.WriteString(", not searchable yet (being copied)")
	case h.Copied.Before(h.LastChange):
		b.WriteString(", its last change being copied for search")
	default:
		b.WriteString(", searchable")
	}
	if h.Stopped {
		b.WriteString("; STOPPED: no change in the bucket for a while (the host is down, or idle); what it had stays searchable")
	}
	if h.Error != "" {
		fmt.Fprintf(&b, "; skipped: %s", h.Error)
	}
	return b.String()
}
