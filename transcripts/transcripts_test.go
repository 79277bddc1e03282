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
	data, err := os.ReadFile(filepath.Join(dir, fmt.Sprintf("turn-%d.tables.jsonl", n)))
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(strings.TrimSpace(string(data)), "\n") {
		var r struct {
			Table string                     `json:"table"`
			Row   map[string]json.RawMessage `json:"row"`
		}
		if err := json.Unmarshal([]byte(l), &r); err != nil {
			t.Fatal(err)
		}
		var cols, marks []string
		var args []any
		for c, v := range r.Row {
			cols, marks = append(cols, `"`+c+`"`), append(marks, "?")
			var val any
			dec := json.NewDecoder(strings.NewReader(string(v)))
			dec.UseNumber()
			dec.Decode(&val)
			switch x := val.(type) {
			case json.Number:
				if i, err := x.Int64(); err == nil {
					val = i
				} else {
					val, _ = x.Float64()
				}
			case map[string]any:
				var b struct {
					Blob []byte `json:"$blob"`
				}
				json.Unmarshal(v, &b)
				val = b.Blob
			}
			args = append(args, val)
		}
		if _, err := db.Exec(`INSERT OR REPLACE INTO "`+r.Table+`"(`+strings.Join(cols, ",")+`) VALUES(`+strings.Join(marks, ",")+`)`, args...); err != nil {
			t.Fatalf("%s: %v", r.Table, err)
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
			recs, err := f.Records(ctx, db, s.ID, after)
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
			golden := filepath.Join(dir, "golden")
			if *update {
				os.WriteFile(golden, []byte(b.String()), 0o644)
			}
			want, _ := os.ReadFile(golden)
			if b.String() != string(want) {
				t.Errorf("records differ from %s (go test -update rewrites it):\n%s", golden, b.String())
			}
			// Read a record at a time, from each cursor, they are the same.
			for id, recs := range allRecords(t, db) {
				f, _ := Detect(context.Background(), db)
				for i := range recs {
					after := int64(0)
					if i > 0 {
						after = recs[i-1].Key
					}
					got, err := f.Records(context.Background(), db, id, after)
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
