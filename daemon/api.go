package daemon

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/pprof"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/memwatch/memwatch/access"
	"github.com/memwatch/memwatch/answer"
	"github.com/memwatch/memwatch/compact"
	"github.com/memwatch/memwatch/confine"
	"github.com/memwatch/memwatch/control"
	"github.com/memwatch/memwatch/jobs"
	"github.com/memwatch/memwatch/layout/apprecords"
	"github.com/memwatch/memwatch/policy"
	"github.com/memwatch/memwatch/rewrite"
	"github.com/memwatch/memwatch/socket"
	"github.com/memwatch/memwatch/spool"
	"github.com/memwatch/memwatch/state"
	"github.com/memwatch/memwatch/undo"
	"github.com/memwatch/memwatch/versions"
)

// Status is the body of GET /v1/status.
type Status = control.Status

// Disk is what memwatch holds on disk in its state directory.
type Disk = control.Disk

// StoreStatus is one store in Status.
type StoreStatus = control.StoreStatus

// KeptCopy is one kept copy: memwatch show ROOT/PATH prints it.
type KeptCopy = control.KeptCopy

// LLMStatus is one endpoint's budget use today.
type LLMStatus = control.LLMStatus

// MaxRequestBody bounds what the control API reads of a request body when
// the policy sets no control.max_request_body.
const MaxRequestBody = int64(policy.DefaultMaxRequestBody)

// maxErrorMessage bounds an error body: a message never carries more than
// this of what the client sent.
const maxErrorMessage = 512

func (d *Daemon) api() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) { fmt.Fprintln(w, "ok") })
	mux.HandleFunc("GET /v1/status", d.handleStatus)
	mux.HandleFunc("GET /v1/journal", d.handleJournal)
	mux.HandleFunc("GET /v1/journal/count", d.handleJournalCount)
	mux.HandleFunc("POST /v1/undo/{id}", d.handleUndo)
	mux.HandleFunc("POST /v1/redo/{id}", d.handleRedo)
	mux.HandleFunc("POST /v1/trigger", d.handleTrigger)
	mux.HandleFunc("POST /v1/compact", d.handleCompact)
	mux.HandleFunc("GET /metrics", d.handleMetrics)
	mux.HandleFunc("GET /v1/recall", d.handleRecall)
	mux.HandleFunc("GET /v1/show", d.handleShow)
	mux.HandleFunc("GET /v1/secrets", d.handleSecrets)
	// The Go runtime's profiles, for what the daemon's memory and time
	// go to: the administrator's alone.
	mux.HandleFunc("GET /debug/pprof/{profile...}", d.adminOnly(pprof.Index))
	mux.HandleFunc("GET /debug/pprof/profile", d.adminOnly(pprof.Profile))
	d.recordRoutes(mux)
	d.versionRoutes(mux)
	for _, h := range d.handlers {
		mux.Handle(h.pattern, h.h)
	}
	// Every answer names the policy this daemon runs: a client of another
	// policy knows it is not its daemon (control.PolicyHeader).
	policyID := control.PolicyID(d.cfg.PolicyPath)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if policyID != "" {
			w.Header().Set(control.PolicyHeader, policyID)
		}
		if stamp := d.policyStamp(); stamp != "" {
			w.Header().Set(control.PolicyStampHeader, stamp)
		}
		mux.ServeHTTP(w, r)
	})
}

// adminOnly serves h to the administrator and refuses everyone else.
func (d *Daemon) adminOnly(h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if c := access.CallerOf(r.Context()); !c.IsAdmin() {
			writeErr(w, http.StatusForbidden, fmt.Errorf("%s: the runtime's profiles are the administrator's", c.Name))
			return
		}
		h(w, r)
	}
}

// Handle adds a handler to the control API (the MCP server's /mcp); call
// it before Run. The handler is served on the socket and behind the token
// on the TCP listener, like every route.
func (d *Daemon) Handle(pattern string, h http.Handler) {
	d.handlers = append(d.handlers, route{pattern, h})
}

// route is a handler added with Handle.
type route struct {
	pattern string
	h       http.Handler
}

// API is the control API's handler without its listeners' authentication:
// a request's context must carry its caller (access.WithCaller), as the review
// pages' requests to it do, made in process for the caller they serve.
func (d *Daemon) API() http.Handler { return d.api() }

