package cli

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime/debug"
	"strings"

	"github.com/spf13/cobra"

	"github.com/memwatch/memwatch/control"
)

func RecallCmd(g *Globals) *cobra.Command {
	var dir, scope, store, sortBy, host, color string
	var limit, around int
	var all, asJSON, explain, noPager bool
	cmd := &cobra.Command{
		Use:   "recall [--dir DIR | --store NAME | --all] [--scope S] [-C N] [--limit N] [--sort relevance|newest] [--json] [--explain] QUERY...",
		Short: "Search agents' memory and conversations, with citations",
		Long: `Search an agent's memory the way its recall_memory tool does: the notes it
keeps (detail/, HISTORY*.md, MEMORY.md, facts, ...), what memwatch moved out
of them (memory-older-*.md, monthly and archived files), and its raw
session logs. In logs, the decoded text of each message is searched, tool
calls with their input and tool results included, never the JSON around it.
Each result has a citation (detail/auth.md#L10, messages.jsonl#L45, or
s1.jsonl@3#L45 for a log the agent has rewritten since) that memwatch show
opens, the project it is in and when it was said; the same text found
again (a history entry and its monthly copy, a tool call made twice) is one
result, its copies counted.

Where it looks, with no --dir, --store or --all: the root the current
directory is in; else, in an agent project's working directory (where you
run Claude Code, Codex, ...), that project's memory; else every root you
can read. It says on stderr which.

A question in plain words ("what did we decide about the deploy?") is
answered by relevance: the messages and lines that hold its rarer words
most, with the messages around them, best first (BM25 with English stemming;
"the", "what", "did" do not count; not every word has to appear). One word,
an identifier (zanzibar-quokka, src/auth.go) or a phrase in double quotes
finds every line holding it exactly, case-insensitively. --sort newest finds
the lines holding every word, notes first, then messages, newest first.

Exit status, as grep's: 0 when something is found, 1 when nothing is, 2 on
a usage error (an unknown --scope or store, a bad flag).

When the daemon runs, it answers (from its index, within what you may
read); else this process searches itself. --explain says which way the
search went and, for a question, why each result ranked where it did.

On a central node (a policy with fleet:), --all searches its copy of every
host it follows, --host NAME one of them; each result names its host and
is cited HOST:/path#L5, which memwatch show takes as printed.`,
		Example: `  memwatch recall "what did we decide about the deploy?"   # a question: the best answers first
  memwatch recall -n 3 -C 1 ratelimit                     # a word: 3 results, a turn either side
  memwatch recall --all --sort newest "rate limiter"      # a phrase in every root, newest first
  memwatch recall --explain deploy                        # which way the search went`,
		Args: NeedArgs(1, "what to search for: a question in plain words, a word, or \"a phrase\""),
		RunE: func(cmd *cobra.Command, args []string) error {
			OneShot()
			req := control.RecallRequest{Query: strings.Join(args, " "), Store: store, All: all, Host: host, Limit: limit, Sort: sortBy, Context: around, Explain: explain}
			if limit < 1 {
				return UsageError{fmt.Errorf("--limit must be 1 or more, not %d", limit)}
			}
			if around < 0 || around > control.MaxContext {
				return UsageError{fmt.Errorf("-C must be from 0 to %d, not %d", control.MaxContext, around)}
			}
			switch sortBy {
			case control.SortRelevance, control.SortNewest:
			default:
				return UsageError{fmt.Errorf("--sort must be relevance or newest, not %q", sortBy)}
			}
			if scope != "" && scope != "all" {
				req.Scope = strings.Split(scope, ",")
			}
			colored, err := UseColor(color, g.RawOut)
			if err != nil {
				return err
			}
			if dir != "" {
				if req.Dir, err = filepath.Abs(dir); err != nil {
					return UsageError{err}
				}
			}
			if req.Cwd, err = os.Getwd(); err != nil {
				req.Cwd = "/"
			}
			page := req
			page.Limit = min(limit, control.MaxLimit)
			if _, err := control.ParseRecallRequest(page.Values()); err != nil {
				return UsageError{err}
			}
			res, err := g.Backend.AnswerRecall(cmd.Context(), req)
			if err != nil {
				if errors.Is(err, control.ErrUsage) {
					return UsageError{err}
				}
				return err
			}
			if res.Searched != "" {
				fmt.Fprintf(g.Stderr, "recall: searching %s\n", res.Searched)
			}
			if len(res.Results) < limit && len(res.Results) >= control.MaxResults {
				fmt.Fprintf(g.Stderr, "recall: the first %d results: a search goes %d deep (a rarer word, --dir or --scope narrows it)\n", len(res.Results), control.MaxResults)
			}
			if res.Skipped > 0 {
				fmt.Fprintf(g.Stderr, "recall: searched the %d most recently changed of your %d roots; the %d older ones were left out (search one with --dir DIR)\n", res.Roots, res.Roots+res.Skipped, res.Skipped)
			}
			if res.Stats.Unread > 0 {
				fmt.Fprintf(g.Stderr, "recall: %d file(s) left out, not readable by uid %d (%s)\n", res.Stats.Unread, os.Geteuid(), res.Stats.Why)
			}
			if explain {
				how := "by the scan (no index)"
				if res.Stats.Indexed > 0 {
					how = fmt.Sprintf("by the index for %d of %d files (%d of %d blocks read), the scan for the rest", res.Stats.Indexed, res.Stats.Files, res.Stats.BlocksRead, res.Stats.Blocks)
				}
				fmt.Fprintf(g.Stderr, "recall: answered %s %s over %d root(s); %s read in %v%s\n", map[bool]string{true: "by the daemon", false: "here"}[res.Daemon], how,
					res.Roots, g.Size(res.Stats.BytesRead), res.Stats.Duration.Round(10_000), map[bool]string{true: "; stopped at the limit", false: ""}[res.Stats.StoppedEarly])
			}
			if asJSON {
				// Each result with the passage the text output shows it in.
				for k, ps := range control.Passages(res.Results) {
					for _, m := range ps.Members {
						res.Results[m].Passage = k + 1
					}
				}
				if err := PrintJSON(g, res.Results); err != nil {
					return err
				}
			} else {
				// As rg: paths from the current directory, a pager on a
				// terminal when it does not fit (log's).
				var out strings.Builder
				printResults(&out, req.Query, res, Paint(colored), explain, req.Cwd)
				g.Page(out.String(), noPager)
			}
			// What the limit left out is said, as journalctl -n says it.
			switch more := res.Stats.More; {
			case more == 0 || len(res.Results) == 0:
			case res.Stats.MoreCapped:
				fmt.Fprintf(g.Stderr, "recall: over %d more lines hold it, not shown (--limit %d shows more; a rarer word, --dir or --scope narrows it)\n", more, len(res.Results)+more)
			default:
				fmt.Fprintf(g.Stderr, "recall: %d more not shown (--limit %d shows them all)\n", more, len(res.Results)+more)
			}
			if len(res.Results) == 0 {
				if !asJSON {
					fmt.Fprintf(g.Stderr, "recall: nothing found for %q\n", req.Query)
				}
				return ErrNotFound
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&dir, "dir", "", "search this directory (a root, or any directory of notes and logs)")
	cmd.Flags().StringVar(&scope, "scope", "all", "all, or the sources to search, e.g. detail, messages, history, memory, moved (comma-separated)")
	cmd.Flags().IntVarP(&limit, "limit", "n", control.DefaultLimit, "at most this many results (-n, as log's)")
	cmd.Flags().IntVarP(&around, "context", "C", 0, "show N turns before and after each result")
	cmd.Flags().BoolVar(&all, "all", false, "search every root of every store of the policy")
	cmd.Flags().StringVar(&store, "store", "", "search every root of this store of the policy")
	cmd.Flags().StringVar(&host, "host", "", "on a central node (fleet:), search this host alone")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON: source, file, line, content, citation, project, time and copies of each result")
	cmd.Flags().BoolVar(&explain, "explain", false, "say on stderr how the search was answered, and with each ranked result why it ranked there")
	cmd.Flags().StringVar(&sortBy, "sort", control.SortRelevance, "relevance (a question: best first; a word or phrase: every line holding it) or newest (every word, newest first)")
	cmd.Flags().StringVar(&color, "color", "auto", "colour the output: auto (on a terminal), always or never")
	cmd.Flags().BoolVar(&noPager, "no-pager", false, "never page the output")
	return cmd
}

// ErrNotFound ends a search or show that found nothing: exit 1, as grep.
var ErrNotFound = QuietExit{Code: ExitFailure}

// QuietExit ends a command with a code and nothing more to say.
type QuietExit struct{ Code int }

func (q QuietExit) Error() string { return fmt.Sprintf("exit %d", q.Code) }

// OneShot tunes the garbage collector for a command that answers and
// exits: a search's heap is small and short-lived (its peak RSS is the
// binary and the mapped index), so collecting at 4x the live heap instead
// of 2x saves a few milliseconds of a 15 ms answer and no memory that
// shows. GOGC in the environment still wins.
func OneShot() {
	if os.Getenv("GOGC") == "" {
		debug.SetGCPercent(400)
	}
}

// AskRecall asks the daemon to answer req; ok is false when none (of the
// command's policy) answers. A limit past one answer's (control.MaxLimit
// results, MaxAnswer bytes) is asked a page at a time.
func AskRecall(ctx context.Context, ctl *control.Client, req control.RecallRequest) (control.RecallResponse, bool, error) {
	want := req.Limit
	var res control.RecallResponse
	for first := true; ; first = false {
		page := req
		page.Limit = min(want-len(res.Results), control.MaxLimit)
		got, err := ctl.Recall(ctx, page)
		switch {
		case errors.Is(err, control.ErrNoDaemon) && first:
			return res, false, nil
		case err != nil:
			return res, true, err
		}
		got.Results = append(res.Results, got.Results...)
		res = got
		if res.Next <= req.Offset || len(res.Results) >= want {
			break
		}
		req.Offset = res.Next
	}
	res.Daemon = true
	return res, true, nil
}
