package ui

import (
	"context"
	"errors"
	"fmt"
	"html/template"
	"net/http"
	"net/url"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/dustin/go-humanize"

	"github.com/memwatch/memwatch/access"
	"github.com/memwatch/memwatch/answer"
	"github.com/memwatch/memwatch/compact"
	"github.com/memwatch/memwatch/confine"
	"github.com/memwatch/memwatch/control"
	"github.com/memwatch/memwatch/policy"
	"github.com/memwatch/memwatch/rewrite"
	"github.com/memwatch/memwatch/rotate"
	"github.com/memwatch/memwatch/state"
	"github.com/memwatch/memwatch/undo"
	"github.com/memwatch/memwatch/versions"
)

const (
	rootsPerStore  = 25  // roots the overview lists per store, most recently changed first
	rootsPerPage   = 100 // roots a store's page lists at a time
	recordsPerPage = 50
	plotDays       = 30
	// maxOfflineCount bounds the roots whose archives a page counts when
	// no daemon runs (it opens each root): beyond, memwatch prune
	// --dry-run or the running daemon's status says.
	maxOfflineCount = 200
)

// status asks the running daemon for its status, as the caller; nil when
// no daemon runs.
func (s *Server) status(ctx context.Context) (*control.Status, error) {
	if s.cfg.API == nil {
		return nil, nil
	}
	var st control.Status
	err := s.cfg.API(ctx, http.MethodGet, "/v1/status", nil, &st)
	if errors.Is(err, ErrNoDaemon) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("ask the daemon for its status: %w", err)
	}
	return &st, nil
}

// reach is what a caller may see: the stores and, in each, the roots.
type reach struct {
	caller *access.Caller
	pol    *policy.Policy
	roots  map[string][]string // store -> roots the caller reaches
}

// scope lists what the caller reaches: the roots the daemon watches when
// it runs (st), else the roots the policy's globs match now.
func (s *Server) scope(ctx context.Context, st *control.Status) reach {
	c := access.CallerOf(ctx)
	rc := reach{caller: c, pol: s.cfg.Policy(), roots: map[string][]string{}}
	if st != nil {
		for _, ss := range st.Stores {
			rc.roots[ss.Name] = ss.Roots
		}
		return rc
	}
	for _, store := range rc.pol.Stores {
		if !c.ReachesStore(store) {
			continue
		}
		for _, id := range store.RootIDs() {
			if c.Reaches(store, id) {
				rc.roots[store.Name] = append(rc.roots[store.Name], id.Path)
			}
		}
	}
	return rc
}

// openRoot opens a root the caller reaches, with its store, or says why
// not. The root is opened as every job opens it (policy.Store.OpenRoot: from its
// glob's fixed part, no symbolic link followed, as its owner) and the
// decision is made on the directory opened: whatever a page shows of the
// root, it reads through it. The caller closes the root.
func (s *Server) openRoot(ctx context.Context, path string) (*policy.Store, *confine.Root, error) {
	if path == "" {
		return nil, nil, badRequest("no root given")
	}
	path = filepath.Clean(path)
	c := access.CallerOf(ctx)
	for _, st := range s.cfg.Policy().Stores {
		if !st.MatchesRoot(path) {
			continue
		}
		root, err := st.OpenRoot(path)
		if err != nil {
			return nil, nil, httpError{http.StatusForbidden, fmt.Errorf("%s (store %s) is not served: %w", path, st.Name, err)}
		}
		if !c.Reaches(st, root.ID()) {
			root.Close()
			return nil, nil, httpError{http.StatusForbidden, fmt.Errorf("%s may not see %s (store %s)", c.Name, path, st.Name)}
		}
		return st, root, nil
	}
	return nil, nil, notFound("%s is not a root of any store of the policy", path)
}

// recordRoot is openRoot for the root of a journal record: for anyone but
// the administrator, only if the record was made in the very directory
// opened (a record of a directory that had the path before is not theirs).
func (s *Server) recordRoot(ctx context.Context, rec state.Record) (*policy.Store, *confine.Root, error) {
	st, root, err := s.openRoot(ctx, rec.Root)
	if err != nil {
		return nil, nil, err
	}
	id := root.ID()
	if rec.RootIno != 0 && (uint64(rec.RootDev) != id.Dev || uint64(rec.RootIno) != id.Ino) && !access.CallerOf(ctx).IsAdmin() {
		root.Close()
		return nil, nil, httpError{http.StatusForbidden, fmt.Errorf("journal record %d was made in another directory that had the path %s", rec.ID, rec.Root)}
	}
	return st, root, nil
}

