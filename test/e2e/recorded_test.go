package e2e

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/memwatch/memwatch/session"
	"github.com/memwatch/memwatch/spool"
	"github.com/memwatch/memwatch/test/fixtures/dbrows/rows"
	"github.com/memwatch/memwatch/transcripts"
)

// recording is what `make fixtures` kept of one real agent program's run
// (session/testdata/agents/<agent>-<version>, see its SOURCES.md): the
// session file after each turn and how the agent wrote it, or for OpenClaw
// 2026.7.2 on, the rows of its database after each turn.
type recording struct {
	name  string // claude-code-2.1.197
	where string // the file, relative to the agent's home
	dir   string
	turns int
	rows  bool // an OpenClaw database: turn-N.rows.jsonl and schema.sql
	// tables: a database's tables (test/fixtures/dbrows: turn-N.tables.jsonl
	// and schema.sql), written back row by row.
	tables bool
	// doc: a JSON document the agent writes whole (turn-N.json).
	doc bool
}

// transcriptRow is a row of OpenClaw's transcript_events as
// test/fixtures/openclawrows keeps it.
type transcriptRow struct {
	SessionID  string `json:"session_id"`
	SessionKey string `json:"session_key"`
	Seq        int64  `json:"seq"`
	CreatedAt  int64  `json:"created_at"`
	EventJSON  string `json:"event_json"`
	EventZstd  []byte `json:"event_zstd"`
	Bytes      int64  `json:"event_utf8_bytes"`
}

func recordings(t *testing.T) []recording {
	t.Helper()
	wheres, _ := filepath.Glob(filepath.Join("..", "..", "session", "testdata", "agents", "*", "where"))
	var out []recording
	only := os.Getenv("MEMWATCH_RECORDED") // names holding this, to debug one
	for _, w := range wheres {
		dir := filepath.Dir(w)
		if !strings.Contains(filepath.Base(dir), only) {
			continue
		}
		r := recording{name: filepath.Base(dir), dir: dir, where: strings.TrimSpace(readFile(t, w))}
		for n := 1; ; n++ {
			if _, err := os.Stat(filepath.Join(dir, fmt.Sprintf("turn-%d.jsonl", n))); err == nil {
				r.turns = n
				continue
			}
			if _, err := os.Stat(filepath.Join(dir, fmt.Sprintf("turn-%d.rows.jsonl", n))); err == nil {
				r.turns, r.rows = n, true
				continue
			}
			if _, err := os.Stat(filepath.Join(dir, fmt.Sprintf("turn-%d.tables.jsonl", n))); err == nil {
				r.turns, r.tables = n, true
				continue
			}
			if _, err := os.Stat(filepath.Join(dir, fmt.Sprintf("turn-%d.json", n))); err == nil {
				r.turns, r.doc = n, true
				continue
			}
			break
		}
		if r.turns == 0 {
			t.Fatalf("%s: no turns", dir)
		}
		out = append(out, r)
	}
	if len(out) < 12 && only == "" {
		t.Fatalf("recordings: got %d, want Claude Code, Codex, Gemini CLI, Qwen Code, nanobot, both OpenClaw formats, opencode, Kilo Code, Crush, Continue CLI and Copilot CLI", len(out))
	}
	return out
}

