package ui

import (
	"errors"
	"fmt"
	"html/template"
	"net/http"
	"net/url"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/memwatch/memwatch/access"
	"github.com/memwatch/memwatch/answer"
	"github.com/memwatch/memwatch/control"
	"github.com/memwatch/memwatch/fleet/mirror"
	"github.com/memwatch/memwatch/layout/registry"
	"github.com/memwatch/memwatch/policy"
	"github.com/memwatch/memwatch/recall"
	"github.com/memwatch/memwatch/scope"
	"github.com/memwatch/memwatch/spool"
	"github.com/memwatch/memwatch/state"
)

const (
	searchLimit    = 50
	maxSearchRoots = 500 // roots one search opens; beyond, pick a root
	showContext    = 5   // lines around a cited range
	archivePage    = 1000
)

type rootOption struct {
	Store, Path string
}

type resultView struct {
	recall.Result
	Store, Root string
	Link        string
	// Marked is the text with the query's words in <mark>; Date when it
	// was said; Before and After the turns around it.
	Marked        template.HTML
	Date          string
	Before, After []turnView
	CopyLinks     []string
}

// turnView is a turn around a result, as the page shows it.
type turnView struct {
	Line int64
	Role string
	Text template.HTML
}

type searchData struct {
	Q, Root, Scope string
	Roots          []rootOption
	Results        []resultView
	Err            string
	Searched       int // roots searched
	Skipped        int // roots beyond maxSearchRoots
	Took           time.Duration
}

// search runs recall over the roots the caller reaches (or one of them).
func (s *Server) search(r *http.Request) (view, error) {
	ctx := r.Context()
	q := r.URL.Query()
	d := searchData{Q: strings.TrimSpace(q.Get("q")), Root: q.Get("root"), Scope: q.Get("scope")}
	st, err := s.status(ctx)
	if err != nil {
		return view{}, err
	}
	rc := s.scope(ctx, st)
	type target struct {
		store *policy.Store
		path  string
	}
	var targets []target
	for _, store := range rc.pol.Stores {
		if _, ok := registry.SearchSources(store); !ok {
			continue
		}
		for _, root := range rc.roots[store.Name] {
			d.Roots = append(d.Roots, rootOption{Store: store.Name, Path: root})
			if d.Root == "" || d.Root == root {
				targets = append(targets, target{store, root})
			}
		}
	}
	// A central node (fleet:): every host's copy the caller reaches.
	fleet := d.Root == "" && rc.pol.Fleet != nil && rc.caller.ReachesFleet()
	if d.Root != "" && len(targets) == 0 {
		return view{}, httpError{http.StatusForbidden, fmt.Errorf("%s is not a searchable root %s reaches", d.Root, rc.caller.Name)}
	}
	if d.Q == "" {
		return view{Template: "search", Title: "search", Data: d}, nil
	}
	query, err := recall.ParseQuery(d.Q)
	if err != nil {
		d.Err = err.Error()
		return view{Template: "search", Title: "search", Data: d}, nil
	}
	if len(targets) > maxSearchRoots {
		d.Skipped = len(targets) - maxSearchRoots
		targets = targets[:maxSearchRoots]
	}
	opts := recall.Options{Limit: searchLimit}
	if d.Scope != "" && d.Scope != "all" {
		opts.Labels = []string{d.Scope}
	}
	names := map[string]rootOption{}
	for _, t := range targets {
		_, root, err := s.openRoot(ctx, t.path)
		if err != nil {
			continue // a refused root (the daemon reports it), or one that is not the caller's now
		}
		defer root.Close()
		srcs, _ := registry.SearchSources(t.store)
		name := t.store.Name + "/" + filepath.Base(t.path)
		// Labelled as the CLI labels it: the project a folder is named
		// after (billing, not home-alice-src-billing).
		opts.Roots = append(opts.Roots, recall.Root{Root: root, Sources: srcs, Name: name, Store: t.store.Name, Project: scope.Name(t.path)})
		names[t.path] = rootOption{Store: t.store.Name, Path: t.path}
	}
	if fleet {
		fr, done := answer.FleetRoots(s.cfg.StateDir, rc.caller, "")
		defer done()
		opts.Roots = append(opts.Roots, fr...)
		opts.NameRoots = true
	}
	d.Searched = len(opts.Roots)
	opts.Index = recall.ReadableIndex(s.cfg.StateDir)
	if sp := s.cfg.Spool; sp != nil {
		opts.Generation = sp.Gens(ctx).Of
		opts.Held = sp.SearchHeld
	}
	results, stats, err := recall.Search(ctx, query, opts)
	if err != nil {
		d.Err = err.Error()
	}
	// The turn before and after each hit, as the agent said them.
	recall.AddContext(ctx, opts, results, 1)
	d.Took = stats.Duration
	mark := control.MarkWords(d.Q)
	for i, res := range results {
		results[i].Text = visible(res.Text)
	}
	decorate := func(v *resultView) {
		v.Marked = marked(mark, v.Text)
		if !v.Time.IsZero() {
			v.Date = v.Time.UTC().Format("2006-01-02 15:04")
		}
		for _, t := range v.Result.Before {
			v.Before = append(v.Before, turnView{Line: t.Line, Role: t.Role, Text: marked(mark, visible(t.Text))})
		}
		for _, t := range v.Result.After {
			v.After = append(v.After, turnView{Line: t.Line, Role: t.Role, Text: marked(mark, visible(t.Text))})
		}
	}
	for _, res := range results {
		if res.Host != "" {
			v := resultView{Result: res, Root: res.Host + ":" + res.Root, Store: "host " + res.Host}
			v.Link = s.cfg.Prefix + "show?" + url.Values{"cite": {res.Citation}}.Encode()
			decorate(&v)
			d.Results = append(d.Results, v)
			continue
		}
		root := res.Root
		if root == "" && len(opts.Roots) == 1 {
			root = opts.Roots[0].Root.Path()
		}
		cite := strings.TrimPrefix(res.Citation, filepath.ToSlash(res.Root)+"/")
		v := resultView{Result: res, Root: root, Store: names[root].Store}
		v.Link = s.cfg.Prefix + "show?" + url.Values{"root": {root}, "cite": {cite}}.Encode()
		decorate(&v)
		d.Results = append(d.Results, v)
	}
	return view{Template: "search", Title: "search: " + d.Q, Data: d}, nil
}