// DB is the daemon's state database (the journal).
func (d *Daemon) DB() *state.DB { return d.db }

// Spool is the daemon's spool of captured session lines.
func (d *Daemon) Spool() *spool.Spool { return d.spool }

// VersionStore is the daemon's store of memory file versions (nil when
// it could not be opened).
func (d *Daemon) VersionStore() *versions.Store { return d.versions }

// Rewriter is the daemon's safe rewrite: a change made through it is
// journaled like the daemon's own.
func (d *Daemon) Rewriter() *rewrite.Rewriter { return d.rw }

// Policy is the policy in force (it changes on reload).
func (d *Daemon) Policy() *policy.Policy {
	d.mu.RLock()
	defer d.mu.RUnlock()
	return d.policy
}

// policyStamp is the stamp of the policy files the running policy was
// loaded from (control.PolicyStampHeader).
func (d *Daemon) policyStamp() string {
	d.mu.RLock()
	defer d.mu.RUnlock()
	return d.stamp
}

// Generation gives, for one search, a log's live generation in the spool
// (0: unknown), for recall's citations: a root's in one query.
func (d *Daemon) Generation(ctx context.Context) func(root *confine.Root, rel string) int64 {
	return d.spool.Gens(ctx).Of
}

// Held is the spool's held messages for recall (recall.Options.Held).
func (d *Daemon) Held(ctx context.Context, root *confine.Root, fn func(rel string, gen, line int64, raw []byte) error) error {
	return d.spool.SearchHeld(ctx, root, fn)
}

// Undo undoes a journal record in the root's job slot, as POST /v1/undo does.
func (d *Daemon) Undo(ctx context.Context, id int64, force, dryRun bool) (undo.Result, error) {
	return undo.Do(ctx, d.rw, d.engine, id, force, dryRun)
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	// Compact: the clients are programs (memwatch, the MCP server), and
	// indenting a search's answer, and each result again to fit it
	// (fitAnswer), was a twelfth of a rare word's answer. jq indents.
	_ = json.NewEncoder(w).Encode(v)
}

// fitAnswer is how many of items fit, encoded as writeJSON encodes them,
// in maxBytes: an answer's list is cut there and the client asks for the
// rest (at least one item fits, so a client paging always moves on).
func fitAnswer[T any](items []T, maxBytes int) int {
	n := 0
	for i := range items {
		b, err := json.Marshal(items[i])
		if err != nil {
			return i
		}
		if n += len(b) + 1; n > maxBytes && i > 0 {
			return i
		}
	}
	return len(items)
}

func writeErr(w http.ResponseWriter, code int, err error) {
	var tooLarge *http.MaxBytesError
	if errors.As(err, &tooLarge) {
		code = http.StatusRequestEntityTooLarge
		err = fmt.Errorf("request body over %d bytes", tooLarge.Limit)
	}
	msg := err.Error()
	if len(msg) > maxErrorMessage {
		msg = strings.ToValidUTF8(msg[:maxErrorMessage], "") + "…"
	}
	answer := map[string]string{"error": msg}
	if c := control.ErrorCode(err); c != "" {
		answer["code"] = c
	}
	writeJSON(w, code, answer)
}

// decodeBody decodes a bounded JSON body into v (control.max_request_body).
func (d *Daemon) decodeBody(w http.ResponseWriter, r *http.Request, v any) error {
	limit := int64(d.Policy().Control.MaxRequestBody)
	if limit <= 0 {
		limit = MaxRequestBody
	}
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, limit))
	dec.DisallowUnknownFields()
	return dec.Decode(v)
}