// lines is the recording's session after turn n: its lines, or the events
// of its rows.
func (r recording) lines(t *testing.T, n int) [][]byte {
	t.Helper()
	if r.tables {
		// What memwatch reads of the database after turn n.
		db, err := sql.Open("sqlite", "file:"+filepath.Join(t.TempDir(), "db.sqlite"))
		if err != nil {
			t.Fatal(err)
		}
		defer db.Close()
		if _, err := db.Exec(readFile(t, filepath.Join(r.dir, "schema.sql"))); err != nil {
			t.Fatal(err)
		}
		for _, row := range r.tableRows(t, n) {
			if err := row.Insert(db); err != nil {
				t.Fatal(err)
			}
		}
		ctx := context.Background()
		f, err := transcripts.Detect(ctx, db)
		if err != nil || f == nil {
			t.Fatalf("%s: no database memwatch reads (%v)", r.name, err)
		}
		ss, _ := f.Sessions(ctx, db)
		var out [][]byte
		for _, s := range ss {
			var after int64
			for !s.Internal {
				recs, err := f.Records(ctx, db, s.ID, after, transcripts.Bounds{})
				if err != nil {
					t.Fatal(err)
				}
				if len(recs) == 0 {
					break
				}
				for _, rec := range recs {
					out = append(out, rec.Data)
				}
				after = recs[len(recs)-1].Key
			}
		}
		return out
	}
	if r.doc {
		// What memwatch reads of the document after turn n.
		var st transcripts.DocState
		var out [][]byte
		var after int64
		for k := 1; k <= n; k++ {
			f, id, msgs := transcripts.ParseDocument([]byte(readFile(t, filepath.Join(r.dir, fmt.Sprintf("turn-%d.json", k)))))
			if f == nil {
				t.Fatalf("%s turn %d: no document memwatch reads", r.name, k)
			}
			// With a time, as memwatch gives each message the document's
			// (which has none of its own).
			var recs []spool.Record
			recs, st = st.Changes(id, msgs, after, time.Date(2026, 11, 25, 12, 0, 0, 0, time.UTC))
			for _, rec := range recs {
				out = append(out, rec.Data)
				after = rec.Key
			}
		}
		return out
	}
	if !r.rows {
		b, err := os.ReadFile(filepath.Join(r.dir, fmt.Sprintf("turn-%d.jsonl", n)))
		if err != nil {
			t.Fatal(err)
		}
		return bytes.Split(bytes.TrimRight(b, "\n"), []byte("\n"))
	}
	var out [][]byte
	for _, row := range r.rowsAt(t, n) {
		out = append(out, []byte(row.EventJSON))
	}
	return out
}

func (r recording) rowsAt(t *testing.T, n int) []transcriptRow {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(r.dir, fmt.Sprintf("turn-%d.rows.jsonl", n)))
	if err != nil {
		t.Fatal(err)
	}
	var rows []transcriptRow
	for l := range bytes.SplitSeq(bytes.TrimRight(b, "\n"), []byte("\n")) {
		var row transcriptRow
		if err := json.Unmarshal(l, &row); err != nil {
			t.Fatal(err)
		}
		rows = append(rows, row)
	}
	return rows
}

// tableRows are the rows of turn n of a database recording.
func (r recording) tableRows(t *testing.T, n int) []rows.Row {
	t.Helper()
	out, err := rows.Turn(r.dir, n)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// replayer writes a recording's turns into a home as the agent did.
type replayer struct {
	t    *testing.T
	r    recording
	home string
	path string
	db   *sql.DB
	seen map[string]bool // rows inserted: session/seq
	// digest is the database's rows as the agent left them (tableDigest).
	digest string
}

// tableDigest is every row of every table of db, in order.
func tableDigest(t *testing.T, db *sql.DB) string {
	t.Helper()
	var tables []string
	rows, err := db.Query(`SELECT name FROM sqlite_master WHERE type='table' ORDER BY name`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var n string
		rows.Scan(&n)
		tables = append(tables, n)
	}
	rows.Close()
	var b strings.Builder
	for _, tb := range tables {
		rows, err := db.Query(`SELECT * FROM "` + tb + `" ORDER BY rowid`)
		if err != nil {
			rows, err = db.Query(`SELECT * FROM "` + tb + `"`) // WITHOUT ROWID
			if err != nil {
				t.Fatal(err)
			}
		}
		cols, _ := rows.Columns()
		for rows.Next() {
			vals := make([]any, len(cols))
			ptrs := make([]any, len(cols))
			for i := range vals {
				ptrs[i] = &vals[i]
			}
			rows.Scan(ptrs...)
			fmt.Fprintf(&b, "%s %v\n", tb, vals)
		}
		rows.Close()
	}
	return b.String()
}

func newReplayer(t *testing.T, home string, r recording) *replayer {
	t.Helper()
	p := &replayer{t: t, r: r, home: home, path: filepath.Join(home, r.where), seen: map[string]bool{}}
	os.MkdirAll(filepath.Dir(p.path), 0o755)
	if r.rows || r.tables {
		db, err := sql.Open("sqlite", "file:"+p.path+"?_pragma=busy_timeout(5000)&_pragma=journal_mode(WAL)")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { db.Close() })
		if _, err := db.Exec(readFile(t, filepath.Join(r.dir, "schema.sql"))); err != nil {
			t.Fatalf("%s schema: %v", r.name, err)
		}
		p.db = db
	}
	if b, err := os.ReadFile(filepath.Join(r.dir, "trajectory.jsonl")); err == nil {
		os.WriteFile(strings.TrimSuffix(p.path, ".jsonl")+".trajectory.jsonl", b, 0o600)
	}
	return p
}

