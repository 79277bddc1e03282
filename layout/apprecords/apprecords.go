package apprecords

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/memwatch/memwatch/compact"
	"github.com/memwatch/memwatch/confine"
	"github.com/memwatch/memwatch/jobs"
	"github.com/memwatch/memwatch/layout"
	"github.com/memwatch/memwatch/policy"
	"github.com/memwatch/memwatch/rewrite"
	"github.com/memwatch/memwatch/state"
)

// Layout is the app-records layout.
type Layout struct{}

// Name implements layout.Layout.
func (Layout) Name() string { return "app-records" }

// Rule names, as they appear in the journal.
const (
	RuleLimit  = "record-limit"
	RuleCreate = "record-create"
	RuleDelete = "record-delete" // a row deleted (limit, purge, delete)
	RuleEdit   = "record-edit"   // a row's content replaced
	RuleUndo   = "record-undo"
)

// Rules implements layout.Layout.
func (Layout) Rules() []layout.Rule {
	return []layout.Rule{
		{Name: RuleCreate, Targets: createTargets, Run: runCreate, Every: func(s *policy.Store) time.Duration {
			if OptionsOf(s).Conversations == "" {
				return 0
			}
			return min(max(OptionsOf(s).ConversationIdle/2, time.Second), 5*time.Minute)
		}},
		{Name: RuleLimit, Targets: limitTargets, Run: runLimit},
	}
}

func open(ctx context.Context, env *layout.Env, root *confine.Root) (*DB, error) {
	o := OptionsOf(env.Store)
	db, err := Open(ctx, root, o.Table, o.CreateTable)
	if err != nil {
		// Unhealthy, not fatal: shown in status, logged once per message.
		msg := fmt.Sprintf("store %s is unhealthy: %v", env.Store.Name, err)
		if _, seen, _ := env.DB.Get(ctx, "records-error", root.Path()+"\x00"+err.Error()); !seen {
			env.Log.Error("app-records database unusable; other stores are not affected", "root", root.Path(), "err", err)
			env.Logged(env.DB.Put(ctx, "records-error", root.Path()+"\x00"+err.Error(), []byte("1")), "DB.Put")
		}
		env.Warnings.Set(root.Path(), "db", msg)
		return nil, err
	}
	env.Warnings.Clear(root.Path(), "db")
	db.SetBounds(int64(o.MaxRecordSize), o.MaxRows)
	return db, nil
}

func limitTargets(ctx context.Context, env *layout.Env, root *confine.Root) ([]string, error) {
	db, err := open(ctx, env, root)
	if err != nil {
		return nil, busy(err)
	}
	defer db.Close()
	over, err := db.OverLimit(ctx, OptionsOf(env.Store).LimitPerApp)
	if err != nil {
		return nil, busy(err)
	}
	var out []string
	for app := range over {
		if held(ctx, env, db, root.Path(), app) {
			continue
		}
		out = append(out, app)
	}
	return out, nil
}

// busy turns a locked database into a retryable error: the evaluation is
// tried again with backoff until the app's lock is released, instead of
// waiting for the next write or sweep. Other errors are reported (status)
// and wait for the next change.
func busy(err error) error {
	if IsBusy(err) {
		return jobs.Retry(err)
	}
	return nil
}

// IsBusy reports SQLite's "database is locked" (SQLITE_BUSY, SQLITE_LOCKED).
func IsBusy(err error) bool {
	if err == nil {
		return false
	}
	s := err.Error()
	return strings.Contains(s, "database is locked") || strings.Contains(s, "SQLITE_BUSY") || strings.Contains(s, "database table is locked")
}