func (d *Daemon) handleStatus(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	st := Status{Version: d.cfg.Version, PID: os.Getpid(), Started: d.started, StateDir: d.cfg.StateDir, Policy: d.cfg.PolicyPath,
		Stores: []StoreStatus{}, LLM: []LLMStatus{}}
	if d.replica != nil && access.CallerOf(ctx).IsAdmin() {
		rs := d.replica.Status()
		st.Replica = &rs
	}
	if c := access.CallerOf(ctx); d.fleet != nil && c.ReachesFleet() {
		// The hosts the caller reaches (a token's hosts:), each whole.
		fctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		for _, h := range d.fleet.Status(fctx) {
			if c.ReachesHost(h.Host) {
				if !c.IsAdmin() {
					h.Dir = "" // where memwatch keeps its state is the administrator's
				}
				st.Fleet = append(st.Fleet, h)
			}
		}
		cancel()
	}

	var err error
	if st.Watcher, err = d.watch.Counts(ctx); err != nil {
		writeErr(w, http.StatusServiceUnavailable, err)
		return
	}
	if !d.needRight(w, r, policy.RightRead) {
		return
	}
	caller := access.CallerOf(ctx)
	ids, _ := d.watch.RootIDs(ctx)
	roots := map[string][]string{}
	var stores []*policy.Store
	reach := map[string]bool{}        // roots the caller reaches
	reachDir := map[confine.ID]bool{} // ...and their directories
	d.mu.RLock()
	for _, s := range d.policy.Stores {
		for _, id := range ids[s.Name] {
			roots[s.Name] = append(roots[s.Name], id.Path)
		}
		if !caller.ReachesStore(s) {
			continue
		}
		rs := []string{}
		for _, id := range ids[s.Name] {
			if caller.Reaches(s, id) {
				rs = append(rs, id.Path)
				reach[id.Path], reachDir[id] = true, true
			}
		}
		if len(rs) == 0 && !caller.HasStore(s) {
			continue // none of its roots is the caller's
		}
		ss := StoreStatus{Name: s.Name, Layout: s.Layout, Compactor: s.Compactor, Roots: rs}
		if d.sched != nil {
			if next := d.sched.Next(s.Name + "/"); !next.IsZero() {
				ss.NextRun = &next
			}
		}
		st.Stores = append(st.Stores, ss)
		stores = append(stores, s)
	}
	clients := make([]*compact.Client, 0, len(d.clients))
	for name, c := range d.clients {
		for _, s := range stores {
			if s.Compactor == "llm" && s.LLM == name {
				clients = append(clients, c)
				break
			}
		}
	}
	d.mu.RUnlock()
	if !caller.IsAdmin() {
		// Only the caller's roots: their archives and kept copies, their
		// warnings and jobs; not memwatch's own paths and totals.
		st.StateDir, st.Policy = "", ""
		for i := range stores {
			roots[stores[i].Name] = st.Stores[i].Roots
		}
	}
	for _, c := range clients {
		used, _ := c.Used(ctx)
		st.LLM = append(st.LLM, LLMStatus{Endpoint: c.Name(), Used: used, Budget: c.Budget()})
	}
	// Archives are counted outside the lock: one journal query per root.
	held := d.archivesHeld(ctx, stores, roots)
	for i := range st.Stores {
		v := held[st.Stores[i].Name]
		st.Stores[i].Archives, st.Stores[i].ArchiveBytes = v.archives, v.bytes
		st.Stores[i].Kept, st.Stores[i].KeptCopies = len(v.kept), v.kept[:min(len(v.kept), maxKeptListed)]
		d.metrics.ArchiveBytes.WithLabelValues(st.Stores[i].Name).Set(float64(v.bytes))
		d.metrics.Kept.WithLabelValues(st.Stores[i].Name).Set(float64(len(v.kept)))
	}
	for _, root := range d.passes.Uncaptured() {
		if caller.IsAdmin() || reach[root] {
			st.Uncaptured = append(st.Uncaptured, root)
		}
	}
	if caller.IsAdmin() {
		st.Background = d.bg.Queued.Load()
		st.StateProblem = d.stateProblem()
		st.Disk = d.disk()
		st.Warnings = d.warnings.List()
		if total := d.catchTotal.Load(); total > 0 {
			d.catch.WaitCounted(ctx, 2*time.Second)
			st.CatchUp = d.catch.Status(time.Now(), d.catchDone.Load(), total, nil)
		}
	} else {
		if total := d.catchTotal.Load(); total > 0 {
			d.catch.WaitCounted(ctx, 2*time.Second)
			st.CatchUp = d.catch.Status(time.Now(), d.catchDone.Load(), total, func(root string) bool { return reach[root] })
		}
		st.Warnings = d.warnings.ListFor(func(root string) bool { return reach[root] })
	}
	if st.Warnings == nil {
		st.Warnings = []string{}
	}
	st.Losses = d.capture.Losses(func(dir confine.ID) bool { return caller.IsAdmin() || reachDir[dir] })
	if holds, err := d.db.Holds(ctx); err == nil {
		for _, h := range holds {
			if caller.IsAdmin() || reach[h.Root] {
				st.Holds = append(st.Holds, h)
			}
		}
	}
	st.Secrets = d.secrets.status(func(root string) bool { return caller.IsAdmin() || reach[root] })
	for _, p := range d.scans.Progress() {
		if caller.IsAdmin() || reach[p.Root] {
			st.Progress = append(st.Progress, p)
		}
	}
	js, err := d.engine.Status(ctx)
	if err != nil {
		writeErr(w, http.StatusServiceUnavailable, err)
		return
	}
	if !caller.IsAdmin() {
		js = js.Only(func(root string) bool { return reach[root] })
	}
	st.Jobs = jobsStatus(js.Capped(maxStatusJobs))
	writeJSON(w, http.StatusOK, st)
}