// marked is text (already visible) HTML-escaped, with re's matches in
// <mark>.
func marked(re *regexp.Regexp, text string) template.HTML {
	if re == nil {
		return template.HTML(template.HTMLEscapeString(text))
	}
	var b strings.Builder
	last := 0
	for _, m := range re.FindAllStringIndex(text, -1) {
		b.WriteString(template.HTMLEscapeString(text[last:m[0]]))
		b.WriteString("<mark>" + template.HTMLEscapeString(text[m[0]:m[1]]) + "</mark>")
		last = m[1]
	}
	b.WriteString(template.HTMLEscapeString(text[last:]))
	return template.HTML(b.String())
}

type shownLine struct {
	N     int64
	Text  string
	Cited bool
	Note  string
}

type showData struct {
	Store, Root, Cite, Path string
	Host                    string // a host's file, on a central node
	From                    string // where the lines came from
	Lines                   []shownLine
}

// show prints the lines a citation names, with a few around them: from
// the live file, or from the spool once the agent has rewritten its log.
func (s *Server) show(r *http.Request) (view, error) {
	ctx := r.Context()
	q := r.URL.Query()
	d := showData{Root: q.Get("root"), Cite: q.Get("cite")}
	if d.Root == "" {
		if host, _, ok := mirror.SplitHostPath(mirror.CitedPath(d.Cite)); ok {
			return s.showHost(r, d, host)
		}
	}
	store, root, err := s.openRoot(ctx, d.Root)
	if err != nil {
		return view{}, err
	}
	defer root.Close()
	d.Store = store.Name
	c, err := spool.ParseCitation(d.Cite)
	if err != nil {
		return view{}, badRequest("%v", err)
	}
	// A citation leaves out a prefix of some paths (detail/x.md for
	// working-memory/detail/x.md): try the path as cited, then with each.
	paths := []string{c.Path}
	if srcs, ok := registry.SearchSources(store); ok {
		for _, src := range srcs {
			if src.Strip != "" {
				paths = append(paths, src.Strip+c.Path)
			}
		}
	}
	wide := c.Widen(showContext)
	for _, p := range paths {
		wide.Path = p
		if s.cfg.Spool != nil {
			lines, err := s.cfg.Spool.Show(ctx, root, wide)
			if err == nil && (len(lines) == 0 || lines[len(lines)-1].Line < c.From) {
				err = fmt.Errorf("%s: L%d is past the end: %w", c.Path, c.From, spool.ErrNoSuchLine)
			}
			if err == nil {
				d.Path, d.From = p, "the live file"
				for _, l := range lines {
					if l.Source == "missing" && l.Line > c.To {
						break
					}
					sl := shownLine{N: l.Line, Cited: l.Line >= c.From && l.Line <= c.To, Text: lineText(l.Data, isJSONL(p))}
					switch l.Source {
					case "spool":
						d.From = "the spool (the agent has rewritten the file since)"
					case "pruned":
						sl.Note = "pruned from the spool by retention"
					case "omitted":
						sl.Note = "not shown: the page holds at most 16 MiB of lines"
					case "missing":
						sl.Note = "no such line in that version of the file"
					}
					d.Lines = append(d.Lines, sl)
				}
				return view{Template: "show", Title: d.Cite, Data: d}, nil
			}
			if errors.Is(err, spool.ErrNoSuchLine) {
				return view{}, notFound("%v", err)
			}
			if !errors.Is(err, spool.ErrUnknownLog) {
				return view{}, err
			}
		}
		// A note (never captured into the spool): the live file.
		lines, ok, err := spool.ShowFile(ctx, root, wide)
		if !ok {
			continue
		}
		if err != nil {
			return view{}, notFound("%v", err)
		}
		if len(lines) == 0 || c.From > lines[len(lines)-1].Line {
			return view{}, notFound("%s: L%d is past the end of the file", c.Path, c.From)
		}
		d.Path, d.From = p, "the live file"
		for _, l := range lines {
			d.Lines = append(d.Lines, shownLine{N: l.Line, Cited: l.Line >= c.From && l.Line <= c.To, Text: lineText(l.Data, isJSONL(p))})
		}
		return view{Template: "show", Title: d.Cite, Data: d}, nil
	}
	return view{}, notFound("%s: no such file in %s", c.Path, d.Root)
}

