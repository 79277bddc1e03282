package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net/url"
	"os"
	"path/filepath"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/memwatch/memwatch/confine"
	"github.com/memwatch/memwatch/control"
	"github.com/memwatch/memwatch/fleet/mirror"
	"github.com/memwatch/memwatch/layout/registry"
	"github.com/memwatch/memwatch/layout/sessiondetail"
	"github.com/memwatch/memwatch/policy"
	"github.com/memwatch/memwatch/recall"
	"github.com/memwatch/memwatch/spool"
)

// defaultSources are searched in a directory no store claims: notes, the
// histories and every session log in it (messages.jsonl, Claude Code's
// <uuid>.jsonl, ...) or in its sessions/ (seed 002's workspace).
var defaultSources = append(append([]recall.Source{}, sessiondetail.Sources...),
	recall.Source{Glob: "*.jsonl", Kind: recall.Log, Label: "messages"},
	recall.Source{Glob: "sessions/*.jsonl", Kind: recall.Log, Label: "messages"},
	recall.Source{Glob: "HISTORY*.md", Kind: recall.Text, Label: "history"},
	recall.Source{Glob: "MEMORY.md", Kind: recall.Text, Label: "memory"},
	recall.Source{Glob: "memory.md", Kind: recall.Text, Label: "memory"},
)

