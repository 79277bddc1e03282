// Package transcripts reads the conversations agents keep in SQLite
// databases rather than in log files (OpenClaw from 2026.7.2, opencode,
// Crush),
// as records of the spool: each session is a log of its own, its records
// numbered so that a cursor (the last record captured) says where to go on.
//
// One file per agent format (openclaw.go, opencode.go, crush.go): a Format names a
// table only that agent has (how a database is recognised), lists the
// sessions to capture (the agent's internal ones left out) and turns the
// rows of a session after a cursor into records, each the JSON line
// session.Decode reads (a message with its role, text and tool calls, or
// a tool's result). Adding an agent that keeps a database is adding a
// Format in a file of its own.
//
// The databases are the agents': the caller opens them read-only
// (Open: mode=ro, query_only, a 100 ms busy timeout) as their owner, reads
// in short transactions of at most Batch rows (in WAL mode a reader never
// blocks the agent's writer) and never holds a lock between reads.
package transcripts

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"

	_ "modernc.org/sqlite" // registers the "sqlite" driver

	"github.com/memwatch/memwatch/confine"

	"github.com/memwatch/memwatch/spool"
)

// Batch bounds the records one read returns.
const Batch = 500

// Session is one conversation of a database.
type Session struct {
	ID string
	// Internal sessions are the agent's own (scheduled jobs, dreaming):
	// not conversations of the user's; they are left out.
	Internal bool
	// Dir is the directory the conversation ran in, when the agent
	// keeps it (opencode's session.directory): its project.
	Dir string
}

// childSessions lists the sessions query returns as (id, parent id)
// rows: a session with a parent is one the agent started for itself, so
// Internal.
// A third column, when the query has one, is the session's directory.
func childSessions(ctx context.Context, db *sql.DB, query string) ([]Session, error) {
	rows, err := db.QueryContext(ctx, query)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	cols, err := rows.Columns()
	if err != nil {
		return nil, err
	}
	var out []Session
	for rows.Next() {
		var s Session
		var parent string
		dest := []any{&s.ID, &parent, &s.Dir}
		if err := rows.Scan(dest[:len(cols)]...); err != nil {
			return nil, err
		}
		s.Internal = parent != ""
		out = append(out, s)
	}
	return out, rows.Err()
}

// hasColumn reports whether table has column.
func hasColumn(ctx context.Context, db *sql.DB, table, column string) (bool, error) {
	var n int
	err := db.QueryRowContext(ctx, `SELECT COUNT(*) FROM pragma_table_info(?) WHERE name=?`, table, column).Scan(&n)
	return n > 0, err
}

// ProjectSessions lists the conversations of the database at path (as
// Open takes it) that ran in one of dirs, by that directory: a project's
// own conversations, for a request made from it. A database of no format
// memwatch reads, or whose agent keeps no directory, has none.
func ProjectSessions(ctx context.Context, path string, dirs []string) (map[string][]string, error) {
	db, err := Open(ctx, path)
	if err != nil {
		return nil, err
	}
	defer db.Close()
	f, err := Detect(ctx, db)
	if err != nil || f == nil {
		return nil, err
	}
	sessions, err := f.Sessions(ctx, db)
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	want := map[string]bool{}
	for _, d := range dirs {
		want[d] = true
	}
	out := map[string][]string{}
	for _, s := range sessions {
		if !s.Internal && s.Dir != "" && want[filepath.Clean(s.Dir)] {
			d := filepath.Clean(s.Dir)
			out[d] = append(out[d], s.ID)
		}
	}
	return out, nil
}

// Format is one agent's transcript database.
type Format struct {
	Name string
	// Table is a table only this agent's databases have, or with Column,
	// a table with a column only this agent's has.
	Table, Column string
	// Sessions lists the database's sessions.
	Sessions func(ctx context.Context, db *sql.DB) ([]Session, error)
	// Records returns at most Batch records of a session after the record
	// numbered after, in order, each value and the batch within b.
	Records func(ctx context.Context, db *sql.DB, session string, after int64, b Bounds) ([]spool.Record, error)
}

