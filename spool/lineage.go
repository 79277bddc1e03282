package spool

import (
	"context"
	"database/sql"
	"encoding/binary"
	"errors"
	"fmt"
	"time"
)

// Lineage: the messages a generation starts with, recognised by content
// across the boundary.
//
// An agent that trims its log in place truncates it and writes the kept
// messages back; memwatch may capture it in between, with nothing but the
// metadata line there. That capture starts a generation with no message
// (the file was "cleared"), and the kept messages then arrive as appends,
// which a rematch never sees. An agent that rewrites its whole transcript
// in place on every save (OpenClaw up to 2026.7.1) may be captured half
// way, holding only its first messages: the rest arrive as appends too. So
// when a generation starts with no message or with only part of the
// messages of the generation before, the messages of that one that are not
// in it (its tail) are remembered; while the new generation holds nothing but matches, and
// for lineageWindow after it started, each message appended to it is
// matched in order against a run of that tail: a match is the line already
// captured (carried), not a new one. The first message that does not
// continue the run ends the matching for the generation. A genuine /new is
// not a trim: the user's next message comes seconds later, after the
// window, and is new even if it repeats an earlier one.

// lineageWindow is how long after a generation starts its first messages
// may be the previous generation's tail, still being written back.
const lineageWindow = 2 * time.Second

// maxLineage bounds the tail remembered (its newest messages).
const maxLineage = 4096

const lineageSchema = `
CREATE TABLE IF NOT EXISTS lineage (
	log    INTEGER PRIMARY KEY,
	gen    INTEGER NOT NULL, -- the generation that may start with the tail
	since  INTEGER NOT NULL, -- unix ns it started
	tail   BLOB NOT NULL,    -- (seq, hash) pairs of the tail, 16 bytes each, in file order
	k      INTEGER NOT NULL, -- the run matched so far starts at tail[k] (-1: none yet)
	r      INTEGER NOT NULL  -- and is r messages long
) WITHOUT ROWID;
`

// lineage is a log's matching state for its live generation.
type lineage struct {
	gen    int64
	since  time.Time
	tail   []liveLine
	k, r   int
	active bool
}

// loadLineage reads the log's lineage; nil when it has none for the live
// generation or its window has passed.
func (s *Spool) loadLineage(ctx context.Context, st *Log) (*lineage, error) {
	var l lineage
	var since int64
	var blob []byte
	err := s.db.QueryRowContext(ctx, `SELECT gen, since, tail, k, r FROM lineage WHERE log=?`, st.ID).Scan(&l.gen, &since, &blob, &l.k, &l.r)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read the log's lineage: %w", err)
	}
	l.since = time.Unix(0, since)
	if l.gen != st.Gen || s.Now().Sub(l.since) > lineageWindow || l.k >= 0 && l.k+l.r >= len(blob)/16 {
		return nil, nil
	}
	for i := 0; i+16 <= len(blob); i += 16 {
		l.tail = append(l.tail, liveLine{seq: int64(binary.LittleEndian.Uint64(blob[i:])), hash: binary.LittleEndian.Uint64(blob[i+8:])})
	}
	l.active = true
	return &l, nil
}

// newLineage starts the lineage of a generation gen that begins with no
// message: tail is what the previous generation held that gen does not.
func (s *Spool) newLineage(gen int64, tail []liveLine) *lineage {
	if len(tail) > maxLineage {
		tail = tail[len(tail)-maxLineage:]
	}
	return &lineage{gen: gen, since: s.Now(), tail: tail, k: -1, active: len(tail) > 0}
}

// match decides about the next message of the generation, with hash h:
// the sequence number of the tail's line it is, or false (and the
// matching ends) when it does not continue a run of the tail.
func (l *lineage) match(h uint64) (int64, bool) {
	if l == nil || !l.active {
		return 0, false
	}
	if l.k >= 0 && l.k+l.r < len(l.tail) && l.tail[l.k+l.r].hash == h {
		return l.take(), true
	}
	// Another start whose run so far is the same and continues with h
	// (the tail may hold the same message twice).
	for k := 0; k+l.r < len(l.tail); k++ {
		if l.tail[k+l.r].hash != h {
			continue
		}
		same := true
		for i := 0; same && i < l.r; i++ {
			same = l.tail[k+i].hash == l.tail[l.k+i].hash
		}
		if same {
			l.k = k
			return l.take(), true
		}
	}
	l.active = false
	return 0, false
}

// stop ends the matching: a message did not continue the run.
func (l *lineage) stop() {
	if l != nil {
		l.active = false
	}
}

func (l *lineage) take() int64 {
	seq := l.tail[l.k+l.r].seq
	l.r++
	if l.k+l.r == len(l.tail) {
		l.active = false // the whole tail is back: later messages are new
	}
	return seq
}

// isMatching reports whether log may have an active lineage.
func (s *Spool) isMatching(log int64) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.matching[log]
}

// saveLineage stores l in the capture's transaction, or removes the log's
// lineage once its matching is over (nil: nothing to do).
func (s *Spool) saveLineage(ctx context.Context, db execer, log int64, l *lineage) error {
	if l == nil {
		return nil
	}
	s.mu.Lock()
	if l.active {
		s.matching[log] = true
	} else {
		delete(s.matching, log)
	}
	s.mu.Unlock()
	var err error
	if !l.active {
		_, err = db.ExecContext(ctx, `DELETE FROM lineage WHERE log=?`, log)
	} else {
		blob := make([]byte, 16*len(l.tail))
		for i, t := range l.tail {
			binary.LittleEndian.PutUint64(blob[16*i:], uint64(t.seq))
			binary.LittleEndian.PutUint64(blob[16*i+8:], t.hash)
		}
		_, err = db.ExecContext(ctx, `INSERT OR REPLACE INTO lineage(log, gen, since, tail, k, r) VALUES(?,?,?,?,?,?)`,
			log, l.gen, l.since.UnixNano(), blob, l.k, l.r)
	}
	if err != nil {
		return fmt.Errorf("spool the log's lineage: %w", err)
	}
	return nil
}