// turn writes turn n: the database rows it added, in one transaction; the
// bytes an appending agent added; or, for an agent that rewrote its file
// in place during the turn (turn-n.how), the whole file again from the
// start in pieces, each seen by the watcher half written.
func (p *replayer) turn(n int, settle time.Duration) {
	t := p.t
	t.Helper()
	if p.r.tables {
		// The turn's rows in one transaction, as the agent commits.
		tx, err := p.db.Begin()
		if err != nil {
			t.Fatal(err)
		}
		for _, row := range p.r.tableRows(t, n) {
			if err := row.Insert(tx); err != nil {
				t.Fatal(err)
			}
		}
		if err := tx.Commit(); err != nil {
			t.Fatal(err)
		}
		return
	}
	if p.db != nil {
		tx, err := p.db.Begin()
		if err != nil {
			t.Fatal(err)
		}
		for _, row := range p.r.rowsAt(t, n) {
			key := fmt.Sprintf("%s/%d", row.SessionID, row.Seq)
			if p.seen[key] {
				continue
			}
			p.seen[key] = true
			tx.Exec(`INSERT OR IGNORE INTO session_windows(session_id, session_key, created_at, updated_at) VALUES(?,?,?,?)`, row.SessionID, row.SessionKey, row.CreatedAt, row.CreatedAt)
			var err error
			if row.EventZstd != nil {
				_, err = tx.Exec(`INSERT INTO transcript_events(session_id, seq, event_json, created_at, event_zstd, event_utf8_bytes, navigation_json) VALUES(?,?,NULL,?,?,?,'{}')`,
					row.SessionID, row.Seq, row.CreatedAt, row.EventZstd, row.Bytes)
			} else {
				_, err = tx.Exec(`INSERT INTO transcript_events(session_id, seq, event_json, created_at) VALUES(?,?,?,?)`, row.SessionID, row.Seq, row.EventJSON, row.CreatedAt)
			}
			if err != nil {
				t.Fatalf("%s turn %d: %v", p.r.name, n, err)
			}
		}
		if err := tx.Commit(); err != nil {
			t.Fatal(err)
		}
		return
	}
	name := fmt.Sprintf("turn-%d.jsonl", n)
	if p.r.doc {
		name = fmt.Sprintf("turn-%d.json", n)
	}
	data, err := os.ReadFile(filepath.Join(p.r.dir, name))
	if err != nil {
		t.Fatal(err)
	}
	how, _ := os.ReadFile(filepath.Join(p.r.dir, fmt.Sprintf("turn-%d.how", n)))
	p.write(p.path, data, strings.TrimSpace(string(how)), settle)
	// The other files the agent wrote in the turn (nanobot: its own
	// history.jsonl, a dream: session), as they were after it.
	others := filepath.Join(p.r.dir, fmt.Sprintf("turn-%d.files", n))
	filepath.WalkDir(others, func(path string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return nil
		}
		rel, _ := filepath.Rel(others, path)
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		dst := filepath.Join(p.home, rel)
		os.MkdirAll(filepath.Dir(dst), 0o755)
		p.write(dst, b, "", settle)
		return nil
	})
}

// write puts data into path as the agent did: appended when it extends
// what is there (and how is not "rewrite" or "rename"), written whole by
// a temporary file renamed onto it ("rename", and any other file that does
// not extend), or rewritten in place ("rewrite") in pieces, each seen by
// the watcher half written.
func (p *replayer) write(path string, data []byte, how string, settle time.Duration) {
	t := p.t
	t.Helper()
	old, _ := os.ReadFile(path)
	switch {
	case how != "rewrite" && how != "rename" && bytes.HasPrefix(data, old):
		f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
		if err != nil {
			t.Fatal(err)
		}
		f.Write(data[len(old):])
		f.Close()
	case how != "rewrite":
		tmp := path + ".tmp"
		if err := os.WriteFile(tmp, data, 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, path); err != nil {
			t.Fatal(err)
		}
	default:
		f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		for len(data) > 0 {
			k := min(len(data), 700)
			f.Write(data[:k])
			data = data[k:]
			time.Sleep(2 * settle)
		}
	}
}

