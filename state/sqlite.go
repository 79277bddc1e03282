package state

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"path/filepath"
)

// Opening a state database is one sequence for the journal, the spool
// and the versions: the directory made private and trusted, the file
// private, SQLite in WAL mode with one writer connection (writers wait on
// SQLite anyway; one connection keeps our goroutines from waiting on each
// other's locks), the schema created.

// Durability is a database's synchronous setting: the journal syncs
// every commit (FULL), the spool and versions at checkpoints (NORMAL).
type Durability string

const (
	SyncFull   Durability = "FULL"
	SyncNormal Durability = "NORMAL"
)

// OpenDB opens (creating if needed) the database file in the state
// directory dir with schema, for writing. what names it in errors.
func OpenDB(ctx context.Context, dir, file, what string, sync Durability, schema string) (*sql.DB, string, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, "", fmt.Errorf("create state directory: %w", err)
	}
	if err := Trusted(dir); err != nil {
		return nil, "", err
	}
	path := filepath.Join(dir, file)
	if err := Private(path); err != nil {
		return nil, "", err
	}
	db, err := sql.Open("sqlite", "file:"+path+"?_pragma=journal_mode(WAL)&_pragma=synchronous("+string(sync)+")&_pragma=busy_timeout(10000)&_txlock=immediate")
	if err != nil {
		return nil, "", fmt.Errorf("open %s %s: %w", what, path, err)
	}
	db.SetMaxOpenConns(1)
	if _, err := db.ExecContext(ctx, schema); err != nil {
		db.Close()
		return nil, "", fmt.Errorf("initialise %s %s: %w", what, path, err)
	}
	return db, path, nil
}

// Column is one a later release added to a table.
type Column struct{ Table, Name, Decl string }

// AddColumns adds the columns a database of an earlier release lacks.
// Another process opening the database at the same moment may add one
// first: a column there after a failed ALTER is no error.
func AddColumns(ctx context.Context, db *sql.DB, cols ...Column) error {
	has := func(c Column) (bool, error) {
		var n int
		err := db.QueryRowContext(ctx, `SELECT COUNT(*) FROM pragma_table_info(?) WHERE name = ?`, c.Table, c.Name).Scan(&n)
		return n > 0, err
	}
	for _, c := range cols {
		ok, err := has(c)
		if err != nil {
			return err
		}
		if ok {
			continue
		}
		if _, err := db.ExecContext(ctx, `ALTER TABLE `+c.Table+` ADD COLUMN `+c.Name+` `+c.Decl); err != nil {
			if ok, _ := has(c); ok {
				continue
			}
			return err
		}
	}
	return nil
}
