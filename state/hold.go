package state

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/memwatch/memwatch/control"
)

// A person's undo is a decision: the rule that made the undone change
// does not make it again on that file until the file has grown past the
// rule's threshold again by the agent's own new content, or the person
// asks for it (memwatch redo). Holds remembers each such decision.

// Hold is a rule held off a file by an undo (the status answer's type).
type Hold = control.Hold

const holdNS = "hold"

func holdKey(root, target string) string { return root + "\x00" + target }

// PutHold records h (replacing the hold of its file).
func (d *DB) PutHold(ctx context.Context, h Hold) error {
	b, err := json.Marshal(h)
	if err != nil {
		return err
	}
	return d.Put(ctx, holdNS, holdKey(h.Root, h.Target), b)
}

// GetHold returns the hold of a file; ok is false when there is none.
func (d *DB) GetHold(ctx context.Context, root, target string) (Hold, bool, error) {
	b, ok, err := d.Get(ctx, holdNS, holdKey(root, target))
	if err != nil || !ok {
		return Hold{}, false, err
	}
	var h Hold
	if err := json.Unmarshal(b, &h); err != nil {
		return Hold{}, false, nil // unreadable: as if none
	}
	return h, true, nil
}

// DropHold forgets the hold of a file.
func (d *DB) DropHold(ctx context.Context, root, target string) error {
	return d.PutMany(ctx, holdNS, map[string][]byte{holdKey(root, target): nil})
}

// maxHolds bounds the holds Holds lists.
const maxHolds = 1000

// Holds lists the holds in force, newest first (at most maxHolds).
func (d *DB) Holds(ctx context.Context) ([]Hold, error) {
	rows, err := d.db.QueryContext(ctx, `SELECT value FROM kv WHERE ns=? LIMIT ?`, holdNS, maxHolds)
	if err != nil {
		return nil, fmt.Errorf("read holds: %w", err)
	}
	defer rows.Close()
	var out []Hold
	for rows.Next() {
		var b []byte
		if err := rows.Scan(&b); err != nil {
			return nil, err
		}
		var h Hold
		if json.Unmarshal(b, &h) == nil {
			out = append(out, h)
		}
	}
	for i := 1; i < len(out); i++ {
		for j := i; j > 0 && out[j].Time.After(out[j-1].Time); j-- {
			out[j], out[j-1] = out[j-1], out[j]
		}
	}
	return out, rows.Err()
}

// ByKey returns the newest done record of a file with key; ok is false
// when there is none.
func (d *DB) ByKey(ctx context.Context, root, target, key string) (Record, bool, error) {
	r, err := scanRecord(d.db.QueryRowContext(ctx, `SELECT `+recordCols+` FROM journal WHERE root=? AND target=? AND key=? AND outcome=? ORDER BY id DESC LIMIT 1`, root, target, key, Done))
	if errors.Is(err, sql.ErrNoRows) {
		return r, false, nil
	}
	return r, err == nil, err
}

// WithKey lists the done records of root whose key is key, at most 16.
func (d *DB) WithKey(ctx context.Context, root, key string) ([]Record, error) {
	return d.records(ctx, `SELECT `+recordCols+` FROM journal WHERE root=? AND key=? AND outcome=? ORDER BY id LIMIT 16`, root, key, Done)
}
