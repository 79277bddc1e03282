// Package state is memwatch's own durable state: the action journal, tail
// cursors, schedule and budget bookkeeping, in one SQLite database in the
// state directory.
//
// The database uses WAL with synchronous=FULL: a journal record that was
// committed survives a power cut, which the crash-consistency guarantees rely on.
package state

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"

	_ "modernc.org/sqlite" // registers the "sqlite" driver

	"github.com/memwatch/memwatch/control"
)

// FileName is the database file inside the state directory.
const FileName = "memwatch.db"

// DB is the state database.
type DB struct {
	db     *sql.DB
	Path   string
	codecs codecs // written.go
}

const schema = `
CREATE TABLE IF NOT EXISTS journal (
	id          INTEGER PRIMARY KEY AUTOINCREMENT,
	time        INTEGER NOT NULL,          -- unix nanoseconds
	store       TEXT NOT NULL,
	root        TEXT NOT NULL,
	rule        TEXT NOT NULL,
	target      TEXT NOT NULL,
	archive     TEXT NOT NULL DEFAULT '',
	before_sha  TEXT NOT NULL DEFAULT '',
	before_size INTEGER NOT NULL DEFAULT 0,
	after_sha   TEXT NOT NULL DEFAULT '',
	after_size  INTEGER NOT NULL DEFAULT 0,
	tokens      INTEGER NOT NULL DEFAULT 0,
	duration_ms INTEGER NOT NULL DEFAULT 0,
	outcome     TEXT NOT NULL,             -- pending, done, skipped, rejected, failed
	reason      TEXT NOT NULL DEFAULT '',
	data        BLOB                       -- layout data needed by undo (e.g. a deleted row)
);
CREATE INDEX IF NOT EXISTS journal_target ON journal(root, target, rule, id);
CREATE INDEX IF NOT EXISTS journal_outcome ON journal(outcome);
CREATE TABLE IF NOT EXISTS kv (
	ns    TEXT NOT NULL,
	key   TEXT NOT NULL,
	value BLOB NOT NULL,
	PRIMARY KEY (ns, key)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS tokens (
	endpoint TEXT NOT NULL,
	day      TEXT NOT NULL,
	used     INTEGER NOT NULL,
	PRIMARY KEY (endpoint, day)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS written (
	id   INTEGER PRIMARY KEY,              -- the journal record that wrote it
	data BLOB NOT NULL                     -- what it wrote, zstd-compressed
);
CREATE TABLE IF NOT EXISTS disk (
	day   TEXT NOT NULL,                   -- YYYY-MM-DD, local time
	store TEXT NOT NULL,                   -- '' for memwatch's own files
	kind  TEXT NOT NULL,                   -- archives, journal, spool, index, versions
	bytes INTEGER NOT NULL,
	PRIMARY KEY (day, store, kind)
) WITHOUT ROWID;
`

// Open opens (creating if needed) the state database in dir.
func Open(ctx context.Context, dir string) (*DB, error) {
	db, path, err := OpenDB(ctx, dir, FileName, "state database", SyncFull, schema)
	if err != nil {
		return nil, err
	}
	// Columns added since the first release: durations in microseconds
	// (most actions take less than a millisecond), and the identity of
	// the root directory an action was made in.
	// The key of a change (a consolidated range) is looked up by index;
	// the newest records of a file (who wrote a version) too.
	if err := AddColumns(ctx, db,
		Column{"journal", "duration_us", "INTEGER NOT NULL DEFAULT 0"},
		Column{"journal", "root_dev", "INTEGER NOT NULL DEFAULT 0"},
		Column{"journal", "root_ino", "INTEGER NOT NULL DEFAULT 0"},
		Column{"journal", "key", "TEXT NOT NULL DEFAULT ''"},
		Column{"journal", "trigger", "TEXT NOT NULL DEFAULT ''"},
	); err != nil {
		db.Close()
		return nil, fmt.Errorf("upgrade state database %s: %w", path, err)
	}
	if _, err := db.ExecContext(ctx, `CREATE INDEX IF NOT EXISTS journal_key ON journal(root, target, key) WHERE key != '';
		CREATE INDEX IF NOT EXISTS journal_file ON journal(root, target, id);
		CREATE INDEX IF NOT EXISTS journal_archive ON journal(root) WHERE archive != ''`); err != nil {
		db.Close()
		return nil, fmt.Errorf("upgrade state database %s: %w", path, err)
	}
	return &DB{db: db, Path: path}, nil
}

