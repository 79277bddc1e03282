// Package answer answers recall and show for one caller over a policy's
// roots: the daemon's /v1/recall, /v1/show and MCP tools (reaching what
// the socket's peer reaches) and memwatchd with no daemon (reaching what
// the kernel lets its user read) ask it alike, so the answer is the same
// whoever asks.
package answer

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"

	"github.com/memwatch/memwatch/confine"
	"github.com/memwatch/memwatch/control"
	"github.com/memwatch/memwatch/layout/registry"
	"github.com/memwatch/memwatch/layout/sessiondetail"
	"github.com/memwatch/memwatch/policy"
	"github.com/memwatch/memwatch/recall"
	"github.com/memwatch/memwatch/scope"
)

// MaxRoots bounds the roots one recall opens; a caller with more names
// one (root=) or a store (store=).
const MaxRoots = 1000

// Recaller answers a recall request over a policy's roots. The daemon's
// /v1/recall and its MCP tools use one (reaching what the socket's peer
// reaches), and so does memwatch recall when no daemon answers (reaching
// what the kernel lets its user read): one answer, whoever asks.
type Recaller struct {
	Policy *policy.Policy
	// Roots are the roots found: the watcher's, or those the policy's
	// globs match now.
	Roots []scope.Candidate
	// Open opens a root of a store for the search.
	Open func(s *policy.Store, path string) (*confine.Root, error)
	// Reaches says whether the caller may search a root (checked again on
	// the directory opened).
	Reaches func(s *policy.Store, id confine.ID) bool
	// Plain lets a request's Dir be a directory that is no root: it is
	// searched with DefaultSources (the CLI on its user's own files; the
	// daemon refuses).
	Plain bool
	// Cache remembers what the scope read of the roots (may be nil).
	Cache *scope.Cache
	// Search fills in the options every search shares (the index, the
	// spool's generations and held lines); may be nil.
	Options func(*recall.Options)
	// MaxRoots bounds the roots one search opens (0: MaxRoots).
	MaxRoots int
}

// DefaultSources are searched in a directory no store claims: notes, the
// histories and every session log in it (messages.jsonl, Claude Code's
// <uuid>.jsonl, ...) or in its sessions/ (memory-history's workspace).
var DefaultSources = append(append([]recall.Source{}, sessiondetail.Sources...),
	recall.Source{Glob: "*.jsonl", Kind: recall.Log, Label: "messages"},
	recall.Source{Glob: "sessions/*.jsonl", Kind: recall.Log, Label: "messages"},
	recall.Source{Glob: "HISTORY*.md", Kind: recall.Text, Label: "history"},
	recall.Source{Glob: "MEMORY.md", Kind: recall.Text, Label: "memory"},
	recall.Source{Glob: "memory.md", Kind: recall.Text, Label: "memory"},
)