// jobsStatus is the engine's status as the status answer gives it.
func jobsStatus(s jobs.Status) control.JobsStatus {
	list := func(js []jobs.Job) []control.Job {
		out := make([]control.Job, len(js))
		for i, j := range js {
			out[i] = control.Job{Store: j.Store, Root: j.Root, Rule: j.Rule, Target: j.Target, Reason: string(j.Reason)}
		}
		return out
	}
	return control.JobsStatus{Queued: list(s.Queued), QueuedCount: s.QueuedCount, Running: list(s.Running), Cooling: s.Cooling, Stats: s.Stats}
}

// maxStatusJobs bounds the queued jobs a status answer lists.
const maxStatusJobs = 100

// maxJournalLimit bounds the records one journal answer holds; a client
// pages past it (before=).
const maxJournalLimit = control.MaxJournalPage

func (d *Daemon) handleJournal(w http.ResponseWriter, r *http.Request) {
	f, ok := d.journalFilter(w, r)
	if !ok {
		return
	}
	out, err := d.journalOf(r.Context(), access.CallerOf(r.Context()), f)
	if err != nil {
		writeErr(w, http.StatusInternalServerError, err)
		return
	}
	if len(out) == 0 && (f.Store != "" || f.Rule != "" || f.Root != "") {
		// Nothing from a name that names nothing: the request's mistake.
		err := answer.CheckJournalNames(r.Context(), d.db, d.Policy(), f.Store, f.Rule)
		if err == nil {
			caller := access.CallerOf(r.Context())
			err = answer.CheckJournalRoot(d.Policy(), f.Root, func(s *policy.Store) bool {
				if caller.IsAdmin() || caller.ReachesStore(s) {
					return true
				}
				for _, id := range s.RootIDs() {
					if id.Path == filepath.Clean(f.Root) && caller.Reaches(s, id) {
						return true
					}
				}
				return false
			})
		}
		if err != nil {
			writeErr(w, http.StatusBadRequest, err)
			return
		}
	}
	if out == nil {
		out = []state.Record{}
	}
	// The rest, past MaxAnswer bytes, is the next page's (before=).
	out = out[:fitAnswer(out, control.MaxAnswer)]
	writeJSON(w, http.StatusOK, out)
}

// handleJournalCount counts the records a journal request selects: log
// says how many kept copies there are beside what it prints.
func (d *Daemon) handleJournalCount(w http.ResponseWriter, r *http.Request) {
	f, ok := d.journalFilter(w, r)
	if !ok {
		return
	}
	n := 0
	for _, g := range d.journalFilters(access.CallerOf(r.Context()), f) {
		m, err := d.db.JournalCount(r.Context(), g)
		if err != nil {
			writeErr(w, http.StatusInternalServerError, err)
			return
		}
		n += m
	}
	writeJSON(w, http.StatusOK, control.JournalCount{Count: n})
}