// held reports an app whose deleted record an undo restored, and which has
// had no new record since: the undo sticks until then.
func held(ctx context.Context, env *layout.Env, db *DB, root, app string) bool {
	key := root + "\x00" + app
	v, ok, err := env.DB.Get(ctx, HoldNS, key)
	if err != nil || !ok {
		return false
	}
	hold, _ := strconv.ParseInt(string(v), 10, 64)
	top, err := db.MaxID(ctx, app)
	if err != nil {
		return true
	}
	if top > hold {
		env.Logged(env.DB.Put(ctx, HoldNS, key, nil), "DB.Put") // a new record: the limit applies again
		return false
	}
	return true
}

// Decision is app-records' MemoryCompactionDecision.
type Decision struct {
	Action         string `json:"action"`
	TargetMemoryID int64  `json:"targetMemoryId"`
	NewContent     string `json:"newContent,omitempty"`
	Reason         string `json:"reason"`
}

// runLimit compacts an app's records down to limit_per_app, one decision at
// a time. No transaction is held across the LLM call: each decision is
// applied in its own short transaction, and only if the row is unchanged.
// One job removes at most max_rows records and reads at most max_rows a
// time; a record over max_record_size is never read whole, sent to the
// LLM or removed (it is reported, and the oldest other one goes).
func runLimit(ctx context.Context, env *layout.Env, root *confine.Root, app string) (jobs.Result, error) {
	o := OptionsOf(env.Store)
	for i := 0; ctx.Err() == nil && i < o.MaxRows; i++ {
		db, err := open(ctx, env, root)
		if err != nil {
			return jobs.Result{}, err
		}
		total, err := db.Count(ctx, app)
		var rs []Record
		if err == nil {
			rs, err = db.Records(ctx, app)
		}
		db.Close()
		if err != nil {
			return jobs.Result{}, jobs.Retry(err)
		}
		if total <= o.LimitPerApp {
			return jobs.Result{}, nil
		}
		var normal []Record
		for _, r := range rs {
			if r.Oversize {
				msg := fmt.Sprintf("%s: app %s: record %d is %d bytes, over max_record_size %v; memwatch does not read, send or remove it", env.Store.Name, app, r.ID, r.Size, o.MaxRecordSize)
				if env.Warnings.Set(root.Path(), fmt.Sprintf("oversize:%s:%d", app, r.ID), msg) {
					env.Log.Warn("record over max_record_size left as it is", "root", root.Path(), "app", app, "record", r.ID, "bytes", r.Size, "max_record_size", o.MaxRecordSize)
				}
				continue
			}
			normal = append(normal, r)
		}
		if len(normal) == 0 {
			return jobs.Result{CoolDown: true}, nil // only oversize records: reported above
		}
		var d Decision
		var tokens int64
		var why string
		if total > len(rs) || len(normal) < len(rs) {
			// Not every record is at hand (more than max_rows, or some too
			// large to read): no LLM decision over part of them.
			d, why = Decision{Action: "delete", TargetMemoryID: normal[0].ID, Reason: "FIFO: the oldest record"},
				fmt.Sprintf("FIFO: %d records, %d of them read (max_rows %d, max_record_size %v)", total, len(normal), o.MaxRows, o.MaxRecordSize)
		} else {
			d, tokens, why = decide(ctx, env, app, normal, o.LimitPerApp)
		}
		if err := apply(ctx, env, root, app, normal, d, tokens, why); err != nil && !errors.Is(err, ErrChanged) {
			return jobs.Result{}, jobs.Retry(err)
		}
	}
	if ctx.Err() == nil {
		return jobs.Result{RetryAfter: time.Second}, nil // max_rows removed: the rest in the next job
	}
	return jobs.Result{}, ctx.Err()
}

const decideSystem = `You are a memory management assistant. You have %d memories but can only keep %d.
Decide which ONE memory to either DELETE (remove entirely) or EDIT (merge the new memory into an existing one: the merged content replaces that existing memory, must stay under %d characters, and the new memory is then dropped).
Return JSON: {"action": "delete" | "edit", "targetMemoryId": <id>, "newContent": "<merged content if editing>", "reason": "<explanation>"}
` + compact.DataNotice