// dirFilter keeps a journal query to the directory opened, for anyone but
// the administrator (see state.Filter.Dir).
func dirFilter(ctx context.Context, f state.Filter, root *confine.Root) state.Filter {
	if !access.CallerOf(ctx).IsAdmin() {
		id := root.ID()
		f.Dir = &id
	}
	return f
}

// overviewData is the overview page.
type overviewData struct {
	Daemon    bool
	Status    *control.Status
	Admin     bool
	Stores    []storeRow
	LLM       []llmRow
	Disk      control.Disk
	StateDir  string
	DiskPlot  template.HTML
	TokenPlot template.HTML
}

type storeRow struct {
	Name, Layout, Compactor string
	AllowUndo               bool
	Archives                int
	ArchiveBytes            int64
	ArchivesUnknown         bool // no daemon, and too many roots to count them for a page
	Kept                    int
	NextRun                 *time.Time
	Roots                   []rootRow
	Total                   int // roots the caller reaches
}

type rootRow struct {
	Path  string
	Last  *state.Record
	State string
}

type llmRow struct {
	Endpoint      string
	Today, Month  int64
	Budget        int64
	TodayShareBar int // percent of the daily budget used today
}

func (s *Server) overview(r *http.Request) (view, error) {
	ctx := r.Context()
	st, err := s.status(ctx)
	if err != nil {
		return view{}, err
	}
	rc := s.scope(ctx, st)
	d := overviewData{Daemon: st != nil, Status: st, Admin: rc.caller.IsAdmin()}
	if d.Admin {
		d.StateDir = s.cfg.StateDir
		if st != nil {
			d.Disk = st.Disk // the daemon's, measured as the index changes
		} else {
			d.Disk = answer.StateDisk(s.cfg.StateDir)
		}
	}
	byName := storesOf(st)
	for _, store := range rc.pol.Stores {
		roots, ok := rc.roots[store.Name]
		if !ok && !rc.caller.IsAdmin() {
			continue
		}
		row, err := s.storeRow(ctx, store, roots, byName, st, 0, rootsPerStore)
		if err != nil {
			return view{}, err
		}
		d.Stores = append(d.Stores, row)
	}
	d.LLM, err = s.llmRows(ctx, st, rc)
	if err != nil {
		return view{}, err
	}
	// Today's bar is what the page counts now: the daemon records the
	// day's reading hourly.
	now := d.Disk.Journal + d.Disk.Spool + d.Disk.Index + d.Disk.Versions
	for _, row := range d.Stores {
		now += row.ArchiveBytes
	}
	d.DiskPlot, d.TokenPlot, err = s.plots(ctx, rc, d.LLM, now)
	if err != nil {
		return view{}, err
	}
	return view{Template: "overview", Title: "memwatch", Data: d}, nil
}

// storesOf is the daemon's status of each store, by name (none without
// a daemon).
func storesOf(st *control.Status) map[string]control.StoreStatus {
	out := map[string]control.StoreStatus{}
	if st != nil {
		for _, ss := range st.Stores {
			out[ss.Name] = ss
		}
	}
	return out
}

// storeRow is one store with roots [from, from+n) of those the caller
// reaches, most recently changed first.
func (s *Server) storeRow(ctx context.Context, store *policy.Store, roots []string, byName map[string]control.StoreStatus, st *control.Status, from, n int) (storeRow, error) {
	row := storeRow{Name: store.Name, Layout: store.Layout, Compactor: store.Compactor, AllowUndo: store.AllowUndo, Total: len(roots)}
	if ss, ok := byName[store.Name]; ok {
		row.Archives, row.ArchiveBytes, row.Kept, row.NextRun = ss.Archives, ss.ArchiveBytes, ss.Kept, ss.NextRun
	} else if st == nil && len(roots) <= maxOfflineCount {
		s.archivesOffline(ctx, store, roots, &row)
	} else if st == nil {
		row.ArchivesUnknown = true
	}
	latest, err := s.cfg.DB.Latest(ctx, store.Name)
	if err != nil {
		return row, err
	}
	last := map[string]*state.Record{}
	for i := range latest {
		last[latest[i].Root] = &latest[i]
	}
	sorted := append([]string(nil), roots...)
	sort.SliceStable(sorted, func(i, j int) bool {
		a, b := last[sorted[i]], last[sorted[j]]
		switch {
		case a != nil && b != nil:
			return a.ID > b.ID
		case a != nil || b != nil:
			return a != nil
		}
		return sorted[i] < sorted[j]
	})
	for _, root := range sorted[min(from, len(sorted)):min(from+n, len(sorted))] {
		row.Roots = append(row.Roots, rootRow{Path: root, Last: last[root], State: rootState(root, last[root], st)})
	}
	return row, nil
}

