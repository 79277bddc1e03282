package e2e

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/klauspost/compress/zstd"
	_ "modernc.org/sqlite"
)

// openclawSchema is the part of OpenClaw 2026.9.6's agent database that
// memwatch reads, as its migrations create it (openclaw-agent-board-schema
// in the npm package: transcript_events, session_windows).
const openclawSchema = `
CREATE TABLE session_windows (
  session_id TEXT NOT NULL PRIMARY KEY,
  session_key TEXT NOT NULL,
  previous_session_id TEXT,
  created_at INTEGER NOT NULL,
  updated_at INTEGER NOT NULL
) STRICT;
CREATE TABLE transcript_events (
  session_id TEXT NOT NULL,
  seq INTEGER NOT NULL,
  event_json TEXT,
  created_at INTEGER NOT NULL,
  event_zstd BLOB,
  event_utf8_bytes INTEGER CHECK (event_utf8_bytes IS NULL OR event_utf8_bytes >= 0),
  navigation_json TEXT,
  PRIMARY KEY (session_id, seq),
  FOREIGN KEY (session_id) REFERENCES "session_windows"(session_id) ON DELETE CASCADE,
  CHECK ((event_json IS NOT NULL AND event_zstd IS NULL) OR (event_json IS NULL AND event_zstd IS NOT NULL AND event_utf8_bytes IS NOT NULL))
) STRICT;
PRAGMA journal_mode=WAL;
`