// decide asks the LLM for a decision and validates it; anything else falls
// back to FIFO (delete the oldest). why says why the fallback was used.
func decide(ctx context.Context, env *layout.Env, app string, rs []Record, limit int) (Decision, int64, string) {
	fifo := Decision{Action: "delete", TargetMemoryID: rs[0].ID, Reason: "FIFO: the oldest record"}
	if env.LLM == nil {
		return fifo, 0, "heuristic compactor"
	}
	// As in the seed: the existing memories and the new (newest) one.
	var list strings.Builder
	for _, r := range rs[:len(rs)-1] {
		fmt.Fprintf(&list, "[id %d, created %s] %s\n", r.ID, r.CreatedAt, r.Content)
	}
	nw := rs[len(rs)-1]
	list.WriteString(fmt.Sprintf("\nNew memory:\n[id %d, created %s] %s\n", nw.ID, nw.CreatedAt, nw.Content))
	maxChars := OptionsOf(env.Store).MaxChars
	cctx, cancel := context.WithTimeout(ctx, 30*time.Second) // the seed's timeout
	defer cancel()
	reply, err := env.LLM.Complete(cctx, compact.Prompt{System: fmt.Sprintf(decideSystem, len(rs), limit, maxChars),
		User: "Memories of app " + app + ":\n" + compact.Data("memories", list.String()), JSON: true})
	if err != nil {
		return fifo, reply.Tokens, fmt.Sprintf("llm unavailable (%v)", err)
	}
	f, _, err := compact.ParseFields(reply.Text, "action", "targetMemoryId", "newContent", "reason")
	if err != nil {
		return fifo, reply.Tokens, "unparseable decision"
	}
	id, _ := strconv.ParseInt(strings.TrimSpace(f["targetMemoryId"]), 10, 64)
	d := Decision{Action: strings.ToLower(strings.TrimSpace(f["action"])), TargetMemoryID: id, NewContent: strings.TrimSpace(f["newContent"]), Reason: f["reason"]}
	if why := validate(d, rs, maxChars); why != "" {
		env.Log.Warn("LLM decision rejected; falling back to FIFO", "app", app, "reason", why)
		return fifo, reply.Tokens, "invalid decision: " + why
	}
	return d, reply.Tokens, ""
}

// validate checks a decision against the app's own records (app
// isolation) and the content limits; "" means valid.
func validate(d Decision, rs []Record, maxChars int) string {
	found := false
	for _, r := range rs {
		if r.ID == d.TargetMemoryID {
			found = true
		}
	}
	switch {
	case !found:
		return fmt.Sprintf("record %d is not one of this app's records", d.TargetMemoryID)
	case d.Action == "delete":
		return ""
	case d.Action != "edit":
		return fmt.Sprintf("unknown action %q", d.Action)
	case d.TargetMemoryID == rs[len(rs)-1].ID:
		return "an edit must merge the new memory into an existing one, not edit the new one"
	case d.NewContent == "":
		return "edit without newContent"
	case len([]rune(d.NewContent)) > maxChars:
		return fmt.Sprintf("newContent is %d characters, over max_chars %d", len([]rune(d.NewContent)), maxChars)
	case compact.CheckText([]byte(d.NewContent)) != nil:
		return "newContent has control characters or invalid UTF-8"
	}
	return ""
}

// rowData is what the journal keeps of a changed row, for undo.
type rowData struct {
	Table      string `json:"table"`
	Row        Record `json:"row"`
	NewContent string `json:"new_content,omitempty"`
	// Cols and Literals are the whole row as stored: every column, each
	// value as SQLite's quote() writes it, so an undo puts back exactly
	// the row that was deleted (extra columns, types and timestamps too).
	Cols     []string `json:"cols,omitempty"`
	Literals []string `json:"literals,omitempty"`
}