// archivesOffline counts a store's archives and kept copies from the
// journal and the disk, when no daemon answers.
func (s *Server) archivesOffline(ctx context.Context, store *policy.Store, roots []string, row *storeRow) {
	for _, path := range roots {
		root, err := store.OpenRoot(path)
		if err != nil {
			continue
		}
		if as, err := rotate.Archives(ctx, s.cfg.DB, root); err == nil {
			n, b, _ := rotate.Held(as)
			row.Archives += n
			row.ArchiveBytes += b
		}
		root.Close()
	}
	kept, err := s.cfg.DB.Journal(ctx, state.Filter{Store: store.Name, Rule: rewrite.RuleKept, Limit: maxKeptListed})
	if err == nil {
		row.Kept = len(kept)
	}
}

// maxKeptListed bounds the kept copies a store's row counts.
const maxKeptListed = 10_000

// rootState says what memwatch is doing with a root: running or queued
// (the daemon's queue), else what its last record says (deferred because
// an agent holds the file, over the LLM budget, cooling down), else idle.
func rootState(root string, last *state.Record, st *control.Status) string {
	if st == nil {
		return "daemon not running"
	}
	for _, j := range st.Jobs.Running {
		if j.Root == root {
			return "running " + j.Rule
		}
	}
	for _, j := range st.Jobs.Queued {
		if j.Root == root {
			return "queued " + j.Rule
		}
	}
	if last != nil && last.Outcome == state.Skipped {
		switch why := strings.ToLower(last.Reason); {
		case strings.HasPrefix(why, "deferred"):
			return last.Reason
		case strings.Contains(why, "budget"):
			return "over budget"
		case strings.Contains(why, "cooldown"):
			return "cooldown"
		}
	}
	return "idle"
}

// llmRows is each endpoint's token use today and this month against its
// daily budget: the endpoints of the stores the caller reaches.
func (s *Server) llmRows(ctx context.Context, st *control.Status, rc reach) ([]llmRow, error) {
	now := s.cfg.Now()
	month := now.Format("2006-01") + "-01"
	days, err := s.cfg.DB.TokenDays(ctx, month)
	if err != nil {
		return nil, err
	}
	want := map[string]int64{} // endpoint -> daily budget
	for _, store := range rc.pol.Stores {
		if _, ok := rc.roots[store.Name]; (ok || rc.caller.IsAdmin()) && store.Compactor == "llm" {
			if ep := rc.pol.LLM[store.LLM]; ep != nil {
				want[store.LLM] = ep.DailyTokenBudget
			}
		}
	}
	if st != nil {
		for _, l := range st.LLM {
			want[l.Endpoint] = l.Budget
		}
	}
	today := compact.Day(now)
	var out []llmRow
	for ep, budget := range want {
		row := llmRow{Endpoint: ep, Budget: budget}
		for _, d := range days {
			if d.Endpoint != ep {
				continue
			}
			row.Month += d.Used
			if d.Day == today {
				row.Today = d.Used
			}
		}
		if budget > 0 {
			row.TodayShareBar = int(min(100, 100*row.Today/budget))
		}
		out = append(out, row)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Endpoint < out[j].Endpoint })
	return out, nil
}