type archiveData struct {
	Store, Root, Path string
	Records           []state.Record
	Lines             []shownLine
	Page, Pages       int
	Prev, Next        int
}

// archive shows an archive memwatch made (a path some journal record
// names), a page of lines at a time.
func (s *Server) archive(r *http.Request) (view, error) {
	ctx := r.Context()
	q := r.URL.Query()
	d := archiveData{Root: q.Get("root"), Path: q.Get("path")}
	store, root, err := s.openRoot(ctx, d.Root)
	if err != nil {
		return view{}, err
	}
	defer root.Close()
	d.Store = store.Name
	recs, err := s.cfg.DB.Journal(ctx, dirFilter(ctx, state.Filter{Root: root.Path(), Archive: d.Path, Limit: 10}, root))
	if err != nil {
		return view{}, err
	}
	if len(recs) == 0 {
		return view{}, notFound("%s is no archive memwatch made in %s", d.Path, d.Root)
	}
	d.Records = recs
	b, err := readArchive(root, d.Path)
	if err != nil {
		return view{}, notFound("%s: %v (retention may have removed it)", d.Path, err)
	}
	lines := splitLines(b)
	d.Pages = max(1, (len(lines)+archivePage-1)/archivePage)
	d.Page, _ = strconv.Atoi(q.Get("page"))
	d.Page = min(max(d.Page, 1), d.Pages)
	if d.Page > 1 {
		d.Prev = d.Page - 1
	}
	if d.Page < d.Pages {
		d.Next = d.Page + 1
	}
	from := (d.Page - 1) * archivePage
	for i, l := range lines[from:min(len(lines), from+archivePage)] {
		d.Lines = append(d.Lines, shownLine{N: int64(from + i + 1), Text: lineText(l, isJSONL(d.Path))})
	}
	return view{Template: "archive", Title: d.Path, Data: d}, nil
}

// showHost shows the lines a citation of a host's file names (HOST:/p#L5,
// as search cites them on a central node), from what the host replicated.
func (s *Server) showHost(r *http.Request, d showData, host string) (view, error) {
	ctx := r.Context()
	c := access.CallerOf(ctx)
	_, path, _ := mirror.SplitHostPath(mirror.CitedPath(d.Cite))
	if s.cfg.Policy().Fleet == nil || !c.ReachesHostRoot(host, mirror.HostOwner(ctx, s.cfg.StateDir, host, path)) {
		return view{}, httpError{http.StatusForbidden, fmt.Errorf("%s does not reach %s on host %s", c.Name, path, host)}
	}
	cite, err := spool.ParseCitation(d.Cite)
	if err != nil {
		return view{}, badRequest("%v", err)
	}
	wide := cite.Widen(showContext)
	wideCite := fmt.Sprintf("%s@%d#L%d-%d", cite.Path, cite.Gen, wide.From, wide.To)
	lines, _, _, err := mirror.Show(ctx, s.cfg.StateDir, wideCite)
	if err != nil {
		return view{}, notFound("%v", err)
	}
	d.Host, d.Root, d.Store, d.Path, d.From = host, host+":"+filepath.Dir(path), "host "+host, path, "what host "+host+" replicated"
	for _, l := range lines {
		if l.Source == "missing" && l.Line > cite.To {
			break
		}
		sl := shownLine{N: l.Line, Cited: l.Line >= cite.From && l.Line <= cite.To, Text: lineText(l.Data, isJSONL(path))}
		if l.Source == "missing" {
			sl.Note = "no such line in what the host replicated"
		}
		d.Lines = append(d.Lines, sl)
	}
	return view{Template: "show", Title: d.Cite, Data: d}, nil
}
