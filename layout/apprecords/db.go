// Package apprecords is the app-records layout (docs/layouts.md): an application
// keeps memories as rows of an SQLite table (app_memories), and memwatch is
// the seed's Memory Sub-Agent running beside it: it keeps at most
// limit_per_app records per app (an LLM decision at a time, FIFO as the
// fallback) and creates records from ended conversations.
package apprecords

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"path/filepath"
	"regexp"
	"strings"
	"time"

	_ "modernc.org/sqlite" // the application's database

	"github.com/memwatch/memwatch/confine"
)

// Record is one row of the memories table.
type Record struct {
	ID                   int64  `json:"id"`
	AppID                string `json:"appId"`
	Content              string `json:"content"`
	CreatedAt            string `json:"createdAt"`
	UpdatedAt            string `json:"updatedAt"`
	SourceConversationID string `json:"sourceConversationId,omitempty"`
	Metadata             string `json:"metadata,omitempty"`
	// Size is the bytes of the record's text columns as stored; Oversize
	// says it is over the bound memwatch reads (max_record_size): its
	// Content is then a note, not the text, and memwatch never changes it.
	Size     int64 `json:"-"`
	Oversize bool  `json:"-"`
}

// ErrOversize means a record is larger than memwatch reads.
var ErrOversize = errors.New("record is larger than memwatch reads (max_record_size)")

// ErrSchema means the table is missing or not the seed's shape.
var ErrSchema = errors.New("unexpected memories table")

var identRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// DB is the application's database, opened for one piece of work. Writes
// are short BEGIN IMMEDIATE transactions with a bounded busy wait, so the
// application's own writes are never blocked for long.
type DB struct {
	// db is the one connection, pinned for the DB's life: SQLite opens its
	// file by path, so a new connection could open whatever the agent put
	// at the path since; this one was checked to hold the root's file.
	db    *sql.Conn
	pool  *sql.DB
	table string
	path  string
	real  string // the file's path with every link resolved, as memwatch walked it
	// source says the table has source_conversation_id and metadata; read
	// once at Open, since the one connection may be inside a transaction later.
	source bool
	// owned is the root OpenPath opened, closed with the database.
	owned *confine.Root
	// root is the file root: every use of the connection runs with its
	// owner's file-system identity (confine.Root.Do), so SQLite opens the
	// database and its -wal, -shm and -journal files as the owner would.
	root *confine.Root
	// maxRecord and maxRows bound what one query reads (SetBounds).
	maxRecord int64
	maxRows   int
}

// SetBounds sets the largest record read whole and the most records one
// call of Records returns (a store's max_record_size and max_rows).
func (d *DB) SetBounds(maxRecord int64, maxRows int) {
	if maxRecord > 0 {
		d.maxRecord = maxRecord
	}
	if maxRows > 0 {
		d.maxRows = maxRows
	}
}

// do runs fn with the database owner's file-system identity.
func (d *DB) do(fn func() error) error { return d.root.Do(fn) }

// OpenPath opens the database file at path as a file root (refusing a
// symlink) and then as a database; Close closes both.
func OpenPath(ctx context.Context, path, table string, create bool) (*DB, error) {
	root, err := confine.OpenFile(path, confine.Options{})
	if err != nil {
		return nil, err
	}
	d, err := Open(ctx, root, table, create)
	if err != nil {
		root.Close()
		return nil, err
	}
	d.owned = root
	return d, nil
}

// Open opens the database at path. With create it creates the table (the
// seed's schema) when missing; otherwise a missing table is ErrSchema.
//
// SQLite opens its files by path, when it wants, on the thread that calls
// it: every call is made with the database owner's file-system identity,
// so the kernel decides what the path leads to as it would for the owner
// (a symlink an agent swapped in toward a root-only database is refused).
// The checks that the file opened is the root's stay as a second layer.
func Open(ctx context.Context, root *confine.Root, table string, create bool) (*DB, error) {
	if !identRE.MatchString(table) {
		return nil, fmt.Errorf("table %q: %w (not a plain SQL identifier)", table, ErrSchema)
	}
	var d *DB
	err := root.Do(func() (err error) {
		d, err = openDB(ctx, root, table, create)
		return err
	})
	return d, err
}

