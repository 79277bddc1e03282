package transcripts

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
	"testing"

	"github.com/klauspost/compress/zstd"

	"github.com/memwatch/memwatch/confine"
	"github.com/memwatch/memwatch/session"
)

// TestValuesReadInPart: a message of 3 MB in each agent's database is read
// in part (its first MaxValue bytes, never the whole row), and stays a
// message: its role and the start of its text, its size in the record.
func TestValuesReadInPart(t *testing.T) {
	ctx := context.Background()
	big := "zanzibar " + strings.Repeat("lorem ipsum \"quoted\" \\ é ", 120_000) // ~3 MB
	b := Bounds{MaxValue: 64 << 10}
	for _, tt := range []struct {
		name   string
		schema string
		fill   func(db *sql.DB) error
		format *Format
	}{
		{"opencode", `CREATE TABLE session(id TEXT, parent_id TEXT); CREATE TABLE message(id TEXT, session_id TEXT, data TEXT); CREATE TABLE part(id TEXT, message_id TEXT, session_id TEXT, data TEXT)`,
			func(db *sql.DB) error {
				part, _ := jsonString(fmt.Sprintf(`{"type":"text","text":%q}`, big))
				if _, err := db.Exec(`INSERT INTO part VALUES('p1','m1','s1',?)`, string(part)); err != nil {
					return err
				}
				_, err := db.Exec(`INSERT INTO session VALUES('s1', NULL); INSERT INTO message VALUES('m1','s1','{"role":"user","time":{"created":1}}');
					INSERT INTO message VALUES('m2','s1','{"role":"user","time":{"created":2}}'); INSERT INTO part VALUES('p2','m2','s1','{"type":"text","text":"small one"}')`)
				return err
			}, openCode},
		{"crush", `CREATE TABLE sessions(id TEXT, parent_session_id TEXT, created_at INTEGER); CREATE TABLE messages(id TEXT, session_id TEXT, role TEXT, parts TEXT, created_at INTEGER, is_summary_message INTEGER)`,
			func(db *sql.DB) error {
				parts := marshal([]map[string]any{{"type": "text", "data": map[string]string{"text": big}}, {"type": "finish", "data": map[string]string{}}})
				if _, err := db.Exec(`INSERT INTO messages VALUES('m1','s1','user',?,1,0)`, string(parts)); err != nil {
					return err
				}
				_, err := db.Exec(`INSERT INTO sessions VALUES('s1', NULL, 1);
					INSERT INTO messages VALUES('m2','s1','user','[{"type":"text","data":{"text":"small one"}},{"type":"finish","data":{}}]',2,0)`)
				return err
			}, crush},
		{"openclaw", `CREATE TABLE transcript_events(session_id TEXT, seq INTEGER, event_json TEXT, event_zstd BLOB); CREATE TABLE session_windows(session_id TEXT, session_key TEXT)`,
			func(db *sql.DB) error {
				content, _ := jsonString(fmt.Sprintf("%q", big))
				ev := []byte(`{"type":"message","message":{"role":"user","content":` + string(content) + `}}`)
				enc, _ := zstd.NewWriter(nil)
				z := enc.EncodeAll(ev, nil)
				if _, err := db.Exec(`INSERT INTO transcript_events VALUES('s1',0,?,NULL)`, string(ev)); err != nil {
					return err
				}
				if _, err := db.Exec(`INSERT INTO transcript_events VALUES('s1',1,NULL,?)`, z); err != nil {
					return err
				}
				_, err := db.Exec(`INSERT INTO session_windows VALUES('s1','agent:a:main');
					INSERT INTO transcript_events VALUES('s1',2,'{"type":"message","message":{"role":"user","content":"small one"}}',NULL)`)
				return err
			}, openClaw},
	} {
		t.Run(tt.name, func(t *testing.T) {
			path := t.TempDir() + "/agent.db"
			db, err := sql.Open("sqlite", confine.SQLiteURI(path, ""))
			if err != nil {
				t.Fatal(err)
			}
			if _, err := db.Exec(tt.schema); err != nil {
				t.Fatal(err)
			}
			if err := tt.fill(db); err != nil {
				t.Fatal(err)
			}
			db.Close()
			ro, err := Open(ctx, path)
			if err != nil {
				t.Fatal(err)
			}
			defer ro.Close()
			recs, err := tt.format.Records(ctx, ro, "s1", 0, b)
			if err != nil {
				t.Fatal(err)
			}
			cut, small := 0, 0
			for _, r := range recs {
				if int64(len(r.Data)) > 2*b.MaxValue {
					t.Errorf("record %d holds %d bytes, over twice the bound", r.Key, len(r.Data))
				}
				m := session.Decode(r.Data)
				switch {
				case r.Size > int64(len(r.Data)):
					cut++
					if m.Role != "user" || len(r.Data) < 200 && t.Failed() || !strings.HasPrefix(m.Text, "zanzibar lorem ipsum \"quoted\" \\ é") || !strings.Contains(m.Text, "bytes in all]") {
						t.Errorf("the cut message: role %q, text %.80q…%q (%.200s)", m.Role, m.Text, m.Text[max(0, len(m.Text)-40):], r.Data)
					}
					if r.Size < int64(len(big)) {
						t.Errorf("the cut record's size %d, want at least %d", r.Size, len(big))
					}
				case strings.Contains(m.Text, "small one"):
					small++
				}
			}
			if want := map[string]int{"openclaw": 2}[tt.name]; cut != max(want, 1) || small != 1 {
				t.Errorf("%d cut and %d small records, want %d and 1: %d records", cut, small, max(want, 1), len(recs))
			}
		})
	}
}

func TestSalvage(t *testing.T) {
	for _, tt := range []struct{ in, role, text string }{
		{`{"role":"user","content":"hello wor`, "user", "hello wor"},
		{`{"type":"text","text":"a \"b\" \u00e9 c\`, "", `a "b" é c`},
		{`{"message":{"role":"assistant","content":[{"type":"text","text":"done"},{"type":"text","text":"more é`, "assistant", "done\nmore"},
		{`[1,2,`, "", ""},
	} {
		role, text := salvage([]byte(tt.in))
		if role != tt.role || strings.TrimSpace(text) != strings.TrimSpace(tt.text) && !strings.HasPrefix(text, tt.text) {
			t.Errorf("salvage(%q) = %q, %q; want %q, %q", tt.in, role, text, tt.role, tt.text)
		}
	}
}

// FuzzSalvage: any prefix of agent-written JSON salvages without panic to
// valid UTF-8.
func FuzzSalvage(f *testing.F) {
	f.Add([]byte(`{"role":"user","content":"hello \u00e9\n wor`))
	f.Add([]byte(`{"text":"\ud83d\ude00 x`))
	f.Add([]byte(`{"output":"a\\`))
	f.Fuzz(func(t *testing.T, b []byte) {
		role, text := salvage(b)
		if !utf8Valid(role) || !utf8Valid(text) {
			t.Errorf("salvage(%q) = %q, %q: not UTF-8", b, role, text)
		}
		_ = Depth(b)
	})
}

func utf8Valid(s string) bool { return strings.ToValidUTF8(s, "\uFFFD") == s }
