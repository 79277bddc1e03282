package state

import (
	"context"
	"database/sql"
	"fmt"

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
