package spool

import (
	"context"
	"errors"
	"fmt"
	"math"
	"path/filepath"
	"strings"
	"time"

	"github.com/cespare/xxhash/v2"

	"github.com/memwatch/memwatch/confine"
)

// Records: transcripts agents keep as rows of a database rather than lines
// of a file (OpenClaw since 2026.7.2: the transcript_events table of its
// agent database). Each conversation is a log of its own, named by the
// database's path and the conversation's id (DB#ID, see RecordLog); its
// lines are the rows, numbered by the agent's own row key (a row's line
// number is its key), appended as they come. Such a log has no live file:
// Show and recall read it from the spool, and a rewrite of the file never
// applies to it.

// Record is one row of a transcript kept in a database: its key (increasing
// within the conversation) and its event, one JSON object.
type Record struct {
	Key  int64
	Data []byte
	// Size is the size of what the agent wrote, when Data holds only part
	// of it (a value read in part: see transcripts); 0 means len(Data).
	Size int64
}

// virtualIno marks a log whose lines are records, not lines of a file.
const virtualIno = -1

// RecordLog is the name of the log of one conversation of a database.
func RecordLog(db, id string) string { return filepath.Clean(db) + "#" + id }

// IsRecordLog reports a log named by RecordLog.
func IsRecordLog(rel string) bool { return strings.Contains(rel, "#") }

// RecordCursor returns the key of the last record captured into the log
// rel of root (0 when none).
func (s *Spool) RecordCursor(ctx context.Context, root confine.ID, rel string) (int64, error) {
	s.Bind(ctx, root)
	st, found, err := s.Find(ctx, root, rel)
	if err != nil || !found {
		return 0, err
	}
	return st.Offset, nil
}

// CaptureRecords appends the records whose key is above the log's cursor,
// in key order, as its next lines; isMessage tells messages from other
// events, as for a file.
func (s *Spool) CaptureRecords(ctx context.Context, root confine.ID, rel string, recs []Record, o Options) (Result, error) {
	if o.IsMessage == nil {
		return Result{}, errors.New("spool: Options.IsMessage is required")
	}
	if o.MaxLine <= 0 {
		o.MaxLine = DefaultMaxLine
	}
	rel = filepath.Clean(rel)
	if !IsRecordLog(rel) {
		return Result{}, fmt.Errorf("spool: %s is no record log (DB#ID)", rel)
	}
	s.Bind(ctx, root)
	defer s.lock(root.Key(), rel)()
	st, found, err := s.Find(ctx, root, rel)
	if err != nil {
		return Result{}, err
	}
	if !found {
		st = Log{Root: root.Key(), Path: rel, First: s.Now(), Gen: 1, ino: virtualIno}
	}
	c, err := s.begin(ctx, &st)
	if err != nil {
		return Result{}, err
	}
	defer c.abort()
	if !found {
		if err := s.addLog(ctx, c.tx, &st); err != nil {
			return Result{}, err
		}
	}
	if st.LiveFrom == 0 {
		st.LiveFrom = st.Seq + 1
	}
	for _, r := range recs {
		if r.Key <= st.Offset {
			continue // captured before
		}
		data := r.Data
		size := max(r.Size, int64(len(r.Data)))
		cut := len(data) > o.MaxLine
		if cut {
			data = data[:o.MaxLine]
		}
		st.Lines++
		st.Offset = r.Key
		if err := c.add(1, r.Key, data, size, xxhash.Sum64(r.Data), o.IsMessage(data, cut)); err != nil {
			return c.res, err
		}
	}
	c.res.Gen = 1
	if c.res.Lines == 0 && found {
		c.res.Why = "same"
		return c.res, nil
	}
	c.res.Why = "append"
	return c.res, c.flush(false)
}

// HeldLine is a message the spool holds that is not in a live file: a line
// the agent has since trimmed, cleared or deleted from its log, or a record
// of a database transcript.
type HeldLine struct {
	Log       int64  // the log's id (Log.ID)
	Seq       int64  // its sequence number in the log
	Path      string // the log, relative to the root
	Gen, Line int64  // where it was captured (the citation: Path@Gen#L<Line>)
	Data      []byte
	Time      time.Time // when it was captured
}