// apply journals the decision (pending, with the full old rows), applies
// it in one short transaction, then marks it done. An edit merges the
// newest record into the target, so the target is edited and the newest
// deleted, both journaled.
func apply(ctx context.Context, env *layout.Env, root *confine.Root, app string, rs []Record, d Decision, tokens int64, why string) error {
	var old Record
	for _, r := range rs {
		if r.ID == d.TargetMemoryID {
			old = r
		}
	}
	table := OptionsOf(env.Store).Table
	reason := fmt.Sprintf("limit_per_app %d: %s", OptionsOf(env.Store).LimitPerApp, d.Reason)
	if why != "" {
		reason += " (" + why + ")"
	}
	db, err := open(ctx, env, root)
	if err != nil {
		return err
	}
	defer db.Close()
	journalRow := func(rule string, r Record, newContent, reason string, tokens int64) (*state.Record, error) {
		rd := rowData{Table: table, Row: r, NewContent: newContent}
		var lerr error
		if rd.Cols, rd.Literals, lerr = db.Literals(ctx, r.ID); lerr != nil {
			return nil, lerr
		}
		data, _ := json.Marshal(rd)
		rec := &state.Record{Store: env.Store.Name, Root: root.Path(), Rule: rule, Target: fmt.Sprintf("%s/%s/%d", table, app, r.ID),
			BeforeSHA: rewrite.Hash([]byte(r.Content)), BeforeSize: int64(len(r.Content)), Tokens: tokens,
			Outcome: state.Pending, Reason: reason, Data: data}
		rec.RootDev, rec.RootIno = rootID(root)
		if rule == RuleEdit {
			rec.AfterSHA, rec.AfterSize = rewrite.Hash([]byte(newContent)), int64(len(newContent))
		}
		_, err := env.DB.Append(ctx, rec)
		return rec, err
	}
	var recs []*state.Record
	var change func(*DB) error
	if d.Action == "edit" {
		absorbed := rs[len(rs)-1]
		e, err := journalRow(RuleEdit, old, d.NewContent, reason, tokens)
		if err != nil {
			return err
		}
		x, err := journalRow(RuleDelete, absorbed, "", fmt.Sprintf("merged into record %d: %s", old.ID, d.Reason), 0)
		if err != nil {
			return err
		}
		recs = []*state.Record{e, x}
		change = func(db *DB) error { return db.Merge(ctx, old, d.NewContent, absorbed) }
	} else {
		x, err := journalRow(RuleDelete, old, "", reason, tokens)
		if err != nil {
			return err
		}
		recs = []*state.Record{x}
		change = func(db *DB) error { return db.Delete(ctx, old) }
	}
	err = change(db)
	for _, rec := range recs {
		rec.Outcome = state.Done
		if err != nil {
			rec.Outcome, rec.Reason = state.Failed, err.Error()
		}
		if uerr := env.DB.Update(context.WithoutCancel(ctx), rec); uerr != nil && err == nil {
			err = uerr
		}
	}
	if err == nil {
		env.Log.Info("compacted app records", "root", root.Path(), "app", app, "action", d.Action, "record", old.ID, "reason", reason)
	}
	return err
}

// ---- creation from ended conversations ----

const seenNS = "conversation-seen"

// conversationApp returns the app id of a conversation log matched by a
// pattern with an {app} placeholder.
func conversationApp(pattern, path string) (string, bool) {
	pp := strings.Split(filepath.Clean(pattern), string(filepath.Separator))
	fp := strings.Split(filepath.Clean(path), string(filepath.Separator))
	if len(pp) != len(fp) {
		return "", false
	}
	for i, p := range pp {
		if j := strings.Index(p, "{app}"); j >= 0 {
			pre, post := p[:j], p[j+len("{app}"):]
			s := fp[i]
			if strings.HasPrefix(s, pre) && strings.HasSuffix(s, post) && len(s) > len(pre)+len(post) {
				return s[len(pre) : len(s)-len(post)], true
			}
			return "", false
		}
	}
	return "", false
}