func openDB(ctx context.Context, root *confine.Root, table string, create bool) (*DB, error) {
	path := root.Path()
	real, err := root.RealPath(root.Leaf())
	if err != nil {
		return nil, err
	}
	// query_only until the file is proven: nothing is written to a file
	// that is not the one checked. The path is escaped into the URI.
	pool, err := sql.Open("sqlite", confine.SQLiteURI(real, "_pragma=busy_timeout(5000)&_pragma=query_only(1)&_txlock=immediate"))
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", path, err)
	}
	pool.SetMaxOpenConns(1)
	pool.SetConnMaxLifetime(0)
	db, err := pool.Conn(ctx)
	if err != nil {
		pool.Close()
		return nil, fmt.Errorf("open %s: %w", path, err)
	}
	def := DefaultOptions()
	d := &DB{db: db, pool: pool, table: table, path: path, real: real, root: root, maxRecord: int64(def.MaxRecordSize), maxRows: def.MaxRows}
	if err := db.PingContext(ctx); err != nil {
		d.Close()
		return nil, fmt.Errorf("open %s: %w", path, err)
	}
	// The file SQLite opened (it resolves symlinks) must be the root's:
	// an agent may swap the path for a symlink just while it opens.
	if err := d.opened(ctx, root); err != nil {
		d.Close()
		return nil, err
	}
	if err := root.SameFile(); err != nil {
		d.Close()
		return nil, err
	}
	if _, err := db.ExecContext(ctx, "PRAGMA query_only=0"); err != nil {
		d.Close()
		return nil, fmt.Errorf("open %s: %w", path, err)
	}
	if err := d.check(ctx, create); err != nil {
		d.Close()
		return nil, err
	}
	var n int
	_ = db.QueryRowContext(ctx, `SELECT COUNT(*) FROM pragma_table_info(?) WHERE name IN ('source_conversation_id','metadata')`, table).Scan(&n)
	d.source = n == 2
	return d, nil
}

// Close closes the database (SQLite may checkpoint and remove its -wal
// file: as the owner too).
func (d *DB) Close() error {
	var err error
	d.do(func() error { err = errors.Join(d.db.Close(), d.pool.Close()); return nil })
	if d.owned != nil {
		d.owned.Close()
	}
	return err
}

func (d *DB) q(s string) string { return strings.ReplaceAll(s, "{table}", quoteIdent(d.table)) }

// ISOTime writes a stored timestamp as ISO 8601, as app-records' API gives
// it: SQLite's CURRENT_TIMESTAMP ("2025-09-01 09:00:00", UTC) becomes
// "2025-09-01T09:00:00Z". What does not parse is returned as it is.
func ISOTime(s string) string {
	if s == "" {
		return s
	}
	if t, err := time.Parse(time.RFC3339Nano, s); err == nil {
		return t.UTC().Format(time.RFC3339Nano)
	}
	for _, l := range []string{"2006-01-02 15:04:05.999999999", "2006-01-02T15:04:05.999999999", "2006-01-02 15:04", "2006-01-02"} {
		if t, err := time.ParseInLocation(l, s, time.UTC); err == nil {
			return t.Format(time.RFC3339Nano)
		}
	}
	return s
}

// opened checks that the file the connection holds is the root's file.
func (d *DB) opened(ctx context.Context, root *confine.Root) error {
	var seq int
	var name, file string
	if err := d.db.QueryRowContext(ctx, "PRAGMA database_list").Scan(&seq, &name, &file); err != nil {
		return fmt.Errorf("open %s: %w", d.path, err)
	}
	// SQLite resolves links: a directory on the way swapped for one shows
	// as another path than the one memwatch walked to.
	if filepath.Clean(file) != d.real {
		return fmt.Errorf("open %s: SQLite opened %s: %w", d.path, file, confine.ErrOutside)
	}
	return nil
}