// TestOpenClawSQLiteTranscripts: OpenClaw since 2026.7.2 keeps transcripts
// as rows of its agent database. The preset reads them read-only, by row,
// while the agent keeps writing (WAL): every message is recallable once,
// with its role, tool calls and results included, compressed (cold) rows
// too; its cron sessions are left out; a citation shows the event.
func TestOpenClawSQLiteTranscripts(t *testing.T) {
	home := t.TempDir()
	dbPath := filepath.Join(home, ".openclaw/agents/main/agent/openclaw-agent.sqlite")
	os.MkdirAll(filepath.Dir(dbPath), 0o755)
	os.MkdirAll(filepath.Join(home, ".openclaw/workspace"), 0o755)
	os.WriteFile(filepath.Join(home, ".openclaw/workspace/MEMORY.md"), []byte("# MEMORY\n"), 0o644)
	db, err := sql.Open("sqlite", "file:"+dbPath+"?_pragma=busy_timeout(5000)")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	ctx := context.Background()
	if _, err := db.ExecContext(ctx, openclawSchema); err != nil {
		t.Fatal(err)
	}
	fixture, err := os.ReadFile(filepath.Join("..", "..", "session", "testdata", "agents", "openclaw.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	events := strings.Split(strings.TrimSpace(string(fixture)), "\n")
	enc, _ := zstd.NewWriter(nil)
	now := time.Now().UnixMilli()
	db.ExecContext(ctx, `INSERT INTO session_windows VALUES('s-main','agent:main:main',NULL,?,?), ('s-cron','agent:main:cron:nightly',NULL,?,?)`, now, now, now, now)
	insert := func(session string, seq int, event string, cold bool) {
		t.Helper()
		var err error
		if cold {
			_, err = db.ExecContext(ctx, `INSERT INTO transcript_events(session_id, seq, event_json, created_at, event_zstd, event_utf8_bytes, navigation_json) VALUES(?,?,NULL,?,?,?,'{}')`,
				session, seq, now, enc.EncodeAll([]byte(event), nil), len(event))
		} else {
			_, err = db.ExecContext(ctx, `INSERT INTO transcript_events(session_id, seq, event_json, created_at) VALUES(?,?,?,?)`, session, seq, event, now)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	// The first events went cold (compressed), the rest are hot.
	for i, e := range events {
		insert("s-main", i, e, i < 3)
	}
	insert("s-cron", 0, `{"type":"message","id":"x1","parentId":null,"message":{"role":"user","content":"cronsecretword nightly job"}}`, false)

	pol := filepath.Join(home, "policy.yaml")
	os.WriteFile(pol, []byte("version: 1\nstores:\n  - name: oc\n    preset: openclaw\n    settle: 50ms\n    paths: [\""+filepath.Join(home, ".openclaw")+"\"]\n"), 0o644)
	state := filepath.Join(home, "state")
	p := start(t, "--policy", pol, "--state-dir", state)
	p.waitLog("ready", 10*time.Second)

	recallJSON := func(query string) []struct{ Text, Citation string } {
		t.Helper()
		cmd := exec.Command(memwatchFast, "recall", "--policy", pol, "--all", "--limit", "20", "--json", query)
		cmd.Env = append(os.Environ(), "MEMWATCH_STATE_DIR="+state)
		out, err := cmd.Output()
		if exitCode(err) == 1 {
			err = nil // nothing found, as grep says it
		}
		var res []struct{ Text, Citation string }
		if err != nil || json.Unmarshal(out, &res) != nil {
			t.Fatalf("recall %q: %v\n%s", query, err, out)
		}
		return res
	}
	waitRecall := func(query string, n int) []struct{ Text, Citation string } {
		t.Helper()
		deadline := time.Now().Add(20 * time.Second)
		for {
			res := recallJSON(query)
			if len(res) >= n || time.Now().After(deadline) {
				return res
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	const db0 = "agents/main/agent/openclaw-agent.sqlite#s-main#L"
	for _, tt := range []struct{ query, cite, role string }{
		{"backup schedule", db0 + "3", "user:"},       // a cold (compressed) row
		{"memory_search", db0 + "4", "assistant:"},    // a tool call
		{"to the NAS", db0 + "5", "tool:"},            // its result
		{"Nightly at 02:00", db0 + "6", "assistant:"}, // hot row
	} {
		res := waitRecall(tt.query, 1)
		found := 0
		for _, r := range res {
			if strings.HasSuffix(r.Citation, tt.cite) && strings.HasPrefix(r.Text, tt.role) {
				found++
			}
		}
		if found != 1 {
			t.Errorf("recall %q: got %+v, want one hit %s labelled %s", tt.query, res, tt.cite, tt.role)
		}
	}
	// The agent goes on: new rows are new messages, found once.
	insert("s-main", len(events), `{"type":"message","id":"m9","parentId":"m8","message":{"role":"user","content":[{"type":"text","text":"move the backups to 03:30 please"}]}}`, false)
	db.ExecContext(ctx, `UPDATE session_windows SET updated_at=? WHERE session_id='s-main'`, now+1)
	// (A question of several words is ranked: the new row first, once,
	// then the rows around it.)
	res := recallJSON("backups to 03:30")
	for deadline := time.Now().Add(20 * time.Second); countCited(res, db0+"9") == 0 && time.Now().Before(deadline); {
		time.Sleep(100 * time.Millisecond)
		res = recallJSON("backups to 03:30")
	}
	if len(res) == 0 || !strings.HasSuffix(res[0].Citation, db0+"9") || countCited(res, db0+"9") != 1 {
		t.Errorf("a row added while the daemon runs: got %+v, want it first, once", res)
	}
	time.Sleep(300 * time.Millisecond)
	var cites []string
	for _, r := range recallJSON("backup") {
		cites = append(cites, r.Citation[strings.LastIndex(r.Citation, db0)+len(db0):])
	}
	if strings.Join(cites, " ") != "9 5 4 3" {
		t.Errorf("recall backup: got lines %v, want 9 5 4 3 (each message once, newest first)", cites)
	}
	if res := recallJSON("cronsecretword"); len(res) != 0 {
		t.Errorf("OpenClaw's cron session was read: %+v", res)
	}
	// The citation shows the event.
	cmd := exec.Command(memwatchFast, "show", "--policy", pol, "--dir", filepath.Join(home, ".openclaw"), db0+"3")
	cmd.Env = append(os.Environ(), "MEMWATCH_STATE_DIR="+state)
	if out, err := cmd.CombinedOutput(); err != nil || !strings.Contains(string(out), "backup schedule") {
		t.Errorf("show %s3: (%v)\n%s", db0, err, out)
	}
	// memwatch never wrote to the agent's database.
	var n int
	db.QueryRowContext(ctx, `SELECT COUNT(*) FROM transcript_events`).Scan(&n)
	if n != len(events)+2 {
		t.Errorf("the agent's database holds %d events, want %d", n, len(events)+2)
	}
	p.stop(30 * time.Second)
}

// TestOpenClawWholeFileRewrites: OpenClaw up to 2026.7.1 rewrites its whole
// transcript in place (O_TRUNC, then every line) on every turn, while it
// keeps a run trace beside it. With consolidation on, the daily note gets
// each message once whatever point of a rewrite memwatch sees; no tool
// input lands in the note, so the agent's own edit of its note (whose old
// text must occur once) still applies; the trace is never read.
func TestOpenClawWholeFileRewrites(t *testing.T) {
	home := t.TempDir()
	oc := filepath.Join(home, ".openclaw")
	sess := filepath.Join(oc, "agents/main/sessions/9f3a.jsonl")
	trace := filepath.Join(oc, "agents/main/sessions/9f3a.trajectory.jsonl")
	note := filepath.Join(oc, "workspace/memory/2026-03-02.md")
	os.MkdirAll(filepath.Dir(sess), 0o755)
	os.MkdirAll(filepath.Dir(note), 0o755)
	own := "- backups run nightly at 02:00 to the NAS\n"
	os.WriteFile(note, []byte(own), 0o644)
	pol := filepath.Join(home, "policy.yaml")
	os.WriteFile(pol, []byte("version: 1\nstores:\n  - name: oc\n    preset: openclaw\n    consolidate: true\n    settle: 20ms\n    session_idle: 1s\n    paths: [\""+oc+"\"]\n"), 0o644)
	state := filepath.Join(home, "state")
	p := start(t, "--policy", pol, "--state-dir", state, "--log-level", "debug")
	p.waitLog("ready", 10*time.Second)

	at := time.Date(2026, 3, 2, 12, 0, 0, 0, time.Local)
	lines := []string{`{"type":"session","version":3,"id":"9f3a","timestamp":"` + at.UTC().Format(time.RFC3339) + `","cwd":"/w"}`}
	const turns = 12
	for turn := 0; turn < turns; turn++ {
		ts := at.Add(time.Duration(turn) * time.Minute).UnixMilli()
		lines = append(lines,
			fmt.Sprintf(`{"type":"message","id":"u%d","parentId":"a%d","message":{"role":"user","content":[{"type":"text","text":"question number %d about the garden"}],"timestamp":%d}}`, turn, turn-1, turn, ts),
			fmt.Sprintf(`{"type":"message","id":"a%d","parentId":"u%d","message":{"role":"assistant","content":[{"type":"toolCall","id":"e%d","name":"edit","arguments":{"path":"memory/2026-03-02.md","oldText":"backups run nightly at 02:00 to the NAS","newText":"backups run nightly at 02:00 to the NAS"}},{"type":"text","text":"answer number %d about the garden"}],"timestamp":%d}}`, turn, turn, turn, turn, ts+1))
		// The rewrite: truncated in place, then written in pieces more
		// slowly than the store's settle time, so memwatch looks at
		// points in the middle.
		f, err := os.OpenFile(sess, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
		if err != nil {
			t.Fatal(err)
		}
		whole := strings.Join(lines, "\n") + "\n"
		for i := 0; i < len(whole); i += 700 {
			f.WriteString(whole[i:min(i+700, len(whole))])
			time.Sleep(30 * time.Millisecond)
		}
		f.Close()
		tf, _ := os.OpenFile(trace, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
		fmt.Fprintf(tf, `{"type":"message","message":{"role":"user","content":"tracedword %d %s"}}`+"\n", turn, strings.Repeat("x", 4000))
		tf.Close()
		time.Sleep(40 * time.Millisecond)
	}
	// Consolidated once the session is idle: every message once.
	deadline := time.Now().Add(30 * time.Second)
	var got string
	for time.Now().Before(deadline) {
		got = readFile(t, note)
		if strings.Contains(got, fmt.Sprintf("question number %d ", turns-1)) {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	time.Sleep(2 * time.Second) // any second consolidation would come now
	got = readFile(t, note)
	for turn := 0; turn < turns; turn++ {
		for _, m := range []string{"question number %d about", "answer number %d about"} {
			if n := strings.Count(got, fmt.Sprintf(m, turn)); n > 1 {
				t.Errorf("%q is %d times in the daily note:\n%s", fmt.Sprintf(m, turn), n, got)
			}
		}
	}
	if !strings.Contains(got, fmt.Sprintf("question number %d about", turns-1)) {
		t.Errorf("the daily note lacks the last turn:\n%s", got)
	}
	// The agent's edit of its own line: the old text occurs once.
	if n := strings.Count(got, "backups run nightly at 02:00 to the NAS"); n != 1 {
		t.Errorf("the agent's edit would fail: its old text occurs %d times in the note:\n%s", n, got)
	}
	edited := strings.Replace(got, "backups run nightly at 02:00 to the NAS", "backups run nightly at 03:30 to the NAS", 1)
	os.WriteFile(note, []byte(edited), 0o644)
	// Recall: each message once; the trace never.
	cmd := exec.Command(memwatchFast, "recall", "--policy", pol, "--all", "--limit", "100", "--scope", "messages", "--json", "garden")
	cmd.Env = append(os.Environ(), "MEMWATCH_STATE_DIR="+state)
	out, err := cmd.Output()
	if exitCode(err) == 1 {
		err = nil // nothing found, as grep says it
	}
	var res []struct{ Text string }
	if err != nil || json.Unmarshal(out, &res) != nil || len(res) != 2*turns {
		t.Errorf("recall garden: got %d hits (%v), want %d, each message once", len(res), err, 2*turns)
	}
	cmd = exec.Command(memwatchFast, "recall", "--policy", pol, "--all", "--json", "tracedword")
	cmd.Env = append(os.Environ(), "MEMWATCH_STATE_DIR="+state)
	if out, _ := cmd.Output(); strings.Contains(string(out), "tracedword") {
		t.Errorf("the trajectory trace was read:\n%s", out)
	}
	p.stop(30 * time.Second)
	// Seen once: the spool holds each message once, however many
	// rewrites it saw half written (ids alone would hide a duplicate
	// from recall and the note, not from the spool).
	sp, err := sql.Open("sqlite", "file:"+filepath.Join(state, "spool.db")+"?mode=ro")
	if err != nil {
		t.Fatal(err)
	}
	defer sp.Close()
	var msgs, bytes int64
	sp.QueryRow(`SELECT COUNT(*), COALESCE(SUM(size),0) FROM lines WHERE msg=1`).Scan(&msgs, &bytes)
	if msgs != 2*turns {
		t.Errorf("the spool holds %d messages, want %d: a rewrite seen half written was taken for new messages", msgs, 2*turns)
	}
	t.Logf("%d messages in the spool, %d bytes of message lines for a %d-byte transcript (and a %d-byte trace not read)", msgs, bytes, len(strings.Join(lines, "\n")), turns*4030)
}

// countCited counts the results citing cite.
func countCited(res []struct{ Text, Citation string }, cite string) int {
	n := 0
	for _, r := range res {
		if strings.HasSuffix(r.Citation, cite) {
			n++
		}
	}
	return n
}