func recallCmd(g *globals) *cobra.Command {
	var dir, scope, store, sortBy, host string
	var limit int
	var all, asJSON, explain bool
	cmd := &cobra.Command{
		Use:   "recall [--dir DIR | --store NAME | --all] [--scope S] [--limit N] [--sort relevance|newest] [--json] [--explain] QUERY...",
		Short: "Search an agent's notes and session logs, with citations",
		Long: `Search an agent's memory the way its recall_memory tool does: the notes it
keeps (detail/, HISTORY*.md, MEMORY.md, facts, ...) and its raw session logs.
In logs, the decoded text of each message is searched, tool calls with their
input and tool results included, never the JSON around it. Each result has a
citation (detail/auth.md#L10, messages.jsonl#L45, or s1.jsonl@3#L45 for a log
the agent has rewritten since) that memwatch show opens.

A question in plain words ("what did we decide about the deploy?") is
answered by relevance: the messages and lines that hold its rarer words
most, with the messages around them, best first (BM25 with English stemming;
"the", "what", "did" do not count; not every word has to appear). One word,
an identifier (zanzibar-quokka, src/auth.go) or a phrase in double quotes
finds every line holding it exactly, case-insensitively. --sort newest finds
the lines holding every word, notes first, then messages, newest first.

--dir searches one directory (default: the current one); --store every root
of a store of the policy, --all every root of every store. With a policy and
no --dir, from a directory that is no root of it, every root of the policy
you can read is searched. When the daemon keeps an index of the files (in
its state directory), only what can match is read; --explain says which way
each search went and, for a question, why each result ranked where it did.

On a central node (a policy with fleet:), --all (or nothing, with no store
of its own) searches its copy of every host it follows, --host NAME one of
them; each result names its host and is cited HOST:/path#L5, which memwatch
show takes as printed.`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			oneShot()
			q, err := recall.ParseQuery(strings.Join(args, " "))
			if err != nil {
				return usageError{err}
			}
			opts := recall.Options{Limit: limit, Explain: explain}
			if limit < 1 {
				return usageError{fmt.Errorf("--limit must be at least 1, not %d", limit)}
			}
			switch sortBy {
			case recall.SortRelevance, recall.SortNewest:
				opts.Sort = sortBy
			default:
				return usageError{fmt.Errorf("--sort must be relevance or newest, not %q", sortBy)}
			}
			explicit := g.policy != "" || os.Getenv("MEMWATCH_POLICY") != ""
			switch scope {
			case "all", "":
			default:
				opts.Labels = strings.Split(scope, ",")
			}
			p, err := g.policyIfGiven()
			if err != nil {
				return err
			}
			if stateDir := g.resolveStateDir(p); stateUnreadable(stateDir) {
				// memwatch's state (the spool of what agents cleared, the
				// index) is not this user's to read: the daemon answers
				// from this user's own roots.
				res, ok, err := g.recallViaDaemon(cmd.Context(), p, stateDir, q.Text, dir, store, host, all || host != "", opts)
				if err != nil {
					return err
				}
				if ok {
					if explain {
						fmt.Fprintf(g.stderr, "recall: answered by the daemon over %d root(s) of yours; %d bytes read in %v\n", res.Roots, res.Stats.BytesRead, res.Stats.Duration.Round(10_000))
					}
					sayUnread(g, res.Stats)
					return printRecall(g, q, res.Results, asJSON, explain)
				}
			}
			// A central node (fleet:) searches its copy of every host it
			// follows, with its own stores' roots under --all.
			var fleetRoots []recall.Root
			fleet := p != nil && p.Fleet != nil && dir == "" && store == "" && (all || host != "" || len(p.Stores) == 0)
			if host != "" && !fleet {
				return usageError{errors.New("--host searches a host a central node follows: give the central node's policy (one with fleet:), and no --dir or --store")}
			}
			if fleet {
				var done func()
				var errs []error
				var want func(string, int) bool
				if host != "" {
					if !slices.Contains(mirror.Hosts(g.resolveStateDir(p)), host) {
						return fmt.Errorf("recall: no host %q is followed here (memwatch status lists the hosts)", host)
					}
					want = func(h string, _ int) bool { return h == host }
				}
				fleetRoots, done, errs = mirror.FleetRoots(g.resolveStateDir(p), want)
				defer done()
				for _, err := range errs {
					fmt.Fprintf(g.stderr, "recall: %v\n", err)
				}
			}
			var roots []recall.Root
			if !fleet || len(p.Stores) > 0 && host == "" {
				if roots, err = recallRoots(p, dir, store, all); err != nil {
					return err
				}
			}
			if !fleet && len(roots) == 1 && roots[0].Name == "" && dir == "" && explicit && p != nil && !ownsCwd(p) {
				// The policy was given, and here is none of its roots: the
				// user means its roots.
				reach, refused, err := reachableRoots(p)
				if err != nil {
					roots[0].Root.Close()
					return err
				}
				if len(reach) > 0 {
					roots[0].Root.Close()
					roots = reach
					fmt.Fprintf(g.stderr, "recall: %s is no root of the policy; searching its %d root(s) you can read%s (--dir . searches only here)\n",
						mustCwd(), len(reach), map[bool]string{true: fmt.Sprintf(", not %d you cannot", refused), false: ""}[refused > 0])
				} else if refused > 0 {
					roots[0].Root.Close()
					return fmt.Errorf("recall: %s is no root of the policy, and uid %d can read none of its %d root(s): run as their owner (or root), or pass --dir", mustCwd(), os.Getuid(), refused)
				}
			}
			defer func() {
				for _, r := range roots {
					r.Root.Close()
				}
			}()
			opts.Roots = roots
			// Roots of the policy: each result names its root and cites its
			// file by its whole path, for memwatch show to take as printed.
			opts.NameRoots = len(roots) > 0 && roots[0].Name != ""
			stateDir := g.resolveStateDir(p)
			opts.Index = recall.ReadableIndex(stateDir)
			if sp, err := spool.OpenReadOnly(context.Background(), stateDir); err == nil {
				defer sp.Close()
				opts.Generation = func(root *confine.Root, rel string) int64 { return sp.LiveGen(cmd.Context(), root.ID(), rel) }
				opts.Held = sp.SearchHeld
			}
			if fleet {
				opts.Roots = append(opts.Roots, fleetRoots...)
				opts.NameRoots = true
				if len(opts.Roots) == 0 {
					fmt.Fprintf(g.stderr, "recall: no host's memory in %s yet: is memwatch run with this policy following the fleet? (memwatch status lists the hosts)\n", filepath.Join(stateDir, mirror.HostsDir))
				}
			}
			results, st, err := recall.Search(cmd.Context(), q, opts)
			if err != nil {
				return err
			}
			sayUnread(g, st)
			if explain {
				how := "the scan (no index in " + filepath.Join(stateDir, recall.IndexDir) + ")"
				if opts.Index != "" {
					how = fmt.Sprintf("the index for %d of %d files (%d of %d blocks read), the scan for the rest", st.Indexed, st.Files, st.BlocksRead, st.Blocks)
				}
				fmt.Fprintf(g.stderr, "recall: answered by %s; %d bytes read in %v%s\n", how, st.BytesRead, st.Duration.Round(10_000),
					map[bool]string{true: "; stopped at the limit", false: ""}[st.StoppedEarly])
			}
			return printRecall(g, q, results, asJSON, explain)
		},
	}
	cmd.Flags().StringVar(&dir, "dir", "", "the directory to search (default: the current directory)")
	cmd.Flags().StringVar(&scope, "scope", "all", "all, or the sources to search, e.g. detail, messages, history (comma-separated)")
	cmd.Flags().IntVar(&limit, "limit", recall.DefaultLimit, "at most this many results")
	cmd.Flags().BoolVar(&all, "all", false, "search every root of every store of the policy (or of the store --dir belongs to)")
	cmd.Flags().StringVar(&store, "store", "", "search every root of this store of the policy")
	cmd.Flags().StringVar(&host, "host", "", "on a central node (fleet:), search this host alone")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON: source, file, line, content and citation of each result")
	cmd.Flags().BoolVar(&explain, "explain", false, "say on stderr how the search was answered and how long it took, and with each ranked result why it ranked there")
	cmd.Flags().StringVar(&sortBy, "sort", recall.SortRelevance, "relevance (a question: best first; a word or phrase: every line holding it) or newest (every word, newest first)")
	return cmd
}