// message is one conversation message of a recording's last turn.
type message struct {
	role, text string
}

// messages lists the conversation messages of the recording: those of
// its last turn, each once (an agent that writes a message again under its
// id, Gemini CLI as it changes one, has one message, the last written),
// then those an earlier turn held that the agent has since removed from its
// file (nanobot's /new clears the session).
func (r recording) messages(t *testing.T) []message {
	out := r.turnMessages(t, r.turns)
	seen := map[message]bool{}
	for _, m := range out {
		seen[m] = true
	}
	for n := r.turns - 1; n >= 1; n-- {
		ms := r.turnMessages(t, n)
		for _, m := range ms {
			if !seen[m] {
				out = append(out, m)
			}
		}
		for _, m := range ms {
			seen[m] = true
		}
	}
	return out
}

// turnMessages lists the conversation messages of the file after turn n.
func (r recording) turnMessages(t *testing.T, n int) []message {
	var out []message
	byID := map[string]int{}
	for _, l := range r.lines(t, n) {
		m := session.Decode(l)
		if m.Role == "" || m.Meta || m.Raw || strings.TrimSpace(m.Text) == "" {
			continue
		}
		if i, ok := byID[m.ID]; ok && m.ID != "" {
			out[i] = message{m.Role, m.Text}
			continue
		}
		byID[m.ID] = len(out)
		out = append(out, message{m.Role, m.Text})
	}
	return out
}

// phrase is a message's recall query, quoted: the longest stretch of its
// first line without a double quote (a query cannot hold one), at most 48
// bytes of it.
func (m message) phrase() string {
	first, _, _ := strings.Cut(m.text, "\n")
	s := ""
	for _, part := range strings.Split(first, `"`) {
		if len(strings.TrimSpace(part)) > len(s) {
			s = strings.TrimSpace(part)
		}
	}
	if len(s) > 48 {
		s = strings.ToValidUTF8(s[:48], "")
	}
	return `"` + strings.TrimSpace(s) + `"`
}