// Held calls fn with the messages of root's logs that are in the spool but
// not in their live files, newest first, while fn returns nil. Pruned
// lines are not held any more.
func (s *Spool) Held(ctx context.Context, root confine.ID, fn func(HeldLine) error) error {
	// The logs gone whole (or a database's conversations): every message,
	// in one query however many logs went (an agent deleting 200,000 of
	// them costs one pass over their lines, not a query each).
	st, err := s.prepared(ctx, nil, heldGone)
	if err != nil {
		return fmt.Errorf("read held lines: %w", err)
	}
	rows, err := st.QueryContext(ctx, root.Key(), virtualIno)
	if err != nil {
		return fmt.Errorf("read held lines: %w", err)
	}
	for rows.Next() {
		var h HeldLine
		var log, seq, pack, at int64
		if err := rows.Scan(&h.Path, &h.Gen, &h.Line, &h.Data, &log, &seq, &pack, &at); err != nil {
			rows.Close()
			return err
		}
		h.Time, h.Log, h.Seq = time.Unix(0, at), log, seq
		if h.Data, err = s.text(ctx, log, seq, pack, h.Data); err != nil {
			rows.Close()
			return err
		}
		if err := fn(h); err != nil {
			rows.Close()
			return err
		}
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return err
	}
	// Live logs the agent rewrote: the generations before the live one,
	// less what was carried into it (only such logs have any).
	type rewritten struct {
		id, gen int64
		path    string
	}
	var logs []rewritten
	if st, err = s.prepared(ctx, nil, heldRewritten); err != nil {
		return fmt.Errorf("read held lines: %w", err)
	}
	rows, err = st.QueryContext(ctx, root.Key(), virtualIno)
	if err != nil {
		return fmt.Errorf("read held lines: %w", err)
	}
	for rows.Next() {
		var l rewritten
		if err := rows.Scan(&l.id, &l.path, &l.gen); err != nil {
			rows.Close()
			return err
		}
		logs = append(logs, l)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return err
	}
	for _, l := range logs {
		q := heldOfRewritten + ` ORDER BY seq DESC`
		if err := s.eachHeld(ctx, l.path, q, []any{l.id, 0, int64(math.MaxInt64), l.gen, l.gen}, fn); err != nil {
			return err
		}
	}
	return nil
}

// The queries of Held, prepared once.
const (
	heldGone = `SELECT l.path, n.gen, n.line, n.data, n.log, n.seq, n.pack, n.time FROM logs l JOIN lines n ON n.log = l.id
		WHERE l.root=? AND (l.missing=1 OR l.ino=?) AND n.msg=1 AND n.data IS NOT NULL ORDER BY l.path, n.seq DESC`
	heldRewritten = `SELECT id, path, gen FROM logs WHERE root=? AND missing=0 AND ino!=? AND gen>1 ORDER BY path`
	// heldOfRewritten is a rewritten log's held lines (the generations
	// before the live one, less what was carried into it) of sequence
	// numbers in a range: log, above, at most, the live generation twice.
	heldOfRewritten = `SELECT gen, line, data, log, seq, pack, time FROM lines l
		WHERE log=? AND seq>? AND seq<=? AND msg=1 AND data IS NOT NULL AND gen<?
		AND NOT EXISTS (SELECT 1 FROM carried c WHERE c.log=l.log AND c.gen=? AND c.seq=l.seq)`
	// heldOfGone is the same of a log gone whole or a database's
	// conversation: every message.
	heldOfGone = `SELECT gen, line, data, log, seq, pack, time FROM lines
		WHERE log=? AND seq>? AND seq<=? AND msg=1 AND data IS NOT NULL`
)