// journalFilter reads a journal request's filter, each number and time
// checked; a root not given whole is the one the caller reaches now.
// Otherwise it answers (400, 403, 404).
func (d *Daemon) journalFilter(w http.ResponseWriter, r *http.Request) (state.Filter, bool) {
	if !d.needRight(w, r, policy.RightRead) {
		return state.Filter{}, false
	}
	q := r.URL.Query()
	limit := 50
	if s := q.Get("limit"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 || n > maxJournalLimit {
			writeErr(w, http.StatusBadRequest, fmt.Errorf("limit must be a number from 1 to %d, not %q", maxJournalLimit, control.Clip(s)))
			return state.Filter{}, false
		}
		limit = n
	}
	f := state.Filter{Store: q.Get("store"), Root: q.Get("root"), Target: q.Get("target"), Rule: q.Get("rule"), Outcome: q.Get("outcome"), Limit: limit}
	for _, t := range []struct {
		key string
		to  *time.Time
	}{{"since", &f.Since}, {"until", &f.Until}} {
		if s := q.Get(t.key); s != "" {
			v, err := time.Parse(time.RFC3339Nano, s)
			if err != nil {
				writeErr(w, http.StatusBadRequest, fmt.Errorf("%s must be a time as RFC 3339 (2026-11-27T14:00:00Z), not %q", t.key, control.Clip(s)))
				return state.Filter{}, false
			}
			*t.to = v
		}
	}
	for _, t := range []struct {
		key string
		to  *int64
	}{{"after", &f.AfterID}, {"before", &f.BeforeID}} {
		if s := q.Get(t.key); s != "" {
			n, err := strconv.ParseInt(s, 10, 64)
			if err != nil || n < 0 {
				writeErr(w, http.StatusBadRequest, fmt.Errorf("%s must be a record id, not %q", t.key, control.Clip(s)))
				return state.Filter{}, false
			}
			*t.to = n
		}
	}
	if f.Root != "" && !access.CallerOf(r.Context()).IsAdmin() {
		_, root, ok := d.needRoot(w, r, f.Root, policy.RightRead)
		if !ok {
			return state.Filter{}, false
		}
		// Only what was done in the directory the caller reaches now.
		id := root.ID()
		f.Root, f.Dir = id.Path, &id
		root.Close()
	}
	return f, true
}

// journalOf is the records f selects that caller may read, newest first:
// all of them for an administrator, else of each root the caller
// reaches, what was done in the directory it reaches.
func (d *Daemon) journalOf(ctx context.Context, caller *access.Caller, f state.Filter) ([]state.Record, error) {
	var out []state.Record
	for _, g := range d.journalFilters(caller, f) {
		recs, err := d.db.Journal(ctx, g)
		if err != nil {
			return nil, err
		}
		out = append(out, recs...)
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].ID > out[j].ID })
	return out[:min(len(out), f.Limit)], nil
}

// journalFilters is f as the filters of what caller may read: f itself
// for an administrator or a root given whole, else f for each root the
// caller reaches, in the directory it reaches.
func (d *Daemon) journalFilters(caller *access.Caller, f state.Filter) []state.Filter {
	if caller.IsAdmin() || f.Root != "" {
		return []state.Filter{f}
	}
	var out []state.Filter
	seen := map[string]bool{}
	for _, s := range d.Policy().Stores {
		if f.Store != "" && s.Name != f.Store {
			continue
		}
		for _, id := range s.RootIDs() {
			if caller.Reaches(s, id) && !seen[id.Path] {
				seen[id.Path] = true
				g := f
				g.Root, g.Dir = id.Path, &id
				out = append(out, g)
			}
		}
	}
	return out
}

func (d *Daemon) handleUndo(w http.ResponseWriter, r *http.Request) {
	id, err := strconv.ParseInt(r.PathValue("id"), 10, 64)
	if err != nil {
		writeErr(w, http.StatusBadRequest, fmt.Errorf("undo: bad id %q", r.PathValue("id")))
		return
	}
	force := r.URL.Query().Get("force") == "true"
	dry := r.URL.Query().Get("dry_run") == "true"
	if !d.mayUndo(w, r, id) {
		return
	}
	res, err := undo.Do(r.Context(), d.rw, d.engine, id, force, dry)
	switch {
	case errors.Is(err, state.ErrNoRecord):
		writeErr(w, http.StatusNotFound, err)
	case errors.Is(err, rewrite.ErrTargetChanged), errors.Is(err, apprecords.ErrRowChanged):
		writeErr(w, http.StatusConflict, err)
	case err != nil:
		writeErr(w, http.StatusUnprocessableEntity, err)
	default:
		writeJSON(w, http.StatusOK, res)
	}
}

