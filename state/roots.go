package state

import (
	"context"
	"database/sql"
	"fmt"
	"sync"

	"github.com/memwatch/memwatch/confine"
)

// UnbindRoots rewrites the root keys (confine.ID.Key) of table's rows as
// unbound keys (confine.ID.Unbound): same path and owner, no directory.
// The spool and the versions run it on a state restored from a replica,
// since another host's device and inode numbers name nothing here; the
// first directory opened at the path with the same owner takes the rows.
// table is one of memwatch's own tables, never user input. It returns how
// many roots it unbound.
func UnbindRoots(ctx context.Context, db *sql.DB, table string) (int, error) {
	rows, err := db.QueryContext(ctx, `SELECT DISTINCT root FROM `+table)
	if err != nil {
		return 0, fmt.Errorf("unbind the roots of %s: %w", table, err)
	}
	var keys []string
	for rows.Next() {
		var k string
		if err := rows.Scan(&k); err != nil {
			rows.Close()
			return 0, err
		}
		keys = append(keys, k)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return 0, err
	}
	n := 0
	for _, k := range keys {
		id, ok := confine.ParseKey(k)
		if !ok || id.Dev == 0 && id.Ino == 0 {
			continue // malformed, a bare path, or unbound already
		}
		if _, err := db.ExecContext(ctx, `UPDATE OR IGNORE `+table+` SET root=? WHERE root=?`, id.Unbound(), k); err != nil {
			return n, fmt.Errorf("unbind the roots of %s: %w", table, err)
		}
		n++
	}
	return n, nil
}

// BindRoots gives root's ID the rows of table kept under its bindable keys
// (confine.ID.Bindable: its bare path, and its path unbound with its
// owner's uid). A row of that path already under the ID stays as it is
// (the other is left unbound). table is one of memwatch's own tables.
func BindRoots(ctx context.Context, db *sql.DB, table string, root confine.ID) error {
	b := root.Bindable()
	if _, err := db.ExecContext(ctx, `UPDATE OR IGNORE `+table+` SET root=? WHERE root IN (?,?)`, root.Key(), b[0], b[1]); err != nil {
		return fmt.Errorf("bind the %s of %s: %w", table, root.Path, err)
	}
	return nil
}

// Bindings remembers the roots bound in this run, so BindRoots runs once
// per root key (a failure is tried again the next time). Safe for
// concurrent use; a read-only store binds nothing.
type Bindings struct {
	ReadOnly bool
	mu       sync.Mutex
	m        map[string]bool
	// none: the table held no row under a bindable key when Check looked,
	// so no Bind can move a row: each root a run opens costs no UPDATE
	// (10,000 session directories were 20,000 of them at start). Only
	// UnbindRoots writes such keys; Unbound clears it.
	none bool
}

// Check looks for rows of table kept under bindable keys (a bare path, an
// unbound key); with none, Once binds nothing until Unbound. A store runs
// it when it opens. An error leaves the bindings as they were.
func (b *Bindings) Check(ctx context.Context, db *sql.DB, table string) error {
	var any bool
	err := db.QueryRowContext(ctx, `SELECT EXISTS(SELECT 1 FROM `+table+` WHERE instr(root, char(0))=0 OR instr(root, char(0)||'0:0:')>0)`).Scan(&any)
	if err != nil {
		return fmt.Errorf("look for unbound roots in %s: %w", table, err)
	}
	b.mu.Lock()
	b.none = !any
	b.mu.Unlock()
	return nil
}

// Unbound says rows may be under bindable keys again (UnbindRoots ran).
func (b *Bindings) Unbound() {
	b.mu.Lock()
	b.none = false
	b.m = nil
	b.mu.Unlock()
}

// maxBindings bounds the keys remembered (past it they are bound again).
const maxBindings = 100_000

// Once runs bind for key unless it ran successfully before, and reports
// whether it ran now (and succeeded).
func (b *Bindings) Once(key string, bind func() error) bool {
	if b.ReadOnly {
		return false
	}
	b.mu.Lock()
	done := b.none || b.m[key]
	b.mu.Unlock()
	if done || bind() != nil {
		return false
	}
	b.mu.Lock()
	if b.m == nil || len(b.m) >= maxBindings {
		b.m = map[string]bool{}
	}
	b.m[key] = true
	b.mu.Unlock()
	return true
}