// plots draws the disk memwatch held and the LLM tokens used per day over
// the last plotDays days, within the caller's reach; heldNow is today's.
func (s *Server) plots(ctx context.Context, rc reach, llm []llmRow, heldNow int64) (disk, tokens template.HTML, err error) {
	now := s.cfg.Now()
	days := lastDays(now, plotDays)
	at := map[string]int{}
	for i, d := range days {
		at[d] = i
	}
	samples, err := s.cfg.DB.DiskDays(ctx, days[0])
	if err != nil {
		return "", "", err
	}
	held := make([]float64, len(days))
	for _, smp := range samples {
		i, ok := at[smp.Day]
		if !ok {
			continue
		}
		if _, reached := rc.roots[smp.Store]; smp.Store == "" && rc.caller.IsAdmin() || smp.Store != "" && (reached || rc.caller.IsAdmin()) {
			held[i] += float64(smp.Bytes)
		}
	}
	held[len(held)-1] = float64(heldNow)
	bytesLabel := func(v float64) string { return humanize.IBytes(uint64(v)) }
	disk = barChart("Disk held (archives, journal, spool, index, versions)", days, held, bytesLabel)
	eps := map[string]bool{}
	for _, l := range llm {
		eps[l.Endpoint] = true
	}
	used, err := s.cfg.DB.TokenDays(ctx, days[0])
	if err != nil {
		return "", "", err
	}
	perDay := make([]float64, len(days))
	for _, u := range used {
		if i, ok := at[u.Day]; ok && eps[u.Endpoint] {
			perDay[i] += float64(u.Used)
		}
	}
	tokens = barChart("LLM tokens per day", days, perDay, func(v float64) string { return humanize.Comma(int64(v)) + " tokens" })
	return disk, tokens, nil
}

// storePageData lists a store's roots, a page at a time.
type storePageData struct {
	Store      storeRow
	Page, Next int
}

func (s *Server) storePage(r *http.Request) (view, error) {
	ctx := r.Context()
	st, err := s.status(ctx)
	if err != nil {
		return view{}, err
	}
	rc := s.scope(ctx, st)
	name := r.URL.Query().Get("name")
	store := rc.pol.StoreByName(name)
	if store == nil {
		return view{}, notFound("no store named %q", name)
	}
	roots, ok := rc.roots[name]
	if !ok && !rc.caller.IsAdmin() {
		return view{}, httpError{http.StatusForbidden, fmt.Errorf("%s reaches no root of store %s", rc.caller.Name, name)}
	}
	page, _ := strconv.Atoi(r.URL.Query().Get("page"))
	page = min(max(page, 1), max(1, (len(roots)+rootsPerPage-1)/rootsPerPage))
	row, err := s.storeRow(ctx, store, roots, storesOf(st), st, (page-1)*rootsPerPage, rootsPerPage)
	if err != nil {
		return view{}, err
	}
	d := storePageData{Store: row, Page: page}
	if page*rootsPerPage < len(roots) {
		d.Next = page + 1
	}
	return view{Template: "store", Title: "store " + name, Data: d}, nil
}

// entry is one line of a root's timeline: memwatch's record, or a version
// an agent wrote.
type entry struct {
	Time    time.Time
	Record  *state.Record
	Version *versions.Version
}

type timelineData struct {
	Store   *policy.Store
	Root    string
	Entries []entry
	Rules   []string
	Rule    string
	Outcome string
	Who     string // all, memwatch, agent
	Q       string
	Before  int64
	Next    int64 // the next page's BeforeID, 0 when none
	Daemon  bool
}