// recallRoots resolves what to search: one directory, or roots of stores.
func recallRoots(p *policy.Policy, dir, store string, all bool) ([]recall.Root, error) {
	if (all || store != "") && p == nil {
		return nil, usageError{errors.New("--all and --store need the policy: give --policy (or set MEMWATCH_POLICY)")}
	}
	var abs string
	if dir != "" || !all && store == "" {
		if dir == "" {
			dir = "."
		}
		var err error
		if abs, err = filepath.Abs(dir); err != nil {
			return nil, err
		}
		fi, err := os.Stat(abs)
		if errors.Is(err, fs.ErrPermission) {
			return nil, fmt.Errorf("recall --dir %s: permission denied: uid %d (running this command) cannot reach it; run as its owner or as root", dir, os.Geteuid())
		}
		if err != nil {
			return nil, fmt.Errorf("recall --dir %s: %w", dir, err)
		}
		if !fi.IsDir() {
			return nil, fmt.Errorf("recall --dir %s: not a directory", dir)
		}
	}
	// The stores to search, and the one --dir belongs to.
	var stores []*policy.Store
	var own *policy.Store
	if p != nil {
		for _, s := range p.Stores {
			if _, ok := registry.SearchSources(s); !ok {
				continue
			}
			if store != "" && s.Name != store {
				continue
			}
			for _, r := range s.Roots() {
				if r == abs {
					own = s
				}
			}
			stores = append(stores, s)
		}
		if store != "" && len(stores) == 0 {
			return nil, usageError{fmt.Errorf("--store %s: no searchable store of that name in the policy", store)}
		}
	}
	if !all && store == "" {
		srcs := defaultSources
		if own != nil {
			srcs, _ = registry.SearchSources(own)
		}
		root, err := confine.Open(abs, confine.Options{})
		if err != nil {
			return nil, err
		}
		return []recall.Root{{Root: root, Sources: srcs}}, nil
	}
	if all && own != nil && store == "" {
		stores = []*policy.Store{own}
	}
	var roots []recall.Root
	for _, s := range stores {
		srcs, _ := registry.SearchSources(s)
		for _, r := range s.Roots() {
			root, err := confine.Open(r, confine.Options{Within: s.Within()})
			if err != nil {
				continue // refused roots are reported by the daemon
			}
			name := filepath.Base(r)
			if len(stores) > 1 {
				name = s.Name + "/" + name
			}
			roots = append(roots, recall.Root{Root: root, Sources: srcs, Name: name, Store: s.Name})
		}
	}
	return roots, nil
}

// ownsCwd reports whether the current directory is a root of a store.
func ownsCwd(p *policy.Policy) bool {
	cwd := mustCwd()
	for _, s := range p.Stores {
		for _, r := range s.Roots() {
			if r == cwd {
				return true
			}
		}
	}
	return false
}

func mustCwd() string {
	d, err := os.Getwd()
	if err != nil {
		return "."
	}
	return d
}

