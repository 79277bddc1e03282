package apprecords_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	_ "modernc.org/sqlite"

	"github.com/memwatch/memwatch/compact/llmtest"
	"github.com/memwatch/memwatch/confine"
	"github.com/memwatch/memwatch/daemon/daemontest"
	"github.com/memwatch/memwatch/layout/apprecords"
	"github.com/memwatch/memwatch/state"
	"github.com/memwatch/memwatch/undo"
)

// appDB creates the application's database with the seed's schema, in WAL
// mode as a real application would run it.
func appDB(t *testing.T, dir string, records map[string]int) string {
	t.Helper()
	path := filepath.Join(dir, "app.db")
	db, err := sql.Open("sqlite", "file:"+path+"?_pragma=busy_timeout(5000)&_pragma=journal_mode(WAL)")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if _, err := db.Exec(`CREATE TABLE app_memories (id INTEGER PRIMARY KEY AUTOINCREMENT, app_id TEXT NOT NULL, content TEXT NOT NULL,
		created_at DATETIME DEFAULT CURRENT_TIMESTAMP, updated_at DATETIME DEFAULT CURRENT_TIMESTAMP, source_conversation_id TEXT, metadata TEXT)`); err != nil {
		t.Fatal(err)
	}
	for _, app := range []string{"A", "B"} {
		for i := 1; i <= records[app]; i++ {
			at := time.Date(2025, 10, i, 12, 0, 0, 0, time.UTC).Format("2006-01-02 15:04:05")
			db.Exec(`INSERT INTO app_memories (app_id, content, created_at, updated_at) VALUES (?, ?, ?, ?)`, app, fmt.Sprintf("%s memory %d", app, i), at, at)
		}
	}
	return path
}

func count(t *testing.T, path, app string) int {
	db, _ := sql.Open("sqlite", "file:"+path+"?_pragma=busy_timeout(5000)")
	defer db.Close()
	var n int
	db.QueryRow(`SELECT COUNT(*) FROM app_memories WHERE app_id = ?`, app).Scan(&n)
	return n
}

func idOf(t *testing.T, path, content string) int64 {
	db, _ := sql.Open("sqlite", "file:"+path+"?_pragma=busy_timeout(5000)")
	defer db.Close()
	var id int64
	db.QueryRow(`SELECT id FROM app_memories WHERE content = ?`, content).Scan(&id)
	return id
}

type running struct {
	stop     func()
	stateDir string
	sock     string
}

func run(t *testing.T, src string) *running {
	d := daemontest.Run(t, src, "")
	return &running{stop: d.Stop, stateDir: d.StateDir, sock: d.Socket}
}

func policyFor(db, llm, extra string) string {
	compactor := "heuristic"
	if llm != "" {
		compactor = "llm"
		llm = fmt.Sprintf("llm:\n  default:\n    base_url: %s\n    model: fake\n    timeout: 5s\n", llm)
	}
	return fmt.Sprintf("version: 1\n%sstores:\n  - name: records\n    layout: app-records\n    paths: [%q]\n    compactor: %s\n    settle: 50ms\n%s", llm, db, compactor, extra)
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	daemontest.WaitFor(t, what, 8*time.Second, cond)
}

func journal(t *testing.T, stateDir string, rule string) []state.Record {
	db, err := state.Open(context.Background(), stateDir)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	recs, _ := db.Journal(context.Background(), state.Filter{Rule: rule})
	return recs
}