// MaxID is the highest record id of an app (0: none).
func (d *DB) MaxID(ctx context.Context, app string) (int64, error) {
	var id sql.NullInt64
	err := d.do(func() error {
		return d.db.QueryRowContext(ctx, d.q(`SELECT MAX(id) FROM {table} WHERE app_id = ?`), app).Scan(&id)
	})
	return id.Int64, err
}

// Literals returns a row as stored: its columns, and each value as an SQL
// literal (SQLite's quote(): 'text', 42, 1.5, X'00ff', NULL).
func (d *DB) Literals(ctx context.Context, id int64) (cols, lits []string, err error) {
	err = d.do(func() error {
		cols, lits, err = d.literals(ctx, id)
		return nil
	})
	return cols, lits, err
}

func (d *DB) literals(ctx context.Context, id int64) (cols, lits []string, err error) {
	rows, err := d.db.QueryContext(ctx, `SELECT name FROM pragma_table_info(?) ORDER BY cid`, d.table)
	if err != nil {
		return nil, nil, err
	}
	for rows.Next() {
		var c string
		if err := rows.Scan(&c); err != nil {
			rows.Close()
			return nil, nil, err
		}
		cols = append(cols, c)
	}
	rows.Close()
	if len(cols) == 0 {
		return nil, nil, fmt.Errorf("%s: table %s has no columns: %w", d.path, d.table, ErrSchema)
	}
	// The whole row goes into the journal: only a row within the bound.
	var size []string
	for _, c := range cols {
		size = append(size, "COALESCE(octet_length("+quoteIdent(c)+"),0)")
	}
	var n int64
	if err := d.db.QueryRowContext(ctx, d.q(`SELECT `+strings.Join(size, " + ")+` FROM {table} WHERE id = ?`), id).Scan(&n); err != nil {
		return nil, nil, fmt.Errorf("read record %d: %w", id, err)
	}
	if n > d.maxRecord {
		return nil, nil, fmt.Errorf("record %d is %d bytes: %w", id, n, ErrOversize)
	}
	var sel []string
	for _, c := range cols {
		sel = append(sel, "quote("+quoteIdent(c)+")")
	}
	lits = make([]string, len(cols))
	dest := make([]any, len(cols))
	for i := range lits {
		dest[i] = &lits[i]
	}
	err = d.db.QueryRowContext(ctx, d.q(`SELECT `+strings.Join(sel, ", ")+` FROM {table} WHERE id = ?`), id).Scan(dest...)
	if err != nil {
		return nil, nil, fmt.Errorf("read record %d: %w", id, err)
	}
	return cols, lits, nil
}

// literalRE accepts what quote() writes, so a journal's literals can only
// ever be values.
var literalRE = regexp.MustCompile(`^(NULL|-?[0-9][0-9.eE+-]*|'(?:[^']|'')*'|X'[0-9A-Fa-f]*')$`)

// InsertLiterals inserts a row given as columns and SQL literals (from
// Literals): the row comes back exactly as it was stored.
func (d *DB) InsertLiterals(ctx context.Context, cols, lits []string) error {
	var qc []string
	for i, c := range cols {
		if !literalRE.MatchString(lits[i]) {
			return fmt.Errorf("restore record: column %s: %q is not an SQL literal", c, lits[i])
		}
		qc = append(qc, quoteIdent(c))
	}
	return d.tx(ctx, func(tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, d.q(`INSERT INTO {table} (`+strings.Join(qc, ", ")+`) VALUES (`+strings.Join(lits, ", ")+`)`))
		return err
	})
}

// quoteIdent quotes an SQLite identifier: double quotes, with any inside
// doubled. The table name is also checked against identRE at open.
func quoteIdent(name string) string { return `"` + strings.ReplaceAll(name, `"`, `""`) + `"` }