// Formats are the databases memwatch reads, OpenClaw's first.
var Formats = []*Format{openClaw, openCode, crush}

// Open opens an agent's database read-only: it never writes, never waits
// long for the agent's lock. path is the database's path with every link
// resolved (confine.Root.RealPath), and the file SQLite opened must be
// that one: SQLite opens by path and resolves links itself, so a directory
// swapped for a link meanwhile shows as another path, and is refused. The
// path is escaped into the URI: a ? or # in a directory's name is a name.
func Open(ctx context.Context, path string) (*sql.DB, error) {
	// readonly_shm: the agent's -shm is mapped read-only, never written
	// (a WAL index that needs rebuilding is built in memory). SQLite
	// cannot open a -shm that is not there that way (a -wal left without
	// one, a writer in exclusive locking mode): then it opens as before,
	// read-only, and may create the -shm, as the owner (docs/security.md).
	db, err := open(ctx, path, "mode=ro&readonly_shm=1&_pragma=busy_timeout(100)&_pragma=query_only(1)")
	if err != nil {
		db, err = open(ctx, path, "mode=ro&_pragma=busy_timeout(100)&_pragma=query_only(1)")
	}
	return db, err
}

func open(ctx context.Context, path, params string) (*sql.DB, error) {
	db, err := sql.Open("sqlite", confine.SQLiteURI(path, params))
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", path, err)
	}
	db.SetMaxOpenConns(1)
	db.SetConnMaxLifetime(0)
	var seq int
	var name, file string
	if err := db.QueryRowContext(ctx, "PRAGMA database_list").Scan(&seq, &name, &file); err != nil {
		db.Close()
		return nil, fmt.Errorf("open %s: %w", path, err)
	}
	// A first read: the WAL and its index are opened by it, not before.
	var v int
	if err := db.QueryRowContext(ctx, "PRAGMA schema_version").Scan(&v); err != nil {
		db.Close()
		return nil, fmt.Errorf("open %s: %w", path, err)
	}
	if filepath.Clean(file) != filepath.Clean(path) {
		db.Close()
		return nil, fmt.Errorf("open %s: SQLite opened %s: %w", path, file, confine.ErrOutside)
	}
	return db, nil
}

// Detect returns the format of db, nil when it is none memwatch reads (or
// the agent has not created its tables yet).
func Detect(ctx context.Context, db *sql.DB) (*Format, error) {
	for _, f := range Formats {
		var n int
		q, args := `SELECT COUNT(*) FROM sqlite_master WHERE type='table' AND name=?`, []any{f.Table}
		if f.Column != "" {
			q, args = `SELECT COUNT(*) FROM pragma_table_info(?) WHERE name=?`, []any{f.Table, f.Column}
		}
		if err := db.QueryRowContext(ctx, q, args...).Scan(&n); err != nil {
			return nil, err
		}
		if n > 0 {
			return f, nil
		}
	}
	return nil, nil
}

// marshal writes v as one JSON line's bytes, < > & as they are (a shell
// command stays searchable as typed).
func marshal(v any) []byte {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	enc.Encode(v)
	return bytes.TrimRight(b.Bytes(), "\n")
}

// jsonString is JSON an agent kept as a string (a tool call's arguments),
// decoded and written again: as the agent's json.Marshal escaped it (> as
// \u003e), a command would not read as typed.
func jsonString(s string) (json.RawMessage, bool) {
	dec := json.NewDecoder(strings.NewReader(s))
	dec.UseNumber()
	var v any
	if dec.Decode(&v) != nil || dec.More() {
		return nil, false
	}
	return marshal(v), true
}

// contentBlock is a part of a message as the records are written: the
// Anthropic-style content session.Decode reads (text, tool_use).
type contentBlock struct {
	Type  string          `json:"type"`
	Text  string          `json:"text,omitempty"`
	Name  string          `json:"name,omitempty"`
	Input json.RawMessage `json:"input,omitempty"`
}