// Close closes the database.
func (d *DB) Close() error {
	d.codecs.close()
	return d.db.Close()
}

// Trusted refuses a state directory another user could have made or
// changed (control.CheckOwned): what memwatch reads from it, as root, it
// would show, restore into an agent's file, or act on.
func Trusted(dir string) error {
	if err := control.CheckOwned(dir); err != nil {
		return fmt.Errorf("state directory: %w", err)
	}
	return nil
}

// Private makes a database of the state directory readable by its owner
// alone (0600), whatever existed before: it is created so when missing,
// and its -wal and -shm files, which SQLite creates with the database's
// mode, are set so too. The journal and the spool hold what agents wrote.
func Private(path string) error {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|syscall.O_NOFOLLOW, 0o600)
	if err != nil {
		return fmt.Errorf("open %s: %w", path, err)
	}
	defer f.Close()
	for _, p := range []string{path, path + "-wal", path + "-shm"} {
		if err := os.Chmod(p, 0o600); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("make %s private: %w", p, err)
		}
	}
	return nil
}

// Get reads a value from namespace ns; ok is false when it is absent.
func (d *DB) Get(ctx context.Context, ns, key string) (value []byte, ok bool, err error) {
	err = d.db.QueryRowContext(ctx, `SELECT value FROM kv WHERE ns=? AND key=?`, ns, key).Scan(&value)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, fmt.Errorf("read state %s/%s: %w", ns, key, err)
	}
	return value, true, nil
}

// Put writes one value.
func (d *DB) Put(ctx context.Context, ns, key string, value []byte) error {
	return d.PutMany(ctx, ns, map[string][]byte{key: value})
}

// PutMany writes many values of one namespace in a single transaction; a nil
// value deletes the key.
func (d *DB) PutMany(ctx context.Context, ns string, values map[string][]byte) error {
	if len(values) == 0 {
		return nil
	}
	tx, err := d.db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("write state %s: %w", ns, err)
	}
	defer tx.Rollback()
	for k, v := range values {
		if v == nil {
			_, err = tx.ExecContext(ctx, `DELETE FROM kv WHERE ns=? AND key=?`, ns, k)
		} else {
			_, err = tx.ExecContext(ctx, `INSERT INTO kv(ns,key,value) VALUES(?,?,?) ON CONFLICT(ns,key) DO UPDATE SET value=excluded.value`, ns, k, v)
		}
		if err != nil {
			return fmt.Errorf("write state %s/%s: %w", ns, k, err)
		}
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("write state %s: %w", ns, err)
	}
	return nil
}

// Scan returns every key/value of a namespace.
func (d *DB) Scan(ctx context.Context, ns string) (map[string][]byte, error) {
	rows, err := d.db.QueryContext(ctx, `SELECT key, value FROM kv WHERE ns=?`, ns)
	if err != nil {
		return nil, fmt.Errorf("scan state %s: %w", ns, err)
	}
	defer rows.Close()
	out := map[string][]byte{}
	for rows.Next() {
		var k string
		var v []byte
		if err := rows.Scan(&k, &v); err != nil {
			return nil, fmt.Errorf("scan state %s: %w", ns, err)
		}
		out[k] = v
	}
	return out, rows.Err()
}

// AddTokens adds n tokens to an endpoint's use on day (YYYY-MM-DD) and returns the new total.
func (d *DB) AddTokens(ctx context.Context, endpoint, day string, n int64) (int64, error) {
	var total int64
	err := d.db.QueryRowContext(ctx, `INSERT INTO tokens(endpoint,day,used) VALUES(?,?,?)
		ON CONFLICT(endpoint,day) DO UPDATE SET used=used+excluded.used RETURNING used`, endpoint, day, n).Scan(&total)
	if err != nil {
		return 0, fmt.Errorf("record token use: %w", err)
	}
	return total, nil
}