func (d *DB) check(ctx context.Context, create bool) error {
	// The seed's records are a table: a view (whose query the app chose,
	// and may never end) is not read.
	var kind string
	err := d.db.QueryRowContext(ctx, `SELECT type FROM sqlite_master WHERE name = ? COLLATE NOCASE AND type IN ('table','view')`, d.table).Scan(&kind)
	if err == nil && kind != "table" {
		return fmt.Errorf("%s: %s is a %s, not a table: %w (memwatch keeps the records of the seed's table only)", d.path, d.table, kind, ErrSchema)
	}
	rows, err := d.db.QueryContext(ctx, `SELECT name FROM pragma_table_info(?)`, d.table)
	if err != nil {
		return fmt.Errorf("read schema of %s: %w", d.path, err)
	}
	cols := map[string]bool{}
	for rows.Next() {
		var c string
		if err := rows.Scan(&c); err != nil {
			rows.Close()
			return fmt.Errorf("read schema of %s: %w", d.path, err)
		}
		cols[c] = true
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return fmt.Errorf("read schema of %s: %w", d.path, err)
	}
	if len(cols) == 0 {
		if !create {
			return fmt.Errorf("%s has no table %s: %w (set create_table: true to let memwatch create it)", d.path, d.table, ErrSchema)
		}
		_, err := d.db.ExecContext(ctx, d.q(`CREATE TABLE IF NOT EXISTS {table} (
			id INTEGER PRIMARY KEY AUTOINCREMENT,
			app_id TEXT NOT NULL,
			content TEXT NOT NULL,
			created_at DATETIME DEFAULT CURRENT_TIMESTAMP,
			updated_at DATETIME DEFAULT CURRENT_TIMESTAMP,
			source_conversation_id TEXT,
			metadata TEXT)`))
		if err == nil {
			_, err = d.db.ExecContext(ctx, d.q(`CREATE INDEX IF NOT EXISTS `+quoteIdent("idx_"+d.table+"_app_id")+` ON {table}(app_id)`))
		}
		if err != nil {
			return fmt.Errorf("create table %s in %s: %w", d.table, d.path, err)
		}
		return nil
	}
	for _, c := range []string{"id", "app_id", "content", "created_at", "updated_at"} {
		if !cols[c] {
			return fmt.Errorf("%s: table %s has no column %s: %w", d.path, d.table, c, ErrSchema)
		}
	}
	return nil
}

// cols selects a record's columns, each text column only when the whole
// record is within the bound (octet_length reads no text), and its size.
func (d *DB) cols(context.Context) string {
	src, meta := "''", "''"
	if d.source {
		src, meta = "COALESCE(source_conversation_id,'')", "COALESCE(metadata,'')"
	}
	size := "(COALESCE(octet_length(content),0)"
	if d.source {
		size += " + COALESCE(octet_length(source_conversation_id),0) + COALESCE(octet_length(metadata),0)"
	}
	size += ")"
	small := fmt.Sprintf("%s <= %d", size, d.maxRecord)
	return fmt.Sprintf(`id, app_id, CASE WHEN %[1]s THEN content END, %[5]s, %[6]s, CASE WHEN %[1]s THEN %[2]s END, CASE WHEN %[1]s THEN %[3]s END, %[4]s`,
		small, src, meta, size, boundedTime("created_at"), boundedTime("updated_at"))
}

// maxAppID bounds an app id memwatch reads: an app whose id is longer is
// not one of the seed's and is left alone.
const maxAppID = 256

// boundedTime selects a timestamp column, or ” when it holds more than a
// timestamp could.
func boundedTime(col string) string {
	return fmt.Sprintf("CASE WHEN octet_length(%[1]s) <= 64 THEN COALESCE(%[1]s,'') ELSE '' END", col)
}

func scanRecords(rows *sql.Rows) ([]Record, error) {
	defer rows.Close()
	var out []Record
	for rows.Next() {
		var r Record
		var content, src, meta sql.NullString
		if err := rows.Scan(&r.ID, &r.AppID, &content, &r.CreatedAt, &r.UpdatedAt, &src, &meta, &r.Size); err != nil {
			return nil, err
		}
		r.Content, r.SourceConversationID, r.Metadata = content.String, src.String, meta.String
		if !content.Valid {
			r.Oversize = true
			r.Content = fmt.Sprintf("[record of %d bytes, over max_record_size: memwatch does not read it]", r.Size)
		}
		r.CreatedAt, r.UpdatedAt = ISOTime(r.CreatedAt), ISOTime(r.UpdatedAt)
		out = append(out, r)
	}
	return out, rows.Err()
}