func TestLimitTwoDecisionsOtherAppUntouched(t *testing.T) {
	dir := t.TempDir()
	path := appDB(t, dir, map[string]int{"A": 12, "B": 3})
	idA3, idA5 := idOf(t, path, "A memory 3"), idOf(t, path, "A memory 5")
	srv := llmtest.New(t,
		llmtest.Step{Content: fmt.Sprintf(`{"action":"delete","targetMemoryId":%d,"reason":"redundant"}`, idA3)},
		llmtest.Step{Content: fmt.Sprintf("```json\n{\"action\":\"edit\",\"targetMemoryId\":%d,\"newContent\":\"A memories 5 and 6, merged\",\"reason\":\"merge\"}\n```", idA5)},
	)
	r := run(t, policyFor(path, srv.BaseURL(), ""))
	waitFor(t, "A at the limit", func() bool { return count(t, path, "A") == 10 })
	time.Sleep(200 * time.Millisecond)
	if srv.Calls() != 2 || count(t, path, "B") != 3 {
		t.Errorf("calls %d, B has %d; want 2 decisions and B untouched", srv.Calls(), count(t, path, "B"))
	}
	if idOf(t, path, "A memories 5 and 6, merged") != idA5 {
		t.Error("the edit decision was not applied")
	}
	if idOf(t, path, "A memory 12") != 0 {
		t.Error("the edit did not drop the merged (newest) record")
	}
	r.stop()
	del := journal(t, r.stateDir, apprecords.RuleDelete)
	if len(del) != 2 || !strings.Contains(string(del[1].Data), `"content":"A memory 3"`) || !strings.Contains(string(del[0].Data), `"content":"A memory 12"`) {
		t.Errorf("deletes not journaled with the full old rows: %+v", del)
	}
	edit := journal(t, r.stateDir, apprecords.RuleEdit)
	if len(edit) != 1 || !strings.Contains(string(edit[0].Data), `"content":"A memory 5"`) {
		t.Errorf("edit not journaled with the old content: %+v", edit)
	}
}

func TestDecisionNamingAnotherAppFallsBackToFIFO(t *testing.T) {
	dir := t.TempDir()
	path := appDB(t, dir, map[string]int{"A": 11, "B": 3})
	idB1 := idOf(t, path, "B memory 1")
	srv := llmtest.New(t, llmtest.Step{Content: fmt.Sprintf(`{"action":"delete","targetMemoryId":%d,"reason":"try to delete B"}`, idB1)})
	r := run(t, policyFor(path, srv.BaseURL(), ""))
	waitFor(t, "A at the limit", func() bool { return count(t, path, "A") == 10 })
	if count(t, path, "B") != 3 || idOf(t, path, "B memory 1") == 0 {
		t.Fatal("app B lost a record to app A's compaction")
	}
	if idOf(t, path, "A memory 1") != 0 {
		t.Error("FIFO should have deleted A's oldest record")
	}
	r.stop()
	del := journal(t, r.stateDir, apprecords.RuleDelete)
	if len(del) != 1 || !strings.Contains(del[0].Reason, "is not one of this app's records") {
		t.Errorf("journal = %+v; want the FIFO fallback and why", del)
	}
}

// The application keeps writing while memwatch compacts: no write of the
// application fails with "database is locked".
func TestConcurrentApplicationWrites(t *testing.T) {
	dir := t.TempDir()
	path := appDB(t, dir, map[string]int{"A": 30})
	srv := llmtest.New(t, llmtest.Step{Content: `{"action":"delete","targetMemoryId":0}`, Delay: 20 * time.Millisecond})
	app, _ := sql.Open("sqlite", "file:"+path+"?_pragma=busy_timeout(2000)&_pragma=journal_mode(WAL)")
	defer app.Close()
	run(t, policyFor(path, srv.BaseURL(), ""))
	var failures []error
	deadline := time.Now().Add(2 * time.Second)
	n := 0
	for time.Now().Before(deadline) {
		if _, err := app.Exec(`INSERT INTO app_memories (app_id, content) VALUES ('C', ?)`, fmt.Sprint("app write ", n)); err != nil {
			failures = append(failures, err)
		}
		if _, err := app.Exec(`UPDATE app_memories SET updated_at = CURRENT_TIMESTAMP WHERE app_id = 'C' AND id = (SELECT MAX(id) FROM app_memories)`); err != nil {
			failures = append(failures, err)
		}
		n++
		time.Sleep(40 * time.Millisecond)
	}
	waitFor(t, "A and C at the limit", func() bool { return count(t, path, "A") == 10 && count(t, path, "C") == 10 })
	if len(failures) > 0 {
		t.Errorf("%d of the application's %d writes failed, first: %v", len(failures), 2*n, failures[0])
	}
	t.Logf("%d application writes while memwatch compacted", 2*n)
}