func (s *Spool) eachHeld(ctx context.Context, path, q string, args []any, fn func(HeldLine) error) error {
	rows, err := s.db.QueryContext(ctx, q, args...)
	if err != nil {
		return fmt.Errorf("read held lines: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		h := HeldLine{Path: path}
		var log, seq, pack, at int64
		if err := rows.Scan(&h.Gen, &h.Line, &h.Data, &log, &seq, &pack, &at); err != nil {
			return err
		}
		h.Time, h.Log, h.Seq = time.Unix(0, at), log, seq
		var err error
		if h.Data, err = s.text(ctx, log, seq, pack, h.Data); err != nil {
			return err
		}
		if err := fn(h); err != nil {
			return err
		}
	}
	return rows.Err()
}

// HeldOf calls fn with the held lines of one log, as Logs listed it,
// whose sequence numbers are above after and at most the log's last, in
// the order they were captured: a count of them made up to after,
// continued, at the cost of what was captured since. A log neither gone,
// nor a database's conversation, nor rewritten holds none.
func (s *Spool) HeldOf(ctx context.Context, l Log, after int64, fn func(HeldLine) error) error {
	switch {
	case l.Missing || l.ino == virtualIno:
		return s.eachHeld(ctx, l.Path, heldOfGone+` ORDER BY seq`, []any{l.ID, after, l.Seq}, fn)
	case l.Gen > 1:
		return s.eachHeld(ctx, l.Path, heldOfRewritten+` ORDER BY seq`, []any{l.ID, after, l.Seq, l.Gen, l.Gen}, fn)
	}
	return nil
}

// HoldsLines reports whether l may hold lines that are in no live file
// (HeldOf has some to read).
func (l Log) HoldsLines() bool { return l.Missing || l.ino == virtualIno || l.Gen > 1 }

// manyHeldLogs is how many logs HeldOfLogs reads a query each, at most:
// past it, one pass over the root's held lines reads them (an agent that
// deleted 200,000 sessions costs one pass, not a query each).
const manyHeldLogs = 64

// HeldOfLogs is HeldOf of each of logs, some of root's as Logs listed
// them, from after(l) on.
func (s *Spool) HeldOfLogs(ctx context.Context, root confine.ID, logs []Log, after func(Log) int64, fn func(HeldLine) error) error {
	if len(logs) <= manyHeldLogs {
		for _, l := range logs {
			if err := s.HeldOf(ctx, l, after(l), fn); err != nil {
				return err
			}
		}
		return nil
	}
	span := make(map[int64][2]int64, len(logs)) // above, at most
	for _, l := range logs {
		span[l.ID] = [2]int64{after(l), l.Seq}
	}
	return s.Held(ctx, root, func(h HeldLine) error {
		if sp, ok := span[h.Log]; ok && h.Seq > sp[0] && h.Seq <= sp[1] {
			return fn(h)
		}
		return nil
	})
}

// Stamp is what a count of l's held lines was made of: its last sequence
// number, its generation, whether it is gone, and a hash of its path (a
// tally kept beside another spool, its ids given to other logs, vouches
// for none of them). A log whose stamp changed may hold other lines;
// GrownSince tells one that only gained.
func (l Log) Stamp() string {
	return fmt.Sprintf("%d:%d:%t:%x", l.Seq, l.Gen, l.Missing, uint32(xxhash.Sum64String(l.Path)))
}

// GrownSince reports whether l only gained lines since stamp was its
// Stamp (the same log, generation, as gone as it was), and the last
// sequence number it had then.
func (l Log) GrownSince(stamp string) (int64, bool) {
	var seq, gen int64
	var missing bool
	var path uint32
	if _, err := fmt.Sscanf(stamp, "%d:%d:%t:%x", &seq, &gen, &missing, &path); err != nil {
		return 0, false
	}
	return seq, gen == l.Gen && missing == l.Missing && seq <= l.Seq && path == uint32(xxhash.Sum64String(l.Path))
}

// HeldLines is Held of a root (answer.HeldFunc).
func (s *Spool) HeldLines(ctx context.Context, root *confine.Root, fn func(HeldLine) error) error {
	return s.Held(ctx, root.ID(), fn)
}

// SearchHeld is Held for recall (recall.Options.Held): the held messages
// of root's logs as (log, generation, line, text).
func (s *Spool) SearchHeld(ctx context.Context, root *confine.Root, fn func(rel string, gen, line int64, raw []byte) error) error {
	return s.HeldLines(ctx, root, func(h HeldLine) error { return fn(h.Path, h.Gen, h.Line, h.Data) })
}

// RootKeys lists the roots the spool holds logs of, by key
// (confine.ID.Key).
func (s *Spool) RootKeys(ctx context.Context) ([]string, error) {
	rows, err := s.db.QueryContext(ctx, `SELECT DISTINCT root FROM logs ORDER BY root`)
	if err != nil {
		return nil, fmt.Errorf("list spool roots: %w", err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var k string
		if err := rows.Scan(&k); err != nil {
			return nil, err
		}
		out = append(out, k)
	}
	return out, rows.Err()
}

// Captured calls fn with every message of root's logs the spool holds,
// live or not, newest first, while fn returns nil: on a central node,
// a host's replicated spool is all there is of its logs (their files are
// on the host). Pruned lines are gone.
func (s *Spool) Captured(ctx context.Context, root confine.ID, fn func(HeldLine) error) error {
	logs, err := s.Logs(ctx, root)
	if err != nil {
		return err
	}
	for _, st := range logs {
		q := `SELECT gen, line, data, log, seq, pack FROM lines WHERE log=? AND msg=1 AND data IS NOT NULL ORDER BY seq DESC`
		if err := s.eachHeld(ctx, st.Path, q, []any{st.ID}, fn); err != nil {
			return err
		}
	}
	return nil
}

// CapturedLine is a message of a log as the spool holds it: its sequence
// number and where it was captured; Data is nil for a line longer than
// CapturedSince's maxLine.
type CapturedLine struct {
	Seq, Gen, Line int64
	Data           []byte
}

// CapturedSince calls fn with the messages of the log with this id
// captured after sequence number after, in the order they were captured,
// at most limit of them, while fn returns nil: what a central node copies
// of a host's replicated spool since it last did. Pruned lines are left
// out; a line longer than maxLine comes without its data, which is never
// read (a host's state is the host's to write).
func (s *Spool) CapturedSince(ctx context.Context, log, after int64, limit, maxLine int, fn func(CapturedLine) error) error {
	rows, err := s.db.QueryContext(ctx, `SELECT seq, gen, line, CASE WHEN pack>0 OR length(data)<=? THEN data END, pack FROM lines WHERE log=? AND seq>? AND msg=1 AND data IS NOT NULL ORDER BY seq LIMIT ?`, maxLine, log, after, limit)
	if err != nil {
		return fmt.Errorf("read captured lines: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var l CapturedLine
		var pack int64
		if err := rows.Scan(&l.Seq, &l.Gen, &l.Line, &l.Data, &pack); err != nil {
			return err
		}
		if pack > 0 {
			data, err := s.text(ctx, log, l.Seq, pack, l.Data)
			if err != nil {
				return err
			}
			if l.Data = data; len(data) > maxLine {
				l.Data = nil
			}
		}
		if err := fn(l); err != nil {
			return err
		}
	}
	return rows.Err()
}