func (s *Server) timeline(r *http.Request) (view, error) {
	ctx := r.Context()
	q := r.URL.Query()
	store, opened, err := s.openRoot(ctx, q.Get("root"))
	if err != nil {
		return view{}, err
	}
	defer opened.Close()
	root := opened.Path()
	d := timelineData{Store: store, Root: root, Rule: q.Get("rule"), Outcome: q.Get("outcome"), Who: q.Get("who"), Q: strings.TrimSpace(q.Get("q"))}
	if d.Who == "" {
		d.Who = "all"
	}
	d.Before, _ = strconv.ParseInt(q.Get("before"), 10, 64)
	_, d.Rules, _ = s.cfg.DB.JournalNames(ctx)
	var recs []state.Record
	if d.Who != "agent" {
		// A page of records that pass the filters: the text filter is
		// applied here, over at most ten pages of the journal.
		f := dirFilter(ctx, state.Filter{Root: root, Rule: d.Rule, Outcome: d.Outcome, BeforeID: d.Before, Limit: recordsPerPage + 1}, opened)
		if d.Q != "" {
			f.Limit = 10 * recordsPerPage
		}
		all, err := s.cfg.DB.Journal(ctx, f)
		if err != nil {
			return view{}, err
		}
		for _, rec := range all {
			if d.Q == "" || strings.Contains(strings.ToLower(rec.Target+" "+rec.Reason+" "+rec.Rule), strings.ToLower(d.Q)) {
				recs = append(recs, rec)
			}
		}
		if len(recs) > recordsPerPage {
			recs = recs[:recordsPerPage]
			d.Next = recs[len(recs)-1].ID
		}
	}
	for i := range recs {
		d.Entries = append(d.Entries, entry{Time: recs[i].Time, Record: &recs[i]})
	}
	// The versions agents wrote, on the first page: since the oldest
	// record shown when there are more.
	if d.Who != "memwatch" && d.Before == 0 && s.cfg.Versions != nil {
		var since time.Time
		if d.Next != 0 && len(recs) > 0 {
			since = recs[len(recs)-1].Time
		}
		vs, err := s.agentVersions(ctx, opened.ID(), since, d.Q)
		if err != nil {
			return view{}, err
		}
		for i := range vs {
			d.Entries = append(d.Entries, entry{Time: vs[i].Time, Version: &vs[i]})
		}
	}
	sort.SliceStable(d.Entries, func(i, j int) bool { return d.Entries[i].Time.After(d.Entries[j].Time) })
	return view{Template: "timeline", Title: filepath.Base(root) + " — timeline", Data: d}, nil
}

// agentVersions lists the versions agents wrote in root since a time,
// newest first, at most a page of them.
func (s *Server) agentVersions(ctx context.Context, root confine.ID, since time.Time, q string) ([]versions.Version, error) {
	files, err := s.cfg.Versions.Files(ctx, root)
	if err != nil {
		return nil, err
	}
	var out []versions.Version
	for _, f := range files[:min(len(files), 500)] {
		if q != "" && !strings.Contains(strings.ToLower(f), strings.ToLower(q)) {
			continue
		}
		vs, err := s.cfg.Versions.List(ctx, root, f)
		if err != nil {
			return nil, err
		}
		for _, v := range vs {
			if v.Writer == versions.ByAgent && !v.Time.Before(since) {
				out = append(out, v)
			}
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Time.After(out[j].Time) })
	return out[:min(len(out), recordsPerPage)], nil
}

// recordData is one journal record with what it changed.
type recordData struct {
	Rec      state.Record
	Store    *policy.Store
	How      string // "LLM (N tokens)", "heuristic", ...
	Diff     *diffView
	NoDiff   string // why there is no diff
	Before   string // where the before side came from
	After    string
	Page     int
	Undo     string // the outcome of an undo just made
	UndoErr  string
	CanUndo  bool
	WhyNot   string // why there is no undo button
	Archived bool   // the archive is still on disk
	UndoneBy int64  // the undo that undid it
	Held     bool   // that undo still holds the rule off the file: Redo
	Redone   bool   // a redo just made
}