// TestRecordedAgents replays, turn by turn, the files the real agent
// programs wrote (Claude Code, Codex, Gemini CLI, OpenClaw's database and
// its older JSONL transcripts rewritten whole each turn) through the real
// daemon, with the policy memwatch init writes for that home: every user,
// assistant and tool message is recalled exactly once with its role, no
// consolidated history or daily note repeats an entry, OpenClaw's
// trajectory traces are not read, and the agents that consolidate their
// own memory (Claude Code, OpenClaw) get no second history by default.
func TestRecordedAgents(t *testing.T) {
	recs := recordings(t)
	home := t.TempDir()
	const settle = 50 * time.Millisecond
	var players []*replayer
	for _, r := range recs {
		if strings.HasPrefix(r.name, "openclaw-2026.7") {
			// One home holds both OpenClaw formats: the older release's
			// transcript under another agent, as after an upgrade.
			r.where = strings.Replace(r.where, "agents/main/", "agents/legacy/", 1)
		}
		p := newReplayer(t, home, r)
		p.turn(1, settle)
		players = append(players, p)
	}
	os.MkdirAll(filepath.Join(home, ".openclaw/workspace/memory"), 0o755)
	pol := filepath.Join(home, "policy.yaml")
	if out, err := exec.Command(memwatchFast, "init", "--home", home, "--write", pol).CombinedOutput(); err != nil {
		t.Fatalf("init: %v\n%s", err, out)
	}
	b, _ := os.ReadFile(pol)
	b = []byte(strings.ReplaceAll(string(b), "    paths:", "    session_idle: 500ms\n    settle: 50ms\n    paths:"))
	// OpenClaw writes its own daily notes: memwatch adds to them only when
	// asked, as here, to check that its entries never repeat whatever the
	// agent rewrites.
	b = []byte(strings.Replace(string(b), "preset: openclaw\n", "preset: openclaw\n    consolidate: true\n", 1))
	os.WriteFile(pol, b, 0o644)
	state := filepath.Join(home, "state")
	p := start(t, "--policy", pol, "--state-dir", state)
	p.waitLog("ready", 10*time.Second)
	for n := 2; ; n++ {
		more := false
		for _, pl := range players {
			if n <= pl.r.turns {
				more = true
				pl.turn(n, settle)
			}
		}
		if !more {
			break
		}
		time.Sleep(700 * time.Millisecond) // the agent's next turn, after the session went idle
	}
	for _, pl := range players {
		if pl.db != nil {
			pl.digest = tableDigest(t, pl.db)
		}
	}

	type hit struct {
		Text, Citation string
		Folded         []string
	}
	recall := func(args ...string) []hit {
		t.Helper()
		cmd := exec.Command(memwatchFast, append([]string{"recall", "--policy", pol, "--all", "--limit", "50", "--json"}, args...)...)
		cmd.Env = append(os.Environ(), "MEMWATCH_STATE_DIR="+state)
		out, err := cmd.Output()
		if exitCode(err) == 1 {
			err = nil // nothing found, as grep says it
		}
		var res []hit
		if err != nil || json.Unmarshal(out, &res) != nil {
			t.Fatalf("recall %q: %v\n%s", args, err, out)
		}
		return res
	}
	cites := func(r recording, c string) bool {
		if r.rows || r.tables || r.doc {
			return strings.Contains(c, filepath.Base(r.where)+"#")
		}
		// file#L5, or file@2#L5 once the agent rewrote it whole (the
		// spool's generation, which memwatch show resolves).
		base := filepath.Base(r.where)
		return strings.Contains(c, base+"#L") || strings.Contains(c, base+"@")
	}
	// Every message of the last turn, once it is captured.
	for _, r := range recs {
		msgs := r.messages(t)
		if len(msgs) < 4 {
			t.Errorf("%s: %d messages in the recording, want the two turns' (question, answer, request, tool call, result, answer)", r.name, len(msgs))
		}
		var tools, dup, missing int
		asked := map[message]bool{}
		for _, m := range msgs {
			if asked[m] {
				continue // the same words again: one query counts both
			}
			asked[m] = true
			deadline := time.Now().Add(20 * time.Second)
			var hits []string
			for {
				hits = hits[:0]
				for _, h := range recall("--scope", "messages", m.phrase()) {
					// The same words said in another recording of the same
					// root are one result, citing this one among its copies.
					if cites(r, h.Citation) || slices.ContainsFunc(h.Folded, func(c string) bool { return cites(r, c) }) {
						hits = append(hits, h.Text)
					}
				}
				if len(hits) > 0 || time.Now().After(deadline) {
					break
				}
				time.Sleep(100 * time.Millisecond)
			}
			// Messages of this recording that hold the phrase: a tool
			// call's phrase may be in its result too, and an agent may say
			// the same thing twice.
			want := 0
			for _, o := range msgs {
				if strings.Contains(strings.ToLower(o.text), strings.ToLower(strings.Trim(m.phrase(), `"`))) {
					want++
				}
			}
			switch {
			case len(hits) == 0:
				if missing == 0 {
					t.Logf("%s: recall %s: %+v", r.name, m.phrase(), recall(m.phrase()))
				}
				missing++
				t.Errorf("%s: %s message %s not recalled", r.name, m.role, m.phrase())
			case len(hits) > want:
				dup++
				t.Errorf("%s: %s message %s recalled %d times, want %d: %q", r.name, m.role, m.phrase(), len(hits), want, hits)
			}
			label := false
			for _, h := range hits {
				label = label || strings.HasPrefix(h, m.role+":")
			}
			if len(hits) > 0 && !label {
				t.Errorf("%s: %s message %s recalled as %q, want it labelled %s:", r.name, m.role, m.phrase(), hits, m.role)
			}
			if strings.HasPrefix(m.text, "[tool:") {
				tools++
			}
		}
		if tools == 0 {
			t.Errorf("%s: no tool call in the recording", r.name)
		}
		t.Logf("%s: %d messages, %d recalled, %d duplicated, %d tool calls", r.name, len(msgs), len(msgs)-missing, dup, tools)
	}
	// OpenClaw edited its daily note after memwatch had added its entries
	// to it (make fixtures ran the real memwatch between the turns): the
	// edit found the agent's line once and replaced it.
	for _, r := range recs {
		b, err := os.ReadFile(filepath.Join(r.dir, "daily-note.md"))
		if err != nil {
			continue
		}
		note := string(b)
		if !strings.Contains(note, "<!-- memwatch:") || !strings.Contains(note, "- ledger service: deploys on Thursdays") || strings.Contains(note, "- ledger service: deploys on Fridays only") {
			t.Errorf("%s: the daily note after OpenClaw's edit: want memwatch's entries and the agent's corrected line:\n%s", r.name, note)
		}
		var edited bool
		for _, m := range r.messages(t) {
			edited = edited || m.role == "assistant" && strings.HasPrefix(m.text, "[tool: edit]")
		}
		if !edited {
			t.Errorf("%s: no edit in the recording", r.name)
		}
	}
	// OpenClaw's trajectory trace is never read.
	if hits := recall("openclaw-trajectory"); len(hits) != 0 {
		t.Errorf("the trajectory trace was read: %+v", hits)
	}
	// nanobot's Dream runs in a session of its own (dream:<time>), never
	// read; its slash commands and the harness's replies are no messages
	// (found as meta, not consolidated).
	for _, r := range recs {
		if !strings.HasPrefix(r.name, "nanobot-") {
			continue
		}
		for _, h := range recall("--scope", "messages", `"memory consolidation engine"`) {
			if strings.Contains(h.Citation, "sessions/") {
				t.Errorf("%s: the dream: session was read: %s %q", r.name, h.Citation, h.Text)
			}
		}
		for _, q := range []string{`"Dreaming..."`, "/dream"} {
			for _, h := range recall("--scope", "messages", q) {
				if strings.Contains(h.Citation, "sessions/") && !strings.HasPrefix(h.Text, "meta:") {
					t.Errorf("%s: recall %s: the command found as a message: %s %q", r.name, q, h.Citation, h.Text)
				}
			}
		}
	}
	// Codex and Gemini CLI do not consolidate their sessions themselves:
	// memwatch does, each message at most once however the turns came.
	// Claude Code and OpenClaw do: memwatch writes no history for them.
	for _, r := range recs {
		var h string
		switch {
		case strings.HasPrefix(r.name, "codex-"):
			h = ".codex/memwatch/HISTORY.md"
		case strings.HasPrefix(r.name, "gemini-cli-"):
			h = ".gemini/memwatch/HISTORY.md"
		default:
			continue
		}
		waitFor(t, filepath.Join(home, h), "Fridays only", 30*time.Second)
		seen := map[string]bool{}
		for _, l := range strings.Split(readFile(t, filepath.Join(home, h)), "\n") {
			if l = strings.TrimSpace(l); len(l) > 20 && seen[l] {
				t.Errorf("%s repeats %q", h, l)
			}
			seen[l] = true
		}
	}
	if strings.Contains(string(b), "preset: openclaw") {
		notes := filepath.Join(home, ".openclaw/workspace/memory")
		deadline := time.Now().Add(30 * time.Second)
		var ms []string
		for len(ms) == 0 && time.Now().Before(deadline) {
			ms, _ = filepath.Glob(filepath.Join(notes, "*.md"))
			time.Sleep(100 * time.Millisecond)
		}
		time.Sleep(2 * time.Second) // every session consolidated
		ms, _ = filepath.Glob(filepath.Join(notes, "*.md"))
		if len(ms) == 0 {
			t.Errorf("OpenClaw with consolidate: true: no daily note in %s", notes)
		}
		// Each session's messages at most once in the notes, however often
		// the agent rewrote its transcript: a line of an entry is in the
		// notes no more often than the session has a message that reads
		// so (the agent acknowledged each tool result in the same words;
		// and both OpenClaw recordings had the same conversation).
		said := map[string]map[string]int{} // source -> entry line -> messages
		for _, r := range recs {
			if !strings.HasPrefix(r.name, "openclaw-") {
				continue
			}
			src := "openclaw-agent.sqlite"
			if !r.rows {
				src = "legacy/sessions/s1.jsonl"
			}
			said[src] = map[string]int{}
			for _, m := range r.messages(t) {
				text, _, _ := strings.Cut(m.text, "\n")
				if strings.HasPrefix(text, "[tool: ") {
					text, _, _ = strings.Cut(text, "]")
					text += "]"
				}
				said[src]["- "+m.role+": "+text]++
			}
		}
		for _, m := range ms {
			note := readFile(t, m)
			seen := map[string]int{}
			for _, entry := range strings.Split(note, "\n## ") {
				_, cite, ok := strings.Cut(entry, "<!-- memwatch: ")
				if !ok {
					continue
				}
				src := "openclaw-agent.sqlite"
				if strings.Contains(cite, "legacy/sessions/s1.jsonl") {
					src = "legacy/sessions/s1.jsonl"
				}
				for _, l := range strings.Split(entry, "\n") {
					if l = strings.TrimSpace(l); strings.HasPrefix(l, "- ") {
						seen[src+"\x00"+l]++
						if n := seen[src+"\x00"+l]; n > max(said[src][l], 1) {
							t.Errorf("%s holds %q of %s %d times, the session says it %d times:\n%s", m, l, src, n, said[src][l], note)
						}
					}
				}
			}
		}
	}
	for _, glob := range []string{".claude/projects/*/memory/*", ".qwen/projects/*/memory/HISTORY*", ".openclaw/workspace/HISTORY*", ".nanobot/workspace/memory/HISTORY*"} {
		if ms, _ := filepath.Glob(filepath.Join(home, glob)); len(ms) > 0 {
			t.Errorf("memwatch consolidated an agent that consolidates its own memory: %v", ms)
		}
	}
	// nanobot consolidated its own turns into history.jsonl (/new): the
	// file is as nanobot left it, with no record of memwatch's beside.
	for _, r := range recs {
		for n := r.turns; n >= 1; n-- {
			rel := ".nanobot/workspace/memory/history.jsonl"
			want, err := os.ReadFile(filepath.Join(r.dir, fmt.Sprintf("turn-%d.files", n), rel))
			if err != nil {
				continue
			}
			if got := readFile(t, filepath.Join(home, rel)); got != string(want) {
				t.Errorf("%s: %s after the replay:\n%s\nwant nanobot's own:\n%s", r.name, rel, got, want)
			}
			break
		}
	}
	p.stop(30 * time.Second)

	// The agents' own files and databases are as the agents left them:
	// memwatch only read them.
	for _, pl := range players {
		if pl.db == nil {
			last := fmt.Sprintf("turn-%d.jsonl", pl.r.turns)
			if pl.r.doc {
				last = fmt.Sprintf("turn-%d.json", pl.r.turns)
			}
			if got, want := readFile(t, pl.path), readFile(t, filepath.Join(pl.r.dir, last)); got != want {
				t.Errorf("%s: %s changed while memwatch ran", pl.r.name, pl.r.where)
			}
			continue
		}
		var ok string
		if err := pl.db.QueryRow(`PRAGMA integrity_check`).Scan(&ok); err != nil || ok != "ok" {
			t.Errorf("%s: integrity_check of %s: %q %v", pl.r.name, pl.r.where, ok, err)
		}
		if got := tableDigest(t, pl.db); got != pl.digest {
			t.Errorf("%s: the rows of %s changed while memwatch ran", pl.r.name, pl.r.where)
		}
	}

	// What the spool holds per conversation byte: the lines it keeps
	// (data) against the bytes of the agent's session as it ends.
	sp, err := sql.Open("sqlite", "file:"+filepath.Join(state, "spool.db")+"?mode=ro")
	if err != nil {
		t.Fatal(err)
	}
	defer sp.Close()
	for _, r := range recs {
		// The session as it ends, and the messages an earlier turn held
		// that the agent has since removed (nanobot's /new).
		var conv int64
		last := map[string]bool{}
		for _, l := range r.lines(t, r.turns) {
			conv += int64(len(l)) + 1
			last[string(l)] = true
		}
		for n := r.turns - 1; n >= 1; n-- {
			for _, l := range r.lines(t, n) {
				if m := session.Decode(l); !last[string(l)] && m.Role != "" && !m.Meta {
					conv += int64(len(l)) + 1
					last[string(l)] = true
				}
			}
		}
		var held, lines int64
		pattern := "%" + filepath.Base(r.where)
		if r.rows || r.tables || r.doc {
			pattern += "#%"
		}
		err := sp.QueryRow(`SELECT coalesce(sum(length(data)),0), count(*) FROM lines JOIN logs ON logs.id=lines.log WHERE logs.path LIKE ?`, pattern).Scan(&held, &lines)
		if err != nil {
			t.Fatal(err)
		}
		if float64(held) > 1.2*float64(conv) {
			t.Errorf("%s: the spool holds %d bytes for a %d-byte conversation, want at most 1.2 per byte", r.name, held, conv)
		}
		t.Logf("%s: spool %d lines, %d bytes for %d bytes of session (%.2f per byte)", r.name, lines, held, conv, float64(held)/float64(conv))
	}
}