// reachableRoots opens every root of the policy's searchable stores that
// this process can read (the kernel decides), and counts the others.
func reachableRoots(p *policy.Policy) ([]recall.Root, int, error) {
	var out []recall.Root
	refused := 0
	var stores []*policy.Store
	for _, s := range p.Stores {
		if _, ok := registry.SearchSources(s); ok {
			stores = append(stores, s)
		}
	}
	for _, s := range stores {
		srcs, _ := registry.SearchSources(s)
		for _, r := range s.Roots() {
			if syscall.Access(r, 0x4|0x1) != nil { // R_OK|X_OK, as this user
				refused++
				continue
			}
			root, err := confine.Open(r, confine.Options{Within: s.Within()})
			if err != nil {
				refused++
				continue
			}
			name := filepath.Base(r)
			if len(stores) > 1 {
				name = s.Name + "/" + name
			}
			out = append(out, recall.Root{Root: root, Sources: srcs, Name: name, Store: s.Name})
		}
	}
	return out, refused, nil
}

// oneShot tunes the garbage collector for a command that answers and
// exits: a search's heap is small and short-lived (its peak RSS is the
// binary and the mapped index), so collecting at 4x the live heap instead
// of 2x saves a few milliseconds of a 15 ms answer and no memory that
// shows. GOGC in the environment still wins.
func oneShot() {
	if os.Getenv("GOGC") == "" {
		debug.SetGCPercent(400)
	}
}

// sayUnread says on stderr which files a search could not read.
func sayUnread(g *globals, st recall.Stats) {
	if st.Unread > 0 {
		fmt.Fprintf(g.stderr, "recall: %d file(s) left out, not readable by uid %d (%s)\n", st.Unread, os.Geteuid(), st.Why)
	}
}

// printRecall prints recall's results as the flags ask.
func printRecall(g *globals, q recall.Query, results []recall.Result, asJSON, explain bool) error {
	if asJSON {
		if results == nil {
			results = []recall.Result{}
		}
		return printJSON(g, results)
	}
	if explain {
		fmt.Fprint(g.stdout, recall.FormatExplained(q, results))
		return nil
	}
	fmt.Fprint(g.stdout, recall.Format(q, results))
	return nil
}

// recallViaDaemon asks the daemon to search (GET /v1/recall): --dir, or
// the current directory, when it is a root of the daemon's policy; else,
// unless --dir named it, every root of the caller's (--all, --store: the
// same). ok is false when no daemon answers, or --dir names a directory
// that is no root: then this process searches it itself.
func (g *globals) recallViaDaemon(ctx context.Context, p *policy.Policy, stateDir, query, dir, store, host string, all bool, o recall.Options) (control.RecallResponse, bool, error) {
	v := url.Values{"q": {query}, "limit": {strconv.Itoa(o.Limit)}, "sort": {o.Sort}}
	if host != "" {
		v.Set("host", host)
	}
	if len(o.Labels) > 0 {
		v.Set("scope", strings.Join(o.Labels, ","))
	}
	if o.Explain {
		v.Set("explain", "1")
	}
	ctl := newControl(socketPath(p, stateDir))
	var res control.RecallResponse
	ask := func(v url.Values) error { return ctl.do(ctx, "GET", "/v1/recall?"+v.Encode(), nil, &res) }
	if !all && store == "" {
		abs, err := filepath.Abs(cmp.Or(dir, "."))
		if err != nil {
			return res, false, err
		}
		one := url.Values{"root": {abs}}
		for k, vs := range v {
			one[k] = vs
		}
		err = ask(one)
		switch {
		case err == nil:
			return res, true, nil
		case errors.Is(err, errNoDaemon):
			return res, false, nil
		case !strings.Contains(err.Error(), "not a root of any store"):
			return res, false, err
		case dir != "":
			return res, false, nil // a directory of no store: searched here
		}
		fmt.Fprintf(g.stderr, "recall: %s is no root of the daemon's policy; searching every root of yours (--dir . searches only here)\n", abs)
	}
	if store != "" {
		v.Set("store", store)
	}
	err := ask(v)
	if errors.Is(err, errNoDaemon) {
		return res, false, nil
	}
	if res.Skipped > 0 {
		fmt.Fprintf(g.stderr, "recall: searched %d of your roots; %d more were left out (name one with --dir or a store with --store)\n", res.Roots, res.Skipped)
	}
	return res, err == nil, err
}