// conversationsRoot opens the directory the conversations pattern lives in
// (its static part) as a confined root of its own, and returns the pattern
// relative to it with {app} as a wildcard.
func conversationsRoot(pattern string) (*confine.Root, string, error) {
	glob := strings.ReplaceAll(pattern, "{app}", "*")
	dir := policy.StaticDir(glob)
	if dir == filepath.Clean(glob) {
		dir = filepath.Dir(dir)
	}
	root, err := confine.Open(dir, confine.Options{})
	if err != nil {
		return nil, "", err
	}
	rel, err := filepath.Rel(dir, glob)
	if err != nil {
		root.Close()
		return nil, "", err
	}
	return root, rel, nil
}

func createTargets(ctx context.Context, env *layout.Env, root *confine.Root) ([]string, error) {
	pattern := OptionsOf(env.Store).Conversations
	if pattern == "" {
		return nil, nil
	}
	croot, glob, err := conversationsRoot(pattern)
	if err != nil {
		return nil, nil
	}
	defer croot.Close()
	rels, _ := croot.Glob(glob)
	idle := OptionsOf(env.Store).ConversationIdle
	since := watchingSince(ctx, env, root.Path())
	var out []string
	for _, rel := range rels {
		m := croot.Join(rel)
		fi, err := croot.Stat(rel)
		if err != nil || !fi.Mode().IsRegular() || env.Now().Sub(fi.ModTime()) < idle {
			continue
		}
		if _, ok := conversationApp(pattern, m); !ok {
			continue
		}
		if _, seen, _ := env.DB.Get(ctx, seenNS, m); seen {
			continue
		}
		if fi.ModTime().Before(since) {
			// Ended before memwatch watched: app-records' old conversations
			// create no memories retroactively.
			env.Log.Info("conversation ended before memwatch watched it; no record is created", "conversation", m, "watching_since", since.Format(time.RFC3339))
			env.Logged(env.DB.Put(ctx, seenNS, m, []byte("before "+since.UTC().Format(time.RFC3339))), "DB.Put")
			continue
		}
		out = append(out, m)
	}
	return out, nil
}

// watchingSince is when memwatch first evaluated record creation for a
// root (remembered in the state database).
func watchingSince(ctx context.Context, env *layout.Env, root string) time.Time {
	if v, ok, err := env.DB.Get(ctx, "records-since", root); err == nil && ok {
		if t, err := time.Parse(time.RFC3339Nano, string(v)); err == nil {
			return t
		}
	}
	now := env.Now()
	env.Logged(env.DB.Put(ctx, "records-since", root, []byte(now.UTC().Format(time.RFC3339Nano))), "DB.Put")
	return now
}

const createSystem = `You are a memory creation assistant. Analyze this conversation and create a concise memory record.
Focus on: key facts and information; user preferences or patterns; important decisions or outcomes; lessons learned or insights.
Format: a single paragraph, 2-4 sentences, factual and concise, under %d characters. Return only the memory.
` + compact.DataNotice