func (s *Server) record(r *http.Request) (view, error) {
	ctx := r.Context()
	id, err := strconv.ParseInt(r.PathValue("id"), 10, 64)
	if err != nil {
		return view{}, badRequest("bad record id %q", r.PathValue("id"))
	}
	rec, err := s.cfg.DB.GetRecord(ctx, id)
	if err != nil {
		return view{}, notFound("no journal record %d", id)
	}
	store, root, err := s.recordRoot(ctx, rec)
	if err != nil {
		return view{}, err
	}
	defer root.Close()
	q := r.URL.Query()
	d := recordData{Rec: rec, Store: store, Undo: q.Get("undone"), UndoErr: q.Get("undo_error"), Redone: q.Get("redone") != ""}
	d.Page, _ = strconv.Atoi(q.Get("page"))
	switch {
	case rec.Tokens > 0:
		d.How = fmt.Sprintf("LLM (%s tokens)", humanize.Comma(rec.Tokens))
	case strings.Contains(strings.ToLower(rec.Reason), "fallback"):
		d.How = "heuristic (fallback)"
	default:
		d.How = "heuristic, no LLM"
	}
	var before, after []byte
	var haveBefore, haveAfter bool
	if rec.Archive != "" && root != nil {
		if b, err := readArchive(root, rec.Archive); err == nil {
			before, haveBefore, d.Before, d.Archived = b, true, "its archive "+rec.Archive, true
		}
	}
	if !haveBefore && rec.BeforeSHA != "" && s.cfg.Versions != nil {
		if b, err := s.cfg.Versions.Content(ctx, rec.BeforeSHA); err == nil {
			before, haveBefore, d.Before = b, true, "the version memwatch kept"
		}
	}
	if !haveBefore && rec.BeforeSize == 0 && rec.BeforeSHA == "" {
		haveBefore, d.Before = true, "nothing (the file was new)"
	}
	if rec.AfterSHA != "" && s.cfg.Versions != nil {
		if b, err := s.cfg.Versions.Content(ctx, rec.AfterSHA); err == nil {
			after, haveAfter, d.After = b, true, "the version memwatch kept"
		}
	}
	if !haveAfter && rec.AfterSHA != "" {
		if b, ok, err := s.cfg.DB.Written(ctx, rec.ID); err == nil && ok && versions.Hash(b) == rec.AfterSHA {
			after, haveAfter, d.After = b, true, "what memwatch wrote, kept with this record"
		}
	}
	if !haveAfter && rec.AfterSHA != "" && root != nil {
		if b, err := root.ReadFile(rec.Target); err == nil && versions.Hash(b) == rec.AfterSHA {
			after, haveAfter, d.After = b, true, "the file as it is now"
		}
	}
	switch {
	case rec.Outcome != state.Done && rec.Outcome != state.Pending:
		d.NoDiff = "nothing was changed (" + rec.Outcome + ")"
	case len(rec.Data) > 0 && rec.Archive == "" && rec.AfterSHA == "":
		d.NoDiff = "a change to database rows: the rows are in the journal record (memwatch records list shows them)"
	case !haveBefore:
		d.NoDiff = "the content before the change is no longer kept (its archive was pruned by retention)"
	case !haveAfter:
		d.NoDiff = "the content the change wrote is not kept (an insertion into a large file whose versions are off or pruned, and the file changed since)"
	default:
		v := unified(before, after, isJSONL(rec.Target), d.Page)
		d.Diff = &v
	}
	d.CanUndo, d.WhyNot = undoable(rec, store)
	// The loop closed: an undone change says by what, and offers redo
	// while the undo holds its rule off the file.
	if u, ok, err := s.cfg.DB.ByKey(ctx, rec.Root, rec.Target, rewrite.UndoKey(rec.ID)); err == nil && ok {
		d.UndoneBy, d.CanUndo, d.WhyNot = u.ID, false, fmt.Sprintf("it was undone by #%d", u.ID)
		if h, ok, err := s.cfg.DB.GetHold(ctx, rec.Root, rec.Target); err == nil && ok && h.Record == rec.ID {
			d.Held = true
		}
	}
	return view{Template: "record", Title: fmt.Sprintf("record %d — %s", rec.ID, rec.Target), Data: d}, nil
}

// undoable says whether a record can be undone from the page.
func undoable(rec state.Record, store *policy.Store) (bool, string) {
	switch {
	case rec.Outcome != state.Done:
		return false, "only a change that was made can be undone; this one is " + rec.Outcome
	case !store.AllowUndo:
		return false, "store " + store.Name + " does not allow undo (allow_undo: false in the policy)"
	case rec.Archive == "" && len(rec.Data) == 0:
		return false, "it archived nothing to restore"
	}
	return true, ""
}

// readArchive reads an archive inside its root, decompressed when
// retention compressed it since the record was written.
func readArchive(root interface{ ReadFile(string) ([]byte, error) }, rel string) ([]byte, error) {
	b, err := root.ReadFile(rel)
	if err != nil && !strings.HasSuffix(rel, ".gz") {
		b, err = root.ReadFile(rel + ".gz")
		rel += ".gz"
	}
	if err != nil {
		return nil, err
	}
	if strings.HasSuffix(rel, ".gz") {
		out, ok := rewrite.Unpack(b)
		if !ok {
			return nil, fmt.Errorf("%s is not a gzip file memwatch can read", rel)
		}
		return out, nil
	}
	return b, nil
}