// Records returns an app's records, oldest first (created_at, then id):
// at most max_rows of them.
func (d *DB) Records(ctx context.Context, app string) ([]Record, error) {
	var out []Record
	err := d.do(func() error {
		rows, err := d.db.QueryContext(ctx, d.q(`SELECT `+d.cols(ctx)+` FROM {table} WHERE app_id = ? ORDER BY created_at, id LIMIT ?`), app, d.maxRows)
		if err != nil {
			return fmt.Errorf("read records of app %s: %w", app, err)
		}
		out, err = scanRecords(rows)
		return err
	})
	return out, err
}

// Count is how many records an app has.
func (d *DB) Count(ctx context.Context, app string) (int, error) {
	var n int
	err := d.do(func() error {
		return d.db.QueryRowContext(ctx, d.q(`SELECT COUNT(*) FROM {table} WHERE app_id = ?`), app).Scan(&n)
	})
	return n, err
}

// Get returns one record.
func (d *DB) Get(ctx context.Context, id int64) (Record, bool, error) {
	var rs []Record
	err := d.do(func() error {
		rows, err := d.db.QueryContext(ctx, d.q(`SELECT `+d.cols(ctx)+` FROM {table} WHERE id = ?`), id)
		if err != nil {
			return err
		}
		rs, err = scanRecords(rows)
		return err
	})
	if err != nil || len(rs) == 0 {
		return Record{}, false, err
	}
	return rs[0], true, nil
}

// OverLimit returns the apps with more than limit records.
func (d *DB) OverLimit(ctx context.Context, limit int) (out map[string]int, err error) {
	err = d.do(func() error {
		out, err = d.overLimit(ctx, limit)
		return err
	})
	return out, err
}

func (d *DB) overLimit(ctx context.Context, limit int) (map[string]int, error) {
	rows, err := d.db.QueryContext(ctx, d.q(`SELECT app_id, COUNT(*) FROM {table} WHERE octet_length(app_id) <= ? GROUP BY app_id HAVING COUNT(*) > ?`), maxAppID, limit)
	if err != nil {
		return nil, fmt.Errorf("count records: %w", err)
	}
	defer rows.Close()
	out := map[string]int{}
	for rows.Next() {
		var app string
		var n int
		if err := rows.Scan(&app, &n); err != nil {
			return nil, err
		}
		out[app] = n
	}
	return out, rows.Err()
}

// tx runs fn in one short BEGIN IMMEDIATE transaction, as the owner.
func (d *DB) tx(ctx context.Context, fn func(*sql.Tx) error) error {
	return d.do(func() error { return d.tx1(ctx, fn) })
}

func (d *DB) tx1(ctx context.Context, fn func(*sql.Tx) error) error {
	tx, err := d.db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("begin on %s: %w", d.path, err)
	}
	defer tx.Rollback()
	if err := fn(tx); err != nil {
		return err
	}
	return tx.Commit()
}

// ErrChanged means the row changed since it was read; the decision is void.
var ErrChanged = errors.New("record changed since it was read")

// Delete deletes a record if it still is exactly old.
func (d *DB) Delete(ctx context.Context, old Record) error {
	return d.tx(ctx, func(tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, d.q(`DELETE FROM {table} WHERE id = ? AND app_id = ? AND content = ?`), old.ID, old.AppID, old.Content)
		if err != nil {
			return fmt.Errorf("delete record %d: %w", old.ID, err)
		}
		if n, _ := res.RowsAffected(); n != 1 {
			return ErrChanged
		}
		return nil
	})
}

// Edit replaces a record's content if it still is exactly old.
func (d *DB) Edit(ctx context.Context, old Record, content string) error {
	return d.tx(ctx, func(tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, d.q(`UPDATE {table} SET content = ?, updated_at = ? WHERE id = ? AND app_id = ? AND content = ?`),
			content, time.Now().UTC().Format("2006-01-02 15:04:05"), old.ID, old.AppID, old.Content)
		if err != nil {
			return fmt.Errorf("edit record %d: %w", old.ID, err)
		}
		if n, _ := res.RowsAffected(); n != 1 {
			return ErrChanged
		}
		return nil
	})
}