// runCreate turns an ended conversation into one record for its app, at
// most once per conversation; then the limit applies.
func runCreate(ctx context.Context, env *layout.Env, root *confine.Root, path string) (jobs.Result, error) {
	app, _ := conversationApp(OptionsOf(env.Store).Conversations, path)
	conv := strings.TrimSuffix(filepath.Base(path), filepath.Ext(path)) // the conversation's id, as the app names it
	markSeen := func() error { return env.DB.Put(ctx, seenNS, path, []byte(time.Now().UTC().Format(time.RFC3339))) }
	if env.LLM == nil {
		env.Log.Info("conversation ended; the heuristic compactor invents no record", "app", app, "conversation", conv)
		return jobs.Result{}, markSeen()
	}
	db, err := open(ctx, env, root)
	if err != nil {
		return jobs.Result{}, err
	}
	exists := db.HasConversation(ctx, app, conv)
	db.Close()
	if exists {
		return jobs.Result{}, markSeen()
	}
	croot, _, err := conversationsRoot(OptionsOf(env.Store).Conversations)
	if err != nil {
		return jobs.Result{}, err
	}
	defer croot.Close()
	crel, err := croot.Rel(path)
	if err != nil {
		return jobs.Result{}, err
	}
	// The whole conversation as captured: what the application trimmed from
	// its log meanwhile is still in the spool.
	log, err := env.CaptureLog(ctx, croot, crel)
	if err != nil {
		return jobs.Result{}, err
	}
	msgs, _, _, err := env.ReadRange(ctx, log, 0, log.Seq, 600, nil)
	if err != nil {
		return jobs.Result{}, err
	}
	var text strings.Builder
	for _, m := range msgs {
		if strings.TrimSpace(m.Text) != "" {
			text.WriteString(m.Role + ": " + m.Text + "\n")
		}
	}
	maxChars := OptionsOf(env.Store).MaxChars
	cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	reply, err := env.LLM.Complete(cctx, compact.Prompt{System: fmt.Sprintf(createSystem, maxChars), User: compact.Data("conversation", text.String())})
	if errors.Is(err, compact.ErrBudget) {
		// The seed's energy budget: memory work defers until tomorrow's budget.
		env.Log.Info("token budget exhausted; record creation deferred", "app", app, "conversation", conv)
		return jobs.Result{}, nil
	}
	if err != nil {
		env.Log.Warn("record creation failed; the conversation is skipped, as the seed does", "app", app, "conversation", conv, "err", err)
		return jobs.Result{}, markSeen()
	}
	content := fitChars(strings.Join(strings.Fields(reply.Text), " "), maxChars)
	if content == "" || compact.CheckText([]byte(content)) != nil {
		return jobs.Result{}, markSeen()
	}
	db, err = open(ctx, env, root)
	if err != nil {
		return jobs.Result{}, err
	}
	defer db.Close()
	table := OptionsOf(env.Store).Table
	// The pending record names app and conversation, so a kill between the
	// insert and the journal update is settled by looking for the row.
	pendingData, _ := json.Marshal(rowData{Table: table, Row: Record{AppID: app, Content: content, SourceConversationID: conv}})
	rec := &state.Record{Store: env.Store.Name, Root: root.Path(), Rule: RuleCreate, Tokens: reply.Tokens, Outcome: state.Pending,
		Reason: "from conversation " + conv, AfterSHA: rewrite.Hash([]byte(content)), AfterSize: int64(len(content)), Data: pendingData}
	rec.RootDev, rec.RootIno = rootID(root)
	if _, err := env.DB.Append(ctx, rec); err != nil {
		return jobs.Result{}, err
	}
	id, err := db.Insert(ctx, Record{AppID: app, Content: content, SourceConversationID: conv})
	if err != nil {
		rec.Outcome, rec.Reason = state.Failed, err.Error()
		env.Logged(env.DB.Update(ctx, rec), "DB.Update")
		return jobs.Result{}, jobs.Retry(err)
	}
	rec.Target, rec.Outcome = fmt.Sprintf("%s/%s/%d", table, app, id), state.Done
	rec.Data, _ = json.Marshal(rowData{Table: table, Row: Record{ID: id, AppID: app, Content: content, SourceConversationID: conv}})
	if err := env.DB.Update(ctx, rec); err != nil {
		return jobs.Result{}, err
	}
	env.Log.Info("created app record from an ended conversation", "app", app, "conversation", conv, "record", id)
	return jobs.Result{}, markSeen()
}

// fitChars keeps whole sentences within n characters when it can.
func fitChars(s string, n int) string {
	if len([]rune(s)) <= n {
		return s
	}
	r := []rune(s)[:n]
	cut := string(r)
	if i := strings.LastIndexAny(cut, ".!?"); i > n/3 {
		return cut[:i+1]
	}
	return strings.TrimSpace(string(r[:n-1])) + "…"
}