// postedRecord checks a form posted from a record's page (its CSRF
// token and origin, the record, the caller's reach of its root) and
// returns the record; ok is false when it answered the request itself.
func (s *Server) postedRecord(w http.ResponseWriter, r *http.Request, what string) (state.Record, *policy.Store, bool) {
	ctx := r.Context()
	c := access.CallerOf(ctx)
	if !sameOrigin(r) || r.PostFormValue("csrf") != s.csrf(c) {
		s.fail(w, r, http.StatusForbidden, fmt.Errorf("the %s did not come from this page (its CSRF token or origin is wrong): reload the page and press the button again", what))
		return state.Record{}, nil, false
	}
	id, err := strconv.ParseInt(r.PathValue("id"), 10, 64)
	if err != nil {
		s.fail(w, r, http.StatusBadRequest, fmt.Errorf("bad record id %q", r.PathValue("id")))
		return state.Record{}, nil, false
	}
	rec, err := s.cfg.DB.GetRecord(ctx, id)
	if err != nil {
		s.fail(w, r, http.StatusNotFound, fmt.Errorf("no journal record %d", id))
		return state.Record{}, nil, false
	}
	store, root, err := s.recordRoot(ctx, rec)
	if err == nil {
		root.Close()
	}
	if err != nil {
		var he httpError
		code := http.StatusForbidden
		if errors.As(err, &he) {
			code = he.code
		}
		s.fail(w, r, code, err)
		return state.Record{}, nil, false
	}
	return rec, store, true
}

// redo ends the holds an undo of the record's action set (memwatch redo):
// through the daemon, which evaluates the root at once, or with none
// running in the journal itself.
func (s *Server) redo(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	rec, _, ok := s.postedRecord(w, r, "redo")
	if !ok {
		return
	}
	back := fmt.Sprintf("%srecord/%d", s.cfg.Prefix, rec.ID)
	var res control.RedoResult
	err := ErrNoDaemon
	if s.cfg.API != nil {
		err = s.cfg.API(ctx, http.MethodPost, fmt.Sprintf("/v1/redo/%d", rec.ID), nil, &res)
	}
	if errors.Is(err, ErrNoDaemon) {
		_, err = undo.Redo(ctx, s.cfg.DB, rec.ID)
	}
	if err != nil {
		s.log.Info("redo from the review page refused", "record", rec.ID, "caller", access.CallerOf(ctx).Name, "err", err)
		http.Redirect(w, r, back+"?undo_error="+url.QueryEscape(err.Error()), http.StatusSeeOther)
		return
	}
	s.log.Info("redo from the review page", "record", rec.ID, "caller", access.CallerOf(ctx).Name)
	http.Redirect(w, r, back+"?redone=1", http.StatusSeeOther)
}

// undo undoes a record: through the daemon, in the root's job slot, or
// with none running, under the state lock. The page then shows the
// outcome.
func (s *Server) undo(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	c := access.CallerOf(ctx)
	rec, store, ok := s.postedRecord(w, r, "undo")
	if !ok {
		return
	}
	id := rec.ID
	back := fmt.Sprintf("%srecord/%d", s.cfg.Prefix, id)
	if ok, why := undoable(rec, store); !ok {
		http.Redirect(w, r, back+"?undo_error="+url.QueryEscape(why), http.StatusSeeOther)
		return
	}
	force := r.PostFormValue("force") == "1"
	var res undo.Result
	err := ErrNoDaemon
	if s.cfg.API != nil {
		err = s.cfg.API(ctx, http.MethodPost, fmt.Sprintf("/v1/undo/%d?force=%t", id, force), nil, &res)
	}
	if errors.Is(err, ErrNoDaemon) {
		if s.cfg.UndoOffline == nil {
			err = errors.New("no daemon runs to undo it")
		} else {
			res, err = s.cfg.UndoOffline(ctx, id, force)
		}
	}
	if err != nil {
		s.log.Info("undo from the review page refused", "record", id, "caller", c.Name, "err", err)
		http.Redirect(w, r, back+"?undo_error="+url.QueryEscape(err.Error()), http.StatusSeeOther)
		return
	}
	s.log.Info("undo from the review page", "record", id, "caller", c.Name, "journal", res.Journal)
	http.Redirect(w, r, fmt.Sprintf("%s?undone=%d", back, res.Journal), http.StatusSeeOther)
}