// Labels are the sources a scope may name: every searchable layout's.
func Labels(p *policy.Policy) []string {
	seen := map[string]bool{}
	add := func(srcs []recall.Source) {
		for _, s := range srcs {
			seen[s.Label] = true
		}
	}
	add(DefaultSources)
	for _, l := range registry.All() {
		if sl, ok := l.(interface {
			Sources(*policy.Store) []recall.Source
		}); ok {
			add(sl.Sources(&policy.Store{Layout: l.Name()}))
		}
	}
	if p != nil {
		for _, s := range p.Stores {
			if srcs, ok := registry.SearchSources(s); ok {
				add(srcs)
			}
		}
	}
	var out []string
	for k := range seen {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// Answer searches what req asks and gives the results with what was
// searched. A mistake of the request is a control.UsageError.
func (x *Recaller) Answer(ctx context.Context, req control.RecallRequest) (control.RecallResponse, error) {
	roots, res, done, err := x.Resolve(ctx, req)
	defer done()
	if err != nil {
		return res, err
	}
	return x.Search(ctx, req, roots, res)
}

// Search runs req over roots (Resolve's, with any others added).
func (x *Recaller) Search(ctx context.Context, req control.RecallRequest, roots []recall.Root, res control.RecallResponse) (control.RecallResponse, error) {
	q, err := recall.ParseQuery(req.Query)
	if err != nil {
		return res, control.Usagef("%v", err)
	}
	// At most MaxResults deep, whoever asks: a search's cost grows with it.
	limit := max(min(req.Limit, control.MaxResults-req.Offset), 1)
	opts := recall.Options{Roots: roots, Labels: req.Scope, Limit: req.Offset + limit, Sort: req.Sort, Explain: req.Explain, More: countMore}
	opts.NameRoots = len(roots) > 1 || req.All || req.Store != "" || req.Dir == "" && res.Searched != "" && !strings.HasPrefix(res.Searched, "the root ")
	if x.Options != nil {
		x.Options(&opts)
	}
	res.Roots = len(roots)
	results, st, err := recall.Search(ctx, q, opts)
	if err != nil {
		return res, err
	}
	// A page: the results after Offset (a full page says more may follow).
	if len(results) >= req.Offset+limit && req.Offset+limit < control.MaxResults {
		res.Next = req.Offset + limit
	}
	results = results[min(req.Offset, len(results)):]
	recall.AddContext(ctx, opts, results, req.Context)
	if results == nil {
		results = []recall.Result{}
	}
	res.Results, res.Stats = results, st
	return res, nil
}

// countMore is how many matching lines past the limit a search counts,
// so that what the limit left out is said, not cut silently.
const countMore = 1000

// Resolve opens the roots req covers that the caller reaches, and says
// what they are (res.Searched) when the request did not name them; done
// closes them.
func (x *Recaller) Resolve(ctx context.Context, req control.RecallRequest) (roots []recall.Root, res control.RecallResponse, done func(), err error) {
	done = func() {
		for _, r := range roots {
			r.Root.Close()
		}
	}
	if len(req.Scope) > 0 {
		known := Labels(x.Policy)
		for _, l := range req.Scope {
			if !slices.Contains(known, l) {
				return nil, res, done, control.Usagef("unknown scope %q: give all, or one or more of %s", l, strings.Join(known, ", "))
			}
		}
	}
	if req.Store != "" {
		found := false
		for _, s := range x.Policy.Stores {
			_, ok := registry.SearchSources(s)
			found = found || ok && s.Name == req.Store
		}
		if !found {
			return nil, res, done, control.Usagef("no searchable store named %q in the policy (it has %s)", req.Store, strings.Join(storeNames(x.Policy), ", "))
		}
	}
	maxRoots := x.MaxRoots
	if maxRoots <= 0 {
		maxRoots = MaxRoots
	}
	var want []scope.Root
	under := ""
	open := func(c scope.Candidate) (*confine.Root, error) { return x.Open(c.Store, c.ID.Path) }
	switch {
	case req.Dir != "":
		// A root, a folder in one (only the files under it), or an agent
		// project's directory (at any depth): what the directory means
		// when recall runs in it, and the same with or without a daemon.
		dir := filepath.Clean(req.Dir)
		sc := scope.Of(x.Roots, dir, open, x.Cache)
		switch sc.Kind {
		case scope.InRoot:
			want = sc.Roots
			if rel, err := filepath.Rel(sc.Roots[0].ID.Path, dir); err == nil && rel != "." {
				under = rel
			}
		case scope.Project:
			want = sc.Roots
			res.Searched = sc.String()
		default:
			if !x.Plain {
				return nil, res, done, control.Usagef("%s is in no root you reach and is no agent project's directory (memwatch status lists the roots)", req.Dir)
			}
			root, err := confine.Open(req.Dir, confine.Options{})
			if err != nil {
				return nil, res, done, recallDirError(req.Dir, err)
			}
			return []recall.Root{{Root: root, Sources: DefaultSources}}, res, done, nil
		}
	case req.All || req.Store != "":
		for _, c := range x.Roots {
			if req.Store == "" || c.Store.Name == req.Store {
				want = append(want, scope.Root{Candidate: c})
			}
		}
	default:
		cwd := req.Cwd
		if cwd == "" {
			cwd = "/"
		}
		sc := scope.Of(x.Roots, filepath.Clean(cwd), open, x.Cache)
		want = sc.Roots
		res.Searched = sc.String()
		if sc.Kind == scope.All {
			res.Searched = fmt.Sprintf("every root you can read (%s is in no root and is no agent project's directory)", sc.Dir)
		}
	}
	if len(want) > maxRoots {
		want = slices.Clone(want) // the scope's may be its cache's
		newestFirst(want)
	}
	refused := 0
	for _, w := range want {
		srcs, ok := registry.SearchSources(w.Store)
		if !ok {
			continue
		}
		if x.Reaches != nil && !x.Reaches(w.Store, w.ID) {
			refused++
			continue
		}
		if len(roots) >= maxRoots {
			res.Skipped++
			continue
		}
		root, err := x.Open(w.Store, w.ID.Path)
		if err != nil {
			refused++
			continue
		}
		if x.Reaches != nil && !x.Reaches(w.Store, root.ID()) {
			root.Close() // not the directory discovery found: not the caller's
			refused++
			continue
		}
		path := w.ID.Path
		r := recall.Root{Root: root, Sources: srcs, Name: recall.ProjectName(path), Store: w.Store.Name, ProjectFunc: func() string { return x.Cache.Name(path) }, Under: under}
		if w.Files != nil {
			r.Listed = listed(w.Files, srcs)
		}
		if w.Records != nil {
			r.Records = map[string]bool{}
			for _, rel := range w.Records {
				r.Records[rel] = true
			}
			for _, rel := range w.Files {
				r.Records[rel] = true // a project's log gone from the root
			}
		}
		roots = append(roots, r)
	}
	if len(roots) == 0 && len(want) > 0 && refused > 0 {
		return nil, res, done, fmt.Errorf("none of the %d root(s) of %s can be read by you", refused, strings.TrimPrefix(res.Searched, "the "))
	}
	return roots, res, done, nil
}

// listed are a project's files of a shared root, each with the source
// that searches it.
func listed(files []string, srcs []recall.Source) []recall.Listed {
	out := []recall.Listed{} // none: no file of the root is searched
	for _, f := range files {
		for i, s := range srcs {
			if s.Kind != recall.Records && confine.Match(s.Glob, s.Exclude, f) {
				out = append(out, recall.Listed{Rel: f, Source: i})
				break
			}
		}
	}
	return out
}

// recallDirError says why a directory cannot be searched.
func recallDirError(dir string, err error) error {
	switch {
	case errors.Is(err, fs.ErrPermission), errors.Is(err, confine.ErrDenied):
		return fmt.Errorf("recall --dir %s: uid %d (running this command) cannot reach it; run as its owner or as root", dir, os.Geteuid())
	case errors.Is(err, fs.ErrNotExist):
		return control.Usagef("recall --dir %s: no such directory", dir)
	}
	return fmt.Errorf("recall --dir %s: %w", dir, err)
}

func storeNames(p *policy.Policy) []string {
	var out []string
	for _, s := range p.Stores {
		if _, ok := registry.SearchSources(s); ok {
			out = append(out, s.Name)
		}
	}
	if len(out) == 0 {
		out = []string{"none"}
	}
	return out
}

// newestFirst orders roots by their directories' change times, newest
// first, for a search that opens only MaxRoots of them: the roots came in
// the discovery's order (by path), and the cut kept the oldest of 10,000
// session directories and left out every session begun since. A
// directory's time moves as files are made in it (a session's as it
// starts). The time orders the roots and nothing else: each is opened,
// and checked, as before. The path is not followed (a root that is a
// link is refused by the open anyway); one it cannot stat goes last.
func newestFirst(want []scope.Root) {
	at := make(map[string]int64, len(want))
	for _, w := range want {
		if fi, err := os.Lstat(w.ID.Path); err == nil {
			at[w.ID.Path] = fi.ModTime().UnixNano()
		}
	}
	sort.SliceStable(want, func(i, j int) bool { return at[want[i].ID.Path] > at[want[j].ID.Path] })
}