func TestAdminAPIAndUndo(t *testing.T) {
	dir := t.TempDir()
	path := appDB(t, dir, map[string]int{"A": 3, "B": 2})
	r := run(t, policyFor(path, "", ""))
	c := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "unix", r.sock)
	}}}
	do := func(method, url string) (int, map[string]any) {
		req, _ := http.NewRequest(method, "http://memwatch"+url, nil)
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var m map[string]any
		json.NewDecoder(resp.Body).Decode(&m)
		return resp.StatusCode, m
	}
	code, body := do("GET", "/apps/A/memories")
	if code != 200 || len(body["memories"].([]any)) != 3 {
		t.Fatalf("list: %d %v", code, body)
	}
	first := body["memories"].([]any)[0].(map[string]any)
	for _, k := range []string{"id", "content", "createdAt", "updatedAt"} {
		if _, ok := first[k]; !ok {
			t.Errorf("memory lacks %s: %v", k, first)
		}
	}
	idA2 := idOf(t, path, "A memory 2")
	if code, body := do("DELETE", fmt.Sprintf("/v1/stores/records/apps/A/memories/%d", idA2)); code != 200 || body["success"] != true {
		t.Errorf("delete: %d %v", code, body)
	}
	if code, _ := do("DELETE", fmt.Sprintf("/apps/B/memories/%d", idA2)); code != 404 {
		t.Errorf("deleting A's record through app B = %d, want 404", code)
	}
	if code, body := do("DELETE", "/apps/B/memories"); code != 200 || body["deletedCount"] != 2.0 {
		t.Errorf("purge: %d %v", code, body)
	}
	if count(t, path, "A") != 2 || count(t, path, "B") != 0 {
		t.Fatalf("after delete and purge: A %d, B %d", count(t, path, "A"), count(t, path, "B"))
	}
	// Undo the single delete through the running daemon.
	recs := journal(t, r.stateDir, apprecords.RuleDelete)
	var id int64
	for _, rec := range recs {
		if strings.HasSuffix(rec.Target, fmt.Sprintf("/A/%d", idA2)) {
			id = rec.ID
		}
	}
	if code, body := do("POST", fmt.Sprintf("/v1/undo/%d", id)); code != 200 {
		t.Fatalf("undo: %d %v", code, body)
	}
	if idOf(t, path, "A memory 2") != idA2 {
		t.Error("undo did not restore the deleted row with its id")
	}
}