// Tokens returns an endpoint's token use on day.
func (d *DB) Tokens(ctx context.Context, endpoint, day string) (int64, error) {
	var used int64
	err := d.db.QueryRowContext(ctx, `SELECT used FROM tokens WHERE endpoint=? AND day=?`, endpoint, day).Scan(&used)
	if errors.Is(err, sql.ErrNoRows) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("read token use: %w", err)
	}
	return used, nil
}

// TokenDay is an endpoint's token use on one day.
type TokenDay struct {
	Endpoint string `json:"endpoint"`
	Day      string `json:"day"` // YYYY-MM-DD
	Used     int64  `json:"used"`
}

// TokenDays returns every endpoint's token use from day since (YYYY-MM-DD)
// on, oldest first.
func (d *DB) TokenDays(ctx context.Context, since string) ([]TokenDay, error) {
	rows, err := d.db.QueryContext(ctx, `SELECT endpoint, day, used FROM tokens WHERE day >= ? ORDER BY day, endpoint`, since)
	if err != nil {
		return nil, fmt.Errorf("read token use: %w", err)
	}
	defer rows.Close()
	var out []TokenDay
	for rows.Next() {
		var t TokenDay
		if err := rows.Scan(&t.Endpoint, &t.Day, &t.Used); err != nil {
			return nil, fmt.Errorf("read token use: %w", err)
		}
		out = append(out, t)
	}
	return out, rows.Err()
}

// DiskSample is what memwatch held on disk on one day: a store's archives,
// or (Store "") one of its own files in the state directory.
type DiskSample struct {
	Day   string `json:"day"`
	Store string `json:"store,omitempty"`
	Kind  string `json:"kind"`
	Bytes int64  `json:"bytes"`
}

// PutDisk records the day's samples; a later sample of the same day, store
// and kind replaces the earlier one (a day keeps its last reading).
func (d *DB) PutDisk(ctx context.Context, samples []DiskSample) error {
	tx, err := d.db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("record disk use: %w", err)
	}
	defer tx.Rollback()
	for _, s := range samples {
		if _, err := tx.ExecContext(ctx, `INSERT INTO disk(day, store, kind, bytes) VALUES(?,?,?,?)
			ON CONFLICT(day, store, kind) DO UPDATE SET bytes=excluded.bytes`, s.Day, s.Store, s.Kind, s.Bytes); err != nil {
			return fmt.Errorf("record disk use: %w", err)
		}
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("record disk use: %w", err)
	}
	return nil
}

// DiskDays returns the disk samples from day since (YYYY-MM-DD) on,
// oldest first.
func (d *DB) DiskDays(ctx context.Context, since string) ([]DiskSample, error) {
	rows, err := d.db.QueryContext(ctx, `SELECT day, store, kind, bytes FROM disk WHERE day >= ? ORDER BY day, store, kind`, since)
	if err != nil {
		return nil, fmt.Errorf("read disk use: %w", err)
	}
	defer rows.Close()
	var out []DiskSample
	for rows.Next() {
		var s DiskSample
		if err := rows.Scan(&s.Day, &s.Store, &s.Kind, &s.Bytes); err != nil {
			return nil, fmt.Errorf("read disk use: %w", err)
		}
		out = append(out, s)
	}
	return out, rows.Err()
}

// ErrLocked is returned by Lock when another memwatch holds the state directory.
var ErrLocked = errors.New("state directory is in use by another memwatch")

// Lock is an exclusive advisory lock on a state directory: one daemon per state.
type Lock struct{ f *os.File }

// TryLock takes the state directory's lock without waiting.
func TryLock(dir string) (*Lock, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("create state directory: %w", err)
	}
	if err := Trusted(dir); err != nil {
		return nil, err
	}
	f, err := os.OpenFile(filepath.Join(dir, "lock"), os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, fmt.Errorf("open state lock: %w", err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, fmt.Errorf("lock %s: %w", dir, ErrLocked)
		}
		return nil, fmt.Errorf("lock %s: %w", dir, err)
	}
	return &Lock{f: f}, nil
}

// Unlock releases the lock.
func (l *Lock) Unlock() error { return l.f.Close() }
