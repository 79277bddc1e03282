package versions

import (
	"context"
	"database/sql"
	"fmt"
	"time"
)

// Retention bounds the versions of one root. Zero fields keep everything.
type Retention struct {
	Keep     int           // versions per file
	MaxAge   time.Duration // older versions go
	MaxBytes int64         // stored bytes per root (compressed objects), oldest versions first
}

// Active reports whether the retention removes anything.
func (r Retention) Active() bool { return r.Keep > 0 || r.MaxAge > 0 || r.MaxBytes > 0 }

// Pruned is what Prune removed.
type Pruned struct {
	Versions int   `json:"versions"`
	Bytes    int64 `json:"bytes"` // stored bytes of the objects removed
}

// Prune removes the versions of root that r does not keep: beyond Keep per
// file, older than MaxAge, then the oldest until the root's objects fit
// MaxBytes. A file's newest version always stays. Objects no version uses
// any more are removed; a delta that was based on one is stored whole
// first, so every version left can be read.
func (s *Store) Prune(ctx context.Context, root string, r Retention) (Pruned, error) {
	if !r.Active() {
		return Pruned{}, nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return Pruned{}, fmt.Errorf("prune versions: %w", err)
	}
	defer tx.Rollback()
	var p Pruned
	del := func(q string, args ...any) error {
		res, err := tx.ExecContext(ctx, q, args...)
		if err != nil {
			return fmt.Errorf("prune versions: %w", err)
		}
		n, _ := res.RowsAffected()
		p.Versions += int(n)
		return nil
	}
	files := `(SELECT id FROM files WHERE root=?)`
	notHead := ` AND n < (SELECT head FROM files WHERE id=versions.file)`
	if r.Keep > 0 {
		if err := del(`DELETE FROM versions WHERE file IN `+files+` AND n <= (SELECT head FROM files WHERE id=versions.file) - ?`+notHead, root, r.Keep); err != nil {
			return Pruned{}, err
		}
	}
	if r.MaxAge > 0 {
		if err := del(`DELETE FROM versions WHERE file IN `+files+` AND time < ?`+notHead, root, s.Now().Add(-r.MaxAge).UnixNano()); err != nil {
			return Pruned{}, err
		}
	}
	freed, err := s.collect(ctx, tx)
	if err != nil {
		return Pruned{}, err
	}
	p.Bytes += freed
	if r.MaxBytes > 0 {
		for {
			var used int64
			if err := tx.QueryRowContext(ctx, `SELECT coalesce(sum(length(o.data)),0) FROM objects o WHERE o.sha IN (SELECT sha FROM versions WHERE file IN `+files+`)`, root).Scan(&used); err != nil {
				return Pruned{}, fmt.Errorf("prune versions: %w", err)
			}
			if used <= r.MaxBytes {
				break
			}
			// A batch: the oldest tenth of the versions that may go.
			var old int64
			if err := tx.QueryRowContext(ctx, `SELECT count(*) FROM versions WHERE file IN `+files+notHead, root).Scan(&old); err != nil {
				return Pruned{}, fmt.Errorf("prune versions: %w", err)
			}
			if old == 0 {
				break // only newest versions are left
			}
			batch := max(old/10, 1)
			if err := del(`DELETE FROM versions WHERE (file, n) IN (SELECT file, n FROM versions WHERE file IN `+files+notHead+` ORDER BY time LIMIT ?)`, root, batch); err != nil {
				return Pruned{}, err
			}
			freed, err := s.collect(ctx, tx)
			if err != nil {
				return Pruned{}, err
			}
			p.Bytes += freed
		}
	}
	if err := tx.Commit(); err != nil {
		return Pruned{}, fmt.Errorf("prune versions: %w", err)
	}
	if p.Versions > 0 {
		s.cache = map[string][]byte{}
		s.size = 0
	}
	return p, nil
}

// collect removes the objects no version uses. A delta based on one is
// first stored whole (or against the removed one's base).
func (s *Store) collect(ctx context.Context, tx *sql.Tx) (int64, error) {
	rows, err := tx.QueryContext(ctx, `SELECT sha FROM objects WHERE sha NOT IN (SELECT sha FROM versions)`)
	if err != nil {
		return 0, fmt.Errorf("collect versions: %w", err)
	}
	var dead []string
	for rows.Next() {
		var sha string
		if err := rows.Scan(&sha); err != nil {
			rows.Close()
			return 0, err
		}
		dead = append(dead, sha)
	}
	rows.Close()
	var freed int64
	for _, sha := range dead {
		// Its dependants are stored whole before it goes.
		deps, err := tx.QueryContext(ctx, `SELECT sha FROM objects WHERE base=?`, sha)
		if err != nil {
			return 0, fmt.Errorf("collect versions: %w", err)
		}
		var ds []string
		for deps.Next() {
			var d string
			if err := deps.Scan(&d); err != nil {
				deps.Close()
				return 0, err
			}
			ds = append(ds, d)
		}
		deps.Close()
		for _, d := range ds {
			data, err := s.content(ctx, tx, d)
			if err != nil {
				return 0, err
			}
			enc, err := s.encode(data, "", nil)
			if err != nil {
				return 0, err
			}
			if _, err := tx.ExecContext(ctx, `UPDATE objects SET base='', depth=0, data=? WHERE sha=?`, enc, d); err != nil {
				return 0, fmt.Errorf("collect versions: %w", err)
			}
			// Deltas on d now have shorter chains; their depths stay an
			// upper bound, which is all putObject needs.
		}
		var n int64
		if err := tx.QueryRowContext(ctx, `SELECT length(data) FROM objects WHERE sha=?`, sha).Scan(&n); err == nil {
			freed += n
		}
		if _, err := tx.ExecContext(ctx, `DELETE FROM objects WHERE sha=?`, sha); err != nil {
			return 0, fmt.Errorf("collect versions: %w", err)
		}
	}
	return freed, nil
}