func TestCreateFromEndedConversation(t *testing.T) {
	dir := t.TempDir()
	path := appDB(t, dir, map[string]int{"A": 1})
	// A conversation that ended before memwatch watched: app-records makes no
	// memory of it.
	old := filepath.Join(dir, "conv", "A", "c-1.jsonl")
	os.MkdirAll(filepath.Dir(old), 0o755)
	os.WriteFile(old, []byte(`{"role":"user","content":"I used to like mornings."}`+"\n"), 0o644)
	hourAgo := time.Now().Add(-time.Hour)
	os.Chtimes(old, hourAgo, hourAgo)
	srv := llmtest.New(t, llmtest.Step{Content: "User prefers meetings after 2pm on weekdays. They confirmed it twice."})
	r := run(t, policyFor(path, srv.BaseURL(), fmt.Sprintf("    conversations: %q\n    conversation_idle: 1s\n", filepath.Join(dir, "conv", "{app}", "*.jsonl"))))
	time.Sleep(300 * time.Millisecond)
	conv := filepath.Join(dir, "conv", "A", "c-42.jsonl")
	os.WriteFile(conv, []byte(`{"role":"user","content":"I prefer meetings after 2pm."}`+"\n"+`{"role":"assistant","content":"Noted."}`+"\n"), 0o644)
	waitFor(t, "the record", func() bool {
		return idOf(t, path, "User prefers meetings after 2pm on weekdays. They confirmed it twice.") != 0
	})
	time.Sleep(1500 * time.Millisecond) // more ticks: no second record
	r.stop()
	if count(t, path, "A") != 2 || srv.Calls() != 1 {
		t.Errorf("A has %d records after %d calls; want exactly one created, none for the old conversation", count(t, path, "A"), srv.Calls())
	}
	sdb, _ := sql.Open("sqlite", "file:"+path)
	defer sdb.Close()
	var src, created string
	sdb.QueryRow(`SELECT source_conversation_id, created_at FROM app_memories WHERE content LIKE 'User prefers%'`).Scan(&src, &created)
	if src != "c-42" {
		t.Errorf("source_conversation_id = %q, want c-42 (the id, no .jsonl)", src)
	}
	db, err := apprecords.OpenPath(context.Background(), path, "app_memories", false)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	rs, _ := db.Records(context.Background(), "A")
	for _, rec := range rs {
		if _, err := time.Parse(time.RFC3339, rec.CreatedAt); err != nil {
			t.Errorf("createdAt %q is not ISO 8601 (stored %q)", rec.CreatedAt, created)
		}
	}
}

func TestMissingTableIsUnhealthyNotFatal(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "empty.db")
	db, _ := sql.Open("sqlite", "file:"+path)
	db.Exec(`CREATE TABLE other (x)`)
	db.Close()
	r := run(t, policyFor(path, "", ""))
	c := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "unix", r.sock)
	}}}
	var st struct{ Warnings []string }
	waitFor(t, "the unhealthy-store warning in status", func() bool {
		resp, err := c.Get("http://memwatch/v1/status")
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		json.NewDecoder(resp.Body).Decode(&st)
		return len(st.Warnings) == 1 && strings.Contains(st.Warnings[0], "has no table app_memories")
	})
	// The daemon stays up; cleanup checks that it stops cleanly.
}

func TestContextFormat(t *testing.T) {
	rs := []apprecords.Record{
		{ID: 1, Content: "User prefers meetings after 2pm on weekdays.", CreatedAt: "2025-10-10 14:30:00", UpdatedAt: "2025-10-10 14:30:00"},
		{ID: 2, Content: "User is working on a project called \"Phoenix\" with deadline Nov 1.", CreatedAt: "2025-10-09 09:00:00", UpdatedAt: "2025-10-11 09:00:00"},
	}
	want := "(memories for app: calendar)\nThe following are memories from previous conversations with this app:\n\n1. [Created: 2025-10-09] User is working on a project called \"Phoenix\" with deadline Nov 1.\n2. [Created: 2025-10-10] User prefers meetings after 2pm on weekdays.\n\nUse these memories to provide context-aware responses.\n"
	if got := apprecords.Context("calendar", rs, 10); got != want {
		t.Errorf("context:\n%s\nwant:\n%s", got, want)
	}
}