// mayUndo checks that the caller may undo journal record id: the undo
// right, a root it reaches, and a store that allows undo. Otherwise it
// answers (403, or 404 for no such record).
func (d *Daemon) mayUndo(w http.ResponseWriter, r *http.Request, id int64) bool {
	if !d.needRight(w, r, policy.RightUndo) {
		return false
	}
	rec, err := d.db.GetRecord(r.Context(), id)
	if err != nil {
		writeErr(w, http.StatusNotFound, err)
		return false
	}
	s, root, ok := d.needRoot(w, r, rec.Root, policy.RightUndo)
	if !ok {
		return false
	}
	now := root.ID()
	root.Close()
	if rec.RootIno != 0 && (uint64(rec.RootDev) != now.Dev || uint64(rec.RootIno) != now.Ino) {
		writeErr(w, http.StatusConflict, fmt.Errorf("undo %d: %s: %w (it was moved or replaced since)", id, rec.Root, rewrite.ErrRootReplaced))
		return false
	}
	if !s.AllowUndo {
		d.forbid(w, r, fmt.Sprintf("store %s does not allow undo (allow_undo: false in the policy)", s.Name))
		return false
	}
	return true
}

func (d *Daemon) handleCompact(w http.ResponseWriter, r *http.Request) {
	var req CompactRequest
	if err := d.decodeBody(w, r, &req); err != nil {
		writeErr(w, http.StatusBadRequest, fmt.Errorf("compact: %w", err))
		return
	}
	if abs, err := filepath.Abs(req.Path); err == nil {
		if rt, root := d.storeFor(abs); rt != nil {
			_, opened, ok := d.needRoot(w, r, root, policy.RightWrite)
			if !ok {
				return
			}
			opened.Close()
		} else if !d.needRight(w, r, policy.RightWrite) {
			return
		}
	}
	res, err := d.Compact(r.Context(), req)
	if err != nil {
		writeErr(w, http.StatusUnprocessableEntity, err)
		return
	}
	writeJSON(w, http.StatusOK, res)
}

// TriggerRequest is the body of POST /v1/trigger.
type TriggerRequest struct {
	Store string `json:"store"`
	Root  string `json:"root,omitempty"`
}

func (d *Daemon) handleTrigger(w http.ResponseWriter, r *http.Request) {
	var req TriggerRequest
	if err := d.decodeBody(w, r, &req); err != nil {
		writeErr(w, http.StatusBadRequest, fmt.Errorf("trigger: %w", err))
		return
	}
	caller := access.CallerOf(r.Context())
	if !d.needRight(w, r, policy.RightWrite) {
		return
	}
	if req.Root != "" {
		_, root, ok := d.needRoot(w, r, req.Root, policy.RightWrite)
		if !ok {
			return
		}
		root.Close()
	}
	var n int
	var err error
	// An unknown name is the request's mistake (exit 2, as log --store
	// nope), said with the names there are.
	s := d.Policy().StoreByName(req.Store)
	if s == nil {
		var known []string
		for _, st := range d.Policy().Stores {
			if caller.IsAdmin() || caller.ReachesStore(st) {
				known = append(known, st.Name)
			}
		}
		writeErr(w, http.StatusBadRequest, fmt.Errorf("trigger %s: no such store (known: %s)", req.Store, strings.Join(known, ", ")))
		return
	}
	if req.Root == "" && !caller.IsAdmin() {
		// Every root of the store the caller reaches.
		for _, id := range s.RootIDs() {
			if caller.Reaches(s, id) {
				m, terr := d.trigger(r.Context(), req.Store, id.Path, jobs.ReasonTrigger)
				n, err = n+m, errors.Join(err, terr)
			}
		}
	} else {
		n, err = d.trigger(r.Context(), req.Store, req.Root, jobs.ReasonTrigger)
	}
	if errors.Is(err, errNoSuchRoot) {
		writeErr(w, http.StatusBadRequest, err)
		return
	}
	if err != nil {
		writeErr(w, http.StatusInternalServerError, err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]int{"queued": n})
}

