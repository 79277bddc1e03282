package transcripts

import (
	"context"
	"database/sql"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/memwatch/memwatch/session"
	"github.com/memwatch/memwatch/spool"
	"github.com/memwatch/memwatch/test/fixtures/dbrows/rows"
)

var update = flag.Bool("update", false, "rewrite the golden files")

// loadTables writes a recording's schema and the rows of its turn n (test/fixtures/dbrows)
// into a database of its own and returns it.
func loadTables(t testing.TB, dir string, n int) *sql.DB {
	t.Helper()
	db, err := sql.Open("sqlite", "file:"+filepath.Join(t.TempDir(), "db.sqlite"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	schema, err := os.ReadFile(filepath.Join(dir, "schema.sql"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec(string(schema)); err != nil {
		t.Fatal(err)
	}
	turn, err := rows.Turn(dir, n)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range turn {
		if err := r.Insert(db); err != nil {
			t.Fatal(err)
		}
	}
	return db
}

// allRecords reads every conversation of a database as records.
func allRecords(t testing.TB, db *sql.DB) map[string][]spool.Record {
	t.Helper()
	ctx := context.Background()
	f, err := Detect(ctx, db)
	if err != nil || f == nil {
		t.Fatalf("no format detected: %v", err)
	}
	ss, err := f.Sessions(ctx, db)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string][]spool.Record{}
	for _, s := range ss {
		if s.Internal {
			continue
		}
		var after int64
		for {
			recs, err := f.Records(ctx, db, s.ID, after, Bounds{})
			if err != nil {
				t.Fatal(err)
			}
			if len(recs) == 0 {
				break
			}
			out[s.ID] = append(out[s.ID], recs...)
			after = recs[len(recs)-1].Key
		}
	}
	return out
}

// TestRecordedDatabases reads the databases the real agents wrote
// (session/testdata/agents/*/turn-N.tables.jsonl, make fixtures) as memwatch
// does, and compares each record's reading with the recording's golden file:
// every message once, with its role, tool calls and their results.
func TestRecordedDatabases(t *testing.T) {
	local := time.Local
	time.Local = time.UTC
	t.Cleanup(func() { time.Local = local })
	dirs, _ := filepath.Glob(filepath.Join("..", "session", "testdata", "agents", "*"))
	found := 0
	for _, dir := range dirs {
		turns, _ := filepath.Glob(filepath.Join(dir, "turn-*.tables.jsonl"))
		if len(turns) == 0 {
			continue
		}
		found++
		t.Run(filepath.Base(dir), func(t *testing.T) {
			db := loadTables(t, dir, len(turns))
			var b strings.Builder
			all := allRecords(t, db)
			ids := make([]string, 0, len(all))
			for id := range all {
				ids = append(ids, id)
			}
			sort.Strings(ids)
			for _, id := range ids {
				for _, r := range all[id] {
					m := session.Decode(r.Data)
					fmt.Fprintf(&b, "%s L%d %s %v message=%v: %q\n", id, r.Key, m.Role, m.Tools, session.IsMessage(r.Data, false), m.Text)
				}
			}
			checkGolden(t, filepath.Join(dir, "golden"), b.String())
			// Read a record at a time, from each cursor, they are the same.
			for id, recs := range allRecords(t, db) {
				f, _ := Detect(context.Background(), db)
				for i := range recs {
					after := int64(0)
					if i > 0 {
						after = recs[i-1].Key
					}
					got, err := f.Records(context.Background(), db, id, after, Bounds{})
					if err != nil || len(got) == 0 || got[0].Key != recs[i].Key || string(got[0].Data) != string(recs[i].Data) {
						t.Errorf("session %s after %d: got %+v, want record %d", id, after, got, recs[i].Key)
					}
				}
			}
		})
	}
	if found == 0 {
		t.Fatal("no recorded database (make fixtures records opencode's)")
	}
}

// FuzzOpenCodeRecords: any message and part data, and any cursor, give
// records with keys past the cursor, increasing, each a JSON line.
func FuzzOpenCodeRecords(f *testing.F) {
	f.Add([]byte(`{"role":"user","time":{"created":1}}`), []byte(`{"type":"text","text":"hi"}`), []byte(`{"role":"assistant","time":{"created":2,"completed":3}}`), []byte(`{"type":"tool","tool":"bash","state":{"status":"completed","input":{"command":"ls"},"output":"a"}}`), int64(0))
	f.Add([]byte(`{`), []byte(`{"type":"tool","state":{"input":"not json"}}`), []byte(`{"role":"assistant"}`), []byte(`null`), int64(3))
	f.Fuzz(func(t *testing.T, m1, p1, m2, p2 []byte, after int64) {
		msgs := []ocMessage{{ID: "msg_1", Data: m1, Parts: [][]byte{p1}}, {ID: "msg_2", Data: m2, Parts: [][]byte{p2}}}
		if after < 0 || after > 100 {
			after = 0
		}
		last := after
		for _, r := range openCodeMessageRecords(msgs, 0, after) {
			if r.Key <= last {
				t.Fatalf("key %d after %d", r.Key, last)
			}
			last = r.Key
			if !json.Valid(r.Data) {
				t.Fatalf("record %d is not JSON: %s", r.Key, r.Data)
			}
		}
	})
}

// TestCrushRunOfDoneMessages: a message crush is still writing (no finish
// part) holds back it and what follows, unless a later message shows
// crush has gone on without it; summaries are left out.
func TestCrushRunOfDoneMessages(t *testing.T) {
	const (
		fin  = `{"type":"finish","data":{"reason":"end_turn"}}`
		text = `{"type":"text","data":{"text":"hello"}}`
	)
	done := `[` + text + `,` + fin + `]`
	streaming := `[` + text + `]`
	msg := func(rowid int64, role, parts string, summary bool) crushMessage {
		return crushMessage{RowID: rowid, ID: fmt.Sprint("m", rowid), Role: role, Parts: []byte(parts), Summary: summary}
	}
	tests := []struct {
		name string
		msgs []crushMessage
		want []int64
	}{
		{"all done", []crushMessage{msg(1, "user", done, false), msg(2, "assistant", done, false)}, []int64{1, 2}},
		{"last streaming", []crushMessage{msg(1, "user", done, false), msg(2, "assistant", streaming, false)}, []int64{1}},
		{"abandoned then more", []crushMessage{msg(1, "user", done, false), msg(2, "assistant", streaming, false), msg(5, "user", done, false)}, []int64{1, 2, 5}},
		{"summary left out", []crushMessage{msg(3, "assistant", done, true), msg(4, "user", done, false)}, []int64{4}},
		{"parts not JSON, last", []crushMessage{msg(1, "user", `[{"type":`, false)}, nil},
		{"parts not JSON, then more", []crushMessage{msg(1, "user", `[{"type":`, false), msg(2, "user", done, false)}, []int64{1, 2}},
		{"empty", nil, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var got []int64
			for _, r := range crushMessageRecords(tt.msgs, Batch) {
				got = append(got, r.Key)
				if !json.Valid(r.Data) {
					t.Errorf("record %d is not JSON: %s", r.Key, r.Data)
				}
			}
			if fmt.Sprint(got) != fmt.Sprint(tt.want) {
				t.Errorf("keys: got %v, want %v", got, tt.want)
			}
		})
	}
}

// FuzzCrushRecords: any parts, roles and rowids give records with keys
// increasing, each a JSON line the decoder reads as a message.
func FuzzCrushRecords(f *testing.F) {
	f.Add("user", []byte(`[{"type":"text","data":{"text":"hi"}},{"type":"finish","data":{}}]`), "assistant", []byte(`[{"type":"tool_call","data":{"name":"bash","input":"{\"command\":\"ls\"}"}},{"type":"finish","data":{}}]`), int64(1), int64(2))
	f.Add("tool", []byte(`[{"type":"tool_result","data":{"content":"x","is_error":true}},{"type":"finish"}]`), "", []byte(`{`), int64(7), int64(9))
	f.Add("user", []byte(`[{"type":"shell_command","data":{"command":"ls","output":"a"}},{"type":"binary","data":{"path":"/p"}}]`), "assistant", []byte(`null`), int64(1), int64(3))
	f.Fuzz(func(t *testing.T, r1 string, p1 []byte, r2 string, p2 []byte, k1, k2 int64) {
		if k2 <= k1 {
			k2 = k1 + 1
		}
		msgs := []crushMessage{{RowID: k1, ID: "a", Role: r1, Parts: p1}, {RowID: k2, ID: "b", Role: r2, Parts: p2, Created: k2}}
		last := int64(-1 << 63)
		for _, r := range crushMessageRecords(msgs, Batch) {
			if r.Key <= last {
				t.Fatalf("key %d after %d", r.Key, last)
			}
			last = r.Key
			if !json.Valid(r.Data) {
				t.Fatalf("record %d is not JSON: %s", r.Key, r.Data)
			}
			if m := session.Decode(r.Data); m.Raw {
				t.Fatalf("record %d not decoded: %s", r.Key, r.Data)
			}
		}
	})
}

// TestRecordedDocuments reads the JSON documents the real agents wrote
// (session/testdata/agents/*/turn-N.json, make fixtures) turn by turn, as
// memwatch does, and compares the records with the recording's golden
// file: every message once, with its role, tool calls and their results.
func TestRecordedDocuments(t *testing.T) {
	dirs, _ := filepath.Glob(filepath.Join("..", "session", "testdata", "agents", "*"))
	found := 0
	for _, dir := range dirs {
		turns, _ := filepath.Glob(filepath.Join(dir, "turn-*.json"))
		if len(turns) == 0 {
			continue
		}
		found++
		t.Run(filepath.Base(dir), func(t *testing.T) {
			var st DocState
			var all []spool.Record
			var after int64
			for n := 1; n <= len(turns); n++ {
				doc, err := os.ReadFile(filepath.Join(dir, fmt.Sprintf("turn-%d.json", n)))
				if err != nil {
					t.Fatal(err)
				}
				f, id, msgs := ParseDocument(doc)
				if f == nil {
					t.Fatalf("turn %d: no format reads it", n)
				}
				var recs []spool.Record
				recs, st = st.Changes(id, msgs, after, time.Unix(0, 0))
				all = append(all, recs...)
				if len(recs) > 0 {
					after = recs[len(recs)-1].Key
				}
				// Read again unchanged, nothing is new.
				if again, _ := st.Changes(id, msgs, after, time.Unix(0, 0)); len(again) != 0 {
					t.Errorf("turn %d read again: %d records, want 0", n, len(again))
				}
			}
			var b strings.Builder
			for _, r := range all {
				m := session.Decode(r.Data)
				fmt.Fprintf(&b, "L%d %s %v message=%v: %q\n", r.Key, m.Role, m.Tools, session.IsMessage(r.Data, false), m.Text)
			}
			checkGolden(t, filepath.Join(dir, "golden"), b.String())
		})
	}
	if found == 0 {
		t.Fatal("no recorded document (make fixtures records Continue CLI's)")
	}
}

// TestDocumentChanges: only what follows the longest unchanged prefix is
// new, keys go on from the cursor, and a message keeps its id while what
// precedes it is unchanged.
func TestDocumentChanges(t *testing.T) {
	msg := func(role, text string) map[string]any { return map[string]any{"role": role, "content": text} }
	a, b, c, d := msg("user", "a"), msg("assistant", "b"), msg("user", "c"), msg("assistant", "d")
	summary := msg("user", "e")
	tests := []struct {
		name   string
		before [][]map[string]any // the document as it was read before, in turn
		now    []map[string]any
		want   []string // the new records' texts
	}{
		{"first read", nil, []map[string]any{a, b}, []string{"a", "b"}},
		{"appended", [][]map[string]any{{a, b}}, []map[string]any{a, b, c, d}, []string{"c", "d"}},
		{"unchanged", [][]map[string]any{{a, b}}, []map[string]any{a, b}, nil},
		{"compacted, then more", [][]map[string]any{{a, b, c}}, []map[string]any{summary, d}, []string{"e", "d"}},
		{"shrunk", [][]map[string]any{{a, b, c}}, []map[string]any{a}, nil},
		{"shrunk, then another", [][]map[string]any{{a, b, c}, {a}}, []map[string]any{a, d}, []string{"d"}},
		{"edited in the middle", [][]map[string]any{{a, b, c}}, []map[string]any{a, d, c}, []string{"d", "c"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var st DocState
			var after int64
			ids := map[string]bool{}
			for _, doc := range tt.before {
				var recs []spool.Record
				recs, st = st.Changes("s", doc, after, time.Time{})
				for _, r := range recs {
					after = r.Key
					ids[session.Decode(r.Data).ID] = true
				}
			}
			// The state survives a restart.
			enc, _ := st.MarshalBinary()
			var st2 DocState
			if err := st2.UnmarshalBinary(enc); err != nil {
				t.Fatal(err)
			}
			recs, _ := st2.Changes("s", tt.now, after, time.Time{})
			var got []string
			for i, r := range recs {
				if r.Key != after+int64(i)+1 {
					t.Errorf("key %d: got %d, want %d", i, r.Key, after+int64(i)+1)
				}
				m := session.Decode(r.Data)
				got = append(got, m.Text)
				if ids[m.ID] {
					t.Errorf("record %q has the id of one captured before: %s", m.Text, m.ID)
				}
			}
			if fmt.Sprint(got) != fmt.Sprint(tt.want) {
				t.Errorf("new records: got %q, want %q", got, tt.want)
			}
		})
	}
	var st DocState
	if err := st.UnmarshalBinary([]byte("abc")); err == nil {
		t.Error("a state of 3 bytes decoded")
	}
}

// FuzzContinueDocument: any document gives messages or none, each a JSON
// line the decoder reads, keys increasing from the cursor.
func FuzzContinueDocument(f *testing.F) {
	doc, _ := os.ReadFile(filepath.Join("..", "session", "testdata", "agents", "continue-cli-1.5.47", "turn-2.json"))
	f.Add(doc)
	f.Add([]byte(`{"sessionId":"x","history":[{"message":{"role":"user","content":[{"type":"text","text":"hi"},{"type":"imageUrl"}]}},{"message":{"role":"assistant","toolCalls":[{"function":{"name":"Bash","arguments":"{"}}]},"toolCallStates":[{"status":"errored","output":[{"content":"no"}]}]},{"message":{"role":"assistant","content":"sum"},"conversationSummary":"sum"}]}`))
	f.Add([]byte(`[{"sessionId":"x"}]`))
	f.Add([]byte(`{"sessionId":"x","history":[{"message":null}]}`))
	f.Fuzz(func(t *testing.T, doc []byte) {
		fm, id, msgs := ParseDocument(doc)
		if fm == nil {
			return
		}
		recs, st := DocState{}.Changes(id, msgs, 7, time.Unix(1, 0))
		if len(st.Sums) != len(msgs) || len(recs) != len(msgs) {
			t.Fatalf("%d messages, %d sums, %d records", len(msgs), len(st.Sums), len(recs))
		}
		for i, r := range recs {
			if r.Key != int64(8+i) {
				t.Fatalf("key %d, want %d", r.Key, 8+i)
			}
			if !json.Valid(r.Data) || session.Decode(r.Data).Raw {
				t.Fatalf("record %d: %s", r.Key, r.Data)
			}
		}
	})
}

// checkGolden compares got with the golden file (go test -update rewrites
// it).
func checkGolden(t *testing.T, golden, got string) {
	t.Helper()
	if *update {
		if err := os.WriteFile(golden, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, _ := os.ReadFile(golden)
	if got != string(want) {
		t.Errorf("records differ from %s (go test -update rewrites it):\n%s", golden, got)
	}
}

// TestClineShapes reads a Cline session holding the content its SDK's
// message type allows beyond what the recording has: a string content,
// an image, thinking, a tool input that is no object, text and command
// results, an error, a system message.
func TestClineShapes(t *testing.T) {
	doc, err := os.ReadFile(filepath.Join("testdata", "cline-shapes.json"))
	if err != nil {
		t.Fatal(err)
	}
	f, id, msgs := ParseDocument(doc)
	if f != clineCLI || id != "1795711600482_abcde" {
		t.Fatalf("read as %v, session %q; want cline's, 1795711600482_abcde", f, id)
	}
	recs, _ := DocState{}.Changes(id, msgs, 0, time.Unix(0, 0))
	var b strings.Builder
	for _, r := range recs {
		m := session.Decode(r.Data)
		fmt.Fprintf(&b, "L%d %s %s %v: %q\n", r.Key, m.Role, m.Time.UTC().Format(time.RFC3339Nano), m.Tools, m.Text)
	}
	checkGolden(t, filepath.Join("testdata", "cline-shapes.golden"), b.String())
}

func FuzzClineDocument(f *testing.F) {
	doc, _ := os.ReadFile(filepath.Join("..", "session", "testdata", "agents", "cline-3.0.65", "turn-2.json"))
	f.Add(doc)
	shapes, _ := os.ReadFile(filepath.Join("testdata", "cline-shapes.json"))
	f.Add(shapes)
	f.Add([]byte(`{"sessionId":"x","origin":{},"messages":[{"role":"user","content":[{"type":"tool_result","content":[null,1,"s",{"result":null}]}]}]}`))
	f.Add([]byte(`{"sessionId":"x","origin":{},"messages":[{"role":"user","content":[{"type":"text","text":"<user_input>"}]}]}`))
	f.Fuzz(func(t *testing.T, doc []byte) {
		id, msgs, ok := clineMessages(doc)
		if !ok {
			return
		}
		recs, st := DocState{}.Changes(id, msgs, 0, time.Unix(1, 0))
		if len(st.Sums) != len(msgs) || len(recs) != len(msgs) {
			t.Fatalf("%d messages, %d sums, %d records", len(msgs), len(st.Sums), len(recs))
		}
		for _, r := range recs {
			m := session.Decode(r.Data)
			if !json.Valid(r.Data) || m.Raw || m.Role == "" {
				t.Fatalf("record %d: %s", r.Key, r.Data)
			}
		}
	})
}

// TestProjectSessions: opencode's sessions are listed by the directory
// they ran in; a database whose session table has no directory (an
// older schema) is read all the same, and has no project's sessions.
func TestProjectSessions(t *testing.T) {
	ctx := context.Background()
	for _, c := range []struct {
		name, schema string
		want         map[string][]string
	}{
		{"with directories", `CREATE TABLE session(id TEXT, parent_id TEXT, directory TEXT);
			INSERT INTO session VALUES('ses_1', NULL, '/src/billing'), ('ses_2', NULL, '/src/ledger/'), ('ses_3', 'ses_1', '/src/billing'), ('ses_4', NULL, '/src/billing')`,
			map[string][]string{"/src/billing": {"ses_1", "ses_4"}, "/src/ledger": {"ses_2"}}},
		{"an older schema", `CREATE TABLE session(id TEXT, parent_id TEXT); INSERT INTO session VALUES('ses_1', NULL)`, map[string][]string{}},
	} {
		path := filepath.Join(t.TempDir(), "opencode.db")
		db, err := sql.Open("sqlite", "file:"+path)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := db.Exec(c.schema + `; CREATE TABLE message(id TEXT, session_id TEXT, time_created INTEGER, data TEXT);
			CREATE TABLE part(id TEXT, message_id TEXT, session_id TEXT, data TEXT)`); err != nil {
			t.Fatal(err)
		}
		ss, err := openCode.Sessions(ctx, db)
		db.Close()
		if err != nil || len(ss) == 0 {
			t.Fatalf("%s: sessions %v, %v", c.name, ss, err)
		}
		got, err := ProjectSessions(ctx, path, []string{"/src/billing", "/src/ledger", "/src"})
		if err != nil {
			t.Fatal(err)
		}
		if fmt.Sprint(got) != fmt.Sprint(c.want) {
			t.Errorf("%s: got %v, want %v", c.name, got, c.want)
		}
	}
}