// A row change left pending by a killed memwatch is settled by looking at
// the row, so the journal agrees with the database.
func TestResolvePending(t *testing.T) {
	dir := t.TempDir()
	path := appDB(t, dir, map[string]int{"A": 2})
	id1, id2 := idOf(t, path, "A memory 1"), idOf(t, path, "A memory 2")
	ctx := context.Background()
	db, _ := apprecords.OpenPath(ctx, path, "app_memories", false)
	r2, _, _ := db.Get(ctx, id2)
	db.Delete(ctx, r2) // the delete of record 2 committed before the kill
	db.Close()
	mk := func(id int64, content string) *state.Record {
		data, _ := json.Marshal(map[string]any{"table": "app_memories", "row": map[string]any{"id": id, "appId": "A", "content": content}})
		return &state.Record{Root: path, Rule: apprecords.RuleDelete, Target: fmt.Sprintf("app_memories/A/%d", id), Outcome: state.Pending, Data: data}
	}
	if out, _ := apprecords.Resolve(ctx, mk(id1, "A memory 1"), nil); out != state.Failed {
		t.Errorf("row still there: outcome %s, want failed", out)
	}
	if out, _ := apprecords.Resolve(ctx, mk(id2, "A memory 2"), nil); out != state.Done {
		t.Errorf("row gone: outcome %s, want done", out)
	}
	// A creation killed after the insert is found by its conversation.
	db, _ = apprecords.OpenPath(ctx, path, "app_memories", false)
	db.Insert(ctx, apprecords.Record{AppID: "A", Content: "from c-7", SourceConversationID: "c-7.jsonl"})
	db.Close()
	create := func(conv string) *state.Record {
		data, _ := json.Marshal(map[string]any{"table": "app_memories", "row": map[string]any{"appId": "A", "content": "x", "sourceConversationId": conv}})
		return &state.Record{Root: path, Rule: apprecords.RuleCreate, Outcome: state.Pending, Data: data}
	}
	if out, _ := apprecords.Resolve(ctx, create("c-7.jsonl"), nil); out != state.Done {
		t.Errorf("created row present: outcome %s, want done", out)
	}
	if out, _ := apprecords.Resolve(ctx, create("c-8.jsonl"), nil); out != state.Failed {
		t.Errorf("no row: outcome %s, want failed", out)
	}
}

// TestCreateTable: create_table makes the seed's table in a new database
// (CURRENT_TIMESTAMP and all), and records go in and come out.
func TestCreateTable(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "new.db")
	os.WriteFile(path, nil, 0o644) // the app's new, empty database: the root
	for _, table := range []string{"app_memories", "Memories_T_2"} {
		db, err := apprecords.OpenPath(ctx, path, table, true)
		if err != nil {
			t.Fatalf("create table %s: %v", table, err)
		}
		if _, err := db.Insert(ctx, apprecords.Record{AppID: "cal", Content: "likes tea"}); err != nil {
			t.Fatalf("insert into %s: %v", table, err)
		}
		rs, err := db.Records(ctx, "cal")
		if err != nil || len(rs) != 1 || rs[0].Content != "likes tea" || rs[0].CreatedAt == "" {
			t.Errorf("records of %s: %+v, %v", table, rs, err)
		}
		db.Close()
	}
}