// listen opens the control socket and, if configured, the loopback TCP
// address guarded by bearer tokens. The socket is open to every local user
// (0666, in a directory of its own created 0755) when it is not in the
// state directory: each peer is then served only within what its uid owns
// (see access.Caller). In the state directory (root's, 0700) only its owner
// reaches it.
func (d *Daemon) listen() error {
	sock := d.cfg.Socket
	shared := filepath.Clean(filepath.Dir(sock)) != filepath.Clean(d.cfg.StateDir)
	dirMode, sockMode := os.FileMode(0o700), os.FileMode(0o600)
	if shared {
		dirMode, sockMode = 0o755, 0o666
	}
	l, err := socket.Listen(sock, dirMode, sockMode)
	if err != nil {
		return err
	}
	d.listener = l
	if tcp := d.policy.Control.TCP; tcp != "" {
		var token string
		if f := d.policy.Control.TokenFile; f != "" {
			var err error
			if token, err = readToken(f); err != nil {
				l.Close()
				return err
			}
		}
		tl, err := net.Listen("tcp", tcp)
		if err != nil {
			l.Close()
			return fmt.Errorf("listen on control.tcp %s: %w", tcp, err)
		}
		d.tcp = &authListener{Listener: tl, token: token}
	}
	if addr := d.policy.Metrics.Listen; addr != "" {
		ml, err := net.Listen("tcp", addr)
		if err != nil {
			l.Close()
			if d.tcp != nil {
				d.tcp.Close()
			}
			return fmt.Errorf("metrics.listen %s: %w", addr, err)
		}
		d.metricsL = ml
	}
	return nil
}

func readToken(path string) (string, error) {
	t, err := policy.ReadSecret(path, "control.token_file")
	if err != nil {
		return "", err
	}
	if len(t) < 16 {
		return "", fmt.Errorf("control.token_file %s holds a token shorter than 16 characters", path)
	}
	return t, nil
}

// authListener marks TCP connections so the handler demands the token.
type authListener struct {
	net.Listener
	token string
}

// disk is what the state directory holds.
// disk is what the state directory holds. The index's bytes take a
// listing of thousands of files: they are measured again only once the
// indexer wrote since, and then at most every diskEvery (the metrics,
// refreshed every 10 seconds, had an idle daemon stat every index file,
// and a busy one a sixth of an agent's every write in a large project).
func (d *Daemon) disk() Disk {
	writes := d.indexes.Writes()
	d.diskMu.Lock()
	defer d.diskMu.Unlock()
	if d.diskAt.IsZero() || writes != d.diskWrites && time.Since(d.diskAt) >= diskEvery {
		d.diskIndex, d.diskWrites, d.diskAt = answer.IndexBytes(d.cfg.StateDir), writes, time.Now()
	}
	return answer.StateDiskWith(d.cfg.StateDir, d.diskIndex)
}

// diskEvery is how often the index's bytes are measured at most: what
// status says of them is at most this old.
const diskEvery = time.Minute

// handleRedo answers POST /v1/redo/{id}: the hold ends, and the file's
// root is evaluated at once.
func (d *Daemon) handleRedo(w http.ResponseWriter, r *http.Request) {
	id, err := strconv.ParseInt(r.PathValue("id"), 10, 64)
	if err != nil || id < 1 {
		writeErr(w, http.StatusBadRequest, fmt.Errorf("redo: bad id %q", control.Clip(r.PathValue("id"))))
		return
	}
	if !d.mayUndo(w, r, id) {
		return
	}
	holds, err := undo.Redo(r.Context(), d.db, id)
	switch {
	case errors.Is(err, state.ErrNoRecord), errors.Is(err, undo.ErrNoHold):
		writeErr(w, http.StatusNotFound, err)
		return
	case err != nil:
		writeErr(w, http.StatusUnprocessableEntity, err)
		return
	}
	rec, _ := d.db.GetRecord(r.Context(), id)
	d.engine.Submit(jobs.Job{Store: rec.Store, Root: holds[0].Root, Rule: ruleEvaluate, Reason: jobs.ReasonRedo})
	for _, h := range holds {
		d.log.Info("undo no longer holds the rule off the file", "root", h.Root, "path", h.Target, "rule", h.Rule, "record", h.Record)
	}
	writeJSON(w, http.StatusOK, control.RedoResult{Hold: holds[0], Also: holds[1:]})
}
