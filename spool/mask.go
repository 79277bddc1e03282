package spool

import (
	"context"
	"fmt"

	"github.com/cespare/xxhash/v2"
)

// Mask replaces the text of every captured line of log (every generation)
// that mask changes with what it returns, and takes the old text out of
// the blocks that held it: the replaced text is kept nowhere in the
// spool. A masked line whose whole text was kept gets the hash of its new
// text, so the file masked the same way is read as the same lines (they
// are carried, not captured again). It returns how many lines changed.
// Used by the opt-in scrub of credentials (scrub_secrets), which rewrites
// the agent's file the same way.
func (s *Spool) Mask(ctx context.Context, log int64, mask func(line []byte) ([]byte, bool)) (int, error) {
	defer s.forgetSame() // rows changed other than by a capture
	type change struct {
		seq  int64
		text []byte
		hash *int64 // nil: a cut line keeps its hash
	}
	var changes []change
	rows, err := s.db.QueryContext(ctx, `SELECT seq, size, pack, data FROM lines WHERE log=? AND data IS NOT NULL ORDER BY seq`, log)
	if err != nil {
		return 0, fmt.Errorf("mask spool log %d: %w", log, err)
	}
	for rows.Next() {
		var seq, size, pack int64
		var data []byte
		if err := rows.Scan(&seq, &size, &pack, &data); err != nil {
			rows.Close()
			return 0, fmt.Errorf("mask spool log %d: %w", log, err)
		}
		text, err := s.text(ctx, log, seq, pack, data)
		if err != nil {
			rows.Close()
			return 0, err
		}
		masked, ok := mask(text)
		if !ok {
			continue
		}
		c := change{seq: seq, text: masked}
		if int64(len(text)) == size {
			h := int64(xxhash.Sum64(masked))
			c.hash = &h
		}
		changes = append(changes, c)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return 0, fmt.Errorf("mask spool log %d: %w", log, err)
	}
	if len(changes) == 0 {
		return 0, nil
	}
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return 0, fmt.Errorf("mask spool log %d: %w", log, err)
	}
	defer tx.Rollback()
	var inline int64
	for _, c := range changes {
		// Inline: the line's block no longer counts it, and repack takes
		// the old text out of the block.
		q, args := `UPDATE lines SET data=?, pack=0 WHERE log=? AND seq=?`, []any{c.text, log, c.seq}
		if c.hash != nil {
			q, args = `UPDATE lines SET data=?, pack=0, hash=?, size=? WHERE log=? AND seq=?`, []any{c.text, *c.hash, len(c.text), log, c.seq}
		}
		if _, err := tx.ExecContext(ctx, q, args...); err != nil {
			return 0, fmt.Errorf("mask spool log %d: %w", log, err)
		}
		inline += int64(len(c.text))
	}
	if _, err := tx.ExecContext(ctx, `UPDATE logs SET inline=inline+? WHERE id=?`, inline, log); err != nil {
		return 0, fmt.Errorf("mask spool log %d: %w", log, err)
	}
	if err := s.repack(ctx, tx); err != nil {
		return 0, err
	}
	s.blocks.drop(log)
	if err := tx.Commit(); err != nil {
		return 0, fmt.Errorf("mask spool log %d: %w", log, err)
	}
	s.blocks.drop(log)
	return len(changes), nil
}