// TestUndoRestoresTheWholeRow: a deleted record comes back with every
// column as it was stored, extra columns and timestamps included.
func TestUndoRestoresTheWholeRow(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	path := filepath.Join(dir, "app.db")
	sdb, err := sql.Open("sqlite", "file:"+path)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := sdb.Exec(`CREATE TABLE app_memories (id INTEGER PRIMARY KEY AUTOINCREMENT, app_id TEXT NOT NULL, content TEXT NOT NULL,
		created_at DATETIME DEFAULT CURRENT_TIMESTAMP, updated_at DATETIME DEFAULT CURRENT_TIMESTAMP, source_conversation_id TEXT, metadata TEXT,
		importance_extra INTEGER, score REAL, blob_extra BLOB)`); err != nil {
		t.Fatal(err)
	}
	if _, err := sdb.Exec(`INSERT INTO app_memories (app_id, content, created_at, updated_at, source_conversation_id, metadata, importance_extra, score, blob_extra)
		VALUES ('cal', 'it''s tea, not coffee', '2025-09-01 09:00:00', '2025-09-02T10:00:00Z', 'conv-1', '{"k":1}', 99, 0.25, X'00ff')`); err != nil {
		t.Fatal(err)
	}
	row := func() string {
		var s string
		sdb.QueryRow(`SELECT quote(id)||quote(app_id)||quote(content)||quote(created_at)||quote(updated_at)||quote(source_conversation_id)||quote(metadata)||quote(importance_extra)||quote(score)||quote(blob_extra) FROM app_memories WHERE id = 1`).Scan(&s)
		return s
	}
	before := row()
	journal, err := state.Open(ctx, filepath.Join(dir, "state"))
	if err != nil {
		t.Fatal(err)
	}
	defer journal.Close()
	froot, err := confine.OpenFile(path, confine.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer froot.Close()
	if n, err := apprecords.Remove(ctx, journal, "records", froot, "app_memories", "cal", []int64{1}, "test"); n != 1 || err != nil {
		t.Fatalf("remove: %d, %v", n, err)
	}
	if row() != "" {
		t.Fatal("the record is still there")
	}
	recs, _ := journal.Journal(ctx, state.Filter{Rule: apprecords.RuleDelete})
	if _, err := apprecords.Undo(ctx, journal, recs[0], false, nil); err != nil {
		t.Fatal(err)
	}
	if got := row(); got != before {
		t.Errorf("restored row:\n got %s\nwant %s", got, before)
	}
}

// TestUndoOfALimitDeletionSticks: a record the limit deleted and an undo
// restored stays, over the limit, until the app gets a new record.
func TestUndoOfALimitDeletionSticks(t *testing.T) {
	dir := t.TempDir()
	path := appDB(t, dir, map[string]int{"A": 11})
	r := run(t, policyFor(path, "", ""))
	waitFor(t, "A at the limit", func() bool { return count(t, path, "A") == 10 })
	recs := journal(t, r.stateDir, apprecords.RuleDelete)
	if len(recs) != 1 {
		t.Fatalf("limit deletions: %d, want 1", len(recs))
	}
	// The app waits for the daemon's write as a real one does (busy
	// timeout): an insert refused at once left the limit nothing to do.
	sdb, _ := sql.Open("sqlite", "file:"+path+"?_pragma=busy_timeout(10000)")
	defer sdb.Close()
	c := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "unix", r.sock)
	}}}
	resp, err := c.Post(fmt.Sprintf("http://memwatch/v1/undo/%d", recs[0].ID), "application/json", nil)
	if err != nil {
		t.Fatal(err)
	}
	var res undo.Result
	json.NewDecoder(resp.Body).Decode(&res)
	resp.Body.Close()
	if resp.StatusCode != 200 || res.Journal == 0 {
		t.Fatalf("undo: %s %+v (want the undo's journal record)", resp.Status, res)
	}
	time.Sleep(1500 * time.Millisecond) // rule evaluations come and go
	if n := count(t, path, "A"); n != 11 {
		t.Fatalf("after the undo: A has %d records, want the restored 11", n)
	}
	// A new record: the limit applies again.
	if _, err := sdb.Exec(`INSERT INTO app_memories (app_id, content) VALUES ('A', 'a new one')`); err != nil {
		t.Fatalf("the app's new record: %v", err)
	}
	waitFor(t, "A back at the limit", func() bool { return count(t, path, "A") == 10 })
}

// TestLockedDatabaseIsRetried: while the app holds an exclusive lock the
// evaluation is retried with backoff, and the limit applies soon after the
// lock is released, with no write to wake memwatch up.
func TestLockedDatabaseIsRetried(t *testing.T) {
	dir := t.TempDir()
	path := appDB(t, dir, map[string]int{"A": 12})
	lock, err := sql.Open("sqlite", "file:"+path+"?_pragma=journal_mode(DELETE)")
	if err != nil {
		t.Fatal(err)
	}
	defer lock.Close()
	conn, err := lock.Conn(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := conn.ExecContext(context.Background(), "BEGIN EXCLUSIVE"); err != nil {
		t.Fatal(err)
	}
	run(t, policyFor(path, "", ""))
	time.Sleep(6 * time.Second) // longer than SQLite's busy timeout of 5 s
	conn.ExecContext(context.Background(), "COMMIT")
	conn.Close()
	deadline := time.Now().Add(30 * time.Second)
	for count(t, path, "A") != 10 {
		if time.Now().After(deadline) {
			t.Fatalf("A still has %d records 30 s after the lock was released", count(t, path, "A"))
		}
		time.Sleep(100 * time.Millisecond)
	}
}