// Merge replaces target's content and deletes absorbed (the record merged
// into it) in one transaction, if both are still exactly as read.
func (d *DB) Merge(ctx context.Context, target Record, content string, absorbed Record) error {
	return d.tx(ctx, func(tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, d.q(`UPDATE {table} SET content = ?, updated_at = ? WHERE id = ? AND app_id = ? AND content = ?`),
			content, time.Now().UTC().Format("2006-01-02 15:04:05"), target.ID, target.AppID, target.Content)
		if err != nil {
			return fmt.Errorf("edit record %d: %w", target.ID, err)
		}
		if n, _ := res.RowsAffected(); n != 1 {
			return ErrChanged
		}
		res, err = tx.ExecContext(ctx, d.q(`DELETE FROM {table} WHERE id = ? AND app_id = ? AND content = ?`), absorbed.ID, absorbed.AppID, absorbed.Content)
		if err != nil {
			return fmt.Errorf("delete merged record %d: %w", absorbed.ID, err)
		}
		if n, _ := res.RowsAffected(); n != 1 {
			return ErrChanged
		}
		return nil
	})
}

// Insert adds a record (id 0: a new id) and returns its id.
func (d *DB) Insert(ctx context.Context, r Record) (int64, error) {
	var id int64
	err := d.tx(ctx, func(tx *sql.Tx) error {
		cols, vals := "app_id, content", []any{r.AppID, r.Content}
		if r.ID != 0 {
			cols, vals = "id, "+cols, append([]any{r.ID}, vals...)
		}
		if r.CreatedAt != "" {
			cols, vals = cols+", created_at, updated_at", append(vals, r.CreatedAt, r.UpdatedAt)
		}
		if d.source {
			cols, vals = cols+", source_conversation_id, metadata", append(vals, nullIfEmpty(r.SourceConversationID), nullIfEmpty(r.Metadata))
		}
		res, err := tx.ExecContext(ctx, d.q(`INSERT INTO {table} (`+cols+`) VALUES (?`+strings.Repeat(", ?", len(vals)-1)+`)`), vals...)
		if err != nil {
			return fmt.Errorf("insert record: %w", err)
		}
		id, _ = res.LastInsertId()
		return nil
	})
	return id, err
}

func nullIfEmpty(s string) any {
	if s == "" {
		return nil
	}
	return s
}

// HasConversation reports whether a record came from that conversation.
func (d *DB) HasConversation(ctx context.Context, app, conv string) bool {
	if !d.source {
		return false
	}
	var n int
	// Records made before ids lost their .jsonl count too.
	_ = d.do(func() error {
		return d.db.QueryRowContext(ctx, d.q(`SELECT COUNT(*) FROM {table} WHERE app_id = ? AND source_conversation_id IN (?, ?)`), app, conv, conv+".jsonl").Scan(&n)
	})
	return n > 0
}

// Context renders an app's records in the seed's injection format, newest
// updated first, at most limit.
func Context(app string, rs []Record, limit int) string {
	sorted := append([]Record(nil), rs...)
	// Newest updated first, as the seed's retrieval query orders them.
	for i := 1; i < len(sorted); i++ {
		for j := i; j > 0 && sorted[j].UpdatedAt > sorted[j-1].UpdatedAt; j-- {
			sorted[j], sorted[j-1] = sorted[j-1], sorted[j]
		}
	}
	if limit > 0 && len(sorted) > limit {
		sorted = sorted[:limit]
	}
	var b strings.Builder
	fmt.Fprintf(&b, "(memories for app: %s)\nThe following are memories from previous conversations with this app:\n\n", app)
	for i, r := range sorted {
		day := r.CreatedAt
		if len(day) >= 10 {
			day = day[:10]
		}
		fmt.Fprintf(&b, "%d. [Created: %s] %s\n", i+1, day, strings.Join(strings.Fields(r.Content), " "))
	}
	b.WriteString("\nUse these memories to provide context-aware responses.\n")
	return b.String()
}
