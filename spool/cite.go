package spool

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/cespare/xxhash/v2"

	"github.com/memwatch/memwatch/confine"
)

// Cite renders the citation of lines of the log path: path#Lx-y for lines
// of generation 1, path@g#Lx-y for a later generation, one part per
// generation the lines span ("path@3#L40-52, path@4#L1-5").
func Cite(path string, lines []Line) string {
	path = filepath.ToSlash(path)
	var parts []string
	for i := 0; i < len(lines); {
		j := i
		lo, hi := lines[i].Line, lines[i].Line
		for j < len(lines) && lines[j].Gen == lines[i].Gen {
			lo, hi = min(lo, lines[j].Line), max(hi, lines[j].Line)
			j++
		}
		parts = append(parts, citeOne(path, lines[i].Gen, lo, hi))
		i = j
	}
	return strings.Join(parts, ", ")
}

func citeOne(path string, gen, lo, hi int64) string {
	at := ""
	if gen > 1 {
		at = "@" + strconv.FormatInt(gen, 10)
	}
	if lo == hi {
		return fmt.Sprintf("%s%s#L%d", path, at, lo)
	}
	return fmt.Sprintf("%s%s#L%d-%d", path, at, lo, hi)
}

// RangeID identifies a range of a log by content: the log's path, the
// first sequence number and every line's hash. Two ranges with the same
// line numbers but other lines have other IDs; the same range read again
// after a crash has the same one.
func RangeID(path string, lines []Line) string {
	d := xxhash.New()
	d.WriteString(filepath.ToSlash(path))
	var b [8]byte
	if len(lines) > 0 {
		binary.LittleEndian.PutUint64(b[:], uint64(lines[0].Seq))
		d.Write(b[:])
	}
	for _, l := range lines {
		binary.LittleEndian.PutUint64(b[:], l.Hash)
		d.Write(b[:])
	}
	return fmt.Sprintf("%016x", d.Sum64())
}

// Citation is a parsed citation of log lines.
type Citation struct {
	Path     string // relative to the root
	Gen      int64  // 1 when the citation names none
	From, To int64
}

var citeRE = regexp.MustCompile(`^(.+?)(?:@(\d+))?#L(\d+)(?:-L?(\d+))?$`)

// ParseCitation reads "path#L10", "path#L10-20" or "path@3#L10-20".
func ParseCitation(s string) (Citation, error) {
	m := citeRE.FindStringSubmatch(strings.TrimSpace(s))
	if m == nil {
		return Citation{}, fmt.Errorf("citation %q: want PATH#Lx, PATH#Lx-y or PATH@GEN#Lx-y", s)
	}
	c := Citation{Path: m[1], Gen: 1}
	if m[2] != "" {
		c.Gen, _ = strconv.ParseInt(m[2], 10, 64)
	}
	c.From, _ = strconv.ParseInt(m[3], 10, 64)
	c.To = c.From
	if m[4] != "" {
		c.To, _ = strconv.ParseInt(m[4], 10, 64)
	}
	if c.Gen < 1 || c.From < 1 || c.To < c.From || c.To-c.From > 100000 {
		return Citation{}, fmt.Errorf("citation %q: bad generation or line range", s)
	}
	return c, nil
}

// Shown is one line of a citation: from the live file or the spool.
type Shown struct {
	Line   int64
	Data   []byte
	Source string // "live", "spool", "pruned" or "missing"
}

// ErrUnknownLog means the spool never captured the cited log.
var ErrUnknownLog = errors.New("the spool has no such log")

// Show returns the lines a citation names. While the cited generation is
// the live one and the live file still holds those lines unchanged, they
// come from the file; otherwise from the spool (which says when a line's
// text was pruned).
func (s *Spool) Show(ctx context.Context, root *confine.Root, c Citation) ([]Shown, error) {
	st, found, err := s.Find(ctx, root.ID(), c.Path)
	if err != nil {
		return nil, err
	}
	if !found {
		return nil, fmt.Errorf("%s in %s: %w", c.Path, root.Path(), ErrUnknownLog)
	}
	if c.Gen > st.Gen {
		return nil, fmt.Errorf("%s has no generation %d yet (the live one is %d)", c.Path, c.Gen, st.Gen)
	}
	want := map[int64]Line{}
	rows, err := s.db.QueryContext(ctx, `SELECT line, seq, hash, size, data FROM lines WHERE log=? AND gen=? AND line BETWEEN ? AND ?
		UNION ALL SELECT c.line, c.seq, l.hash, l.size, l.data FROM carried c JOIN lines l ON l.log=c.log AND l.seq=c.seq WHERE c.log=? AND c.gen=? AND c.line BETWEEN ? AND ?`,
		st.ID, c.Gen, c.From, c.To, st.ID, c.Gen, c.From, c.To)
	if err != nil {
		return nil, fmt.Errorf("read spool: %w", err)
	}
	for rows.Next() {
		var l Line
		var h int64
		if err := rows.Scan(&l.Line, &l.Seq, &h, &l.Size, &l.Data); err != nil {
			rows.Close()
			return nil, err
		}
		l.Hash = uint64(h)
		want[l.Line] = l
	}
	rows.Close()
	var live map[int64][]byte
	if c.Gen == st.Gen && !st.Missing {
		live = liveLines(root, c.Path, c.From, c.To)
	}
	out := make([]Shown, 0, c.To-c.From+1)
	for n := c.From; n <= c.To; n++ {
		l, ok := want[n]
		switch {
		case !ok:
			out = append(out, Shown{Line: n, Source: "missing"})
		case live[n] != nil && xxhash.Sum64(live[n]) == l.Hash:
			out = append(out, Shown{Line: n, Data: live[n], Source: "live"})
		case l.Data == nil:
			out = append(out, Shown{Line: n, Source: "pruned"})
		default:
			out = append(out, Shown{Line: n, Data: l.Data, Source: "spool"})
		}
	}
	return out, nil
}

// liveLines reads lines from..to of a live file (nil when it cannot).
// ShowFile returns the lines c names of a file the spool does not keep (a
// note: HISTORY.md, MEMORY.md, as recall cites them) as it is now; ok is
// false when root has no such regular file.
func ShowFile(root *confine.Root, c Citation) ([]Shown, bool) {
	if c.Gen != 1 {
		return nil, false
	}
	f, fi, err := root.OpenRead(c.Path)
	if err != nil {
		return nil, false
	}
	f.Close()
	if !fi.Mode().IsRegular() {
		return nil, false
	}
	live := liveLines(root, c.Path, c.From, c.To)
	out := make([]Shown, 0, c.To-c.From+1)
	for n := c.From; n <= c.To; n++ {
		if l, ok := live[n]; ok {
			out = append(out, Shown{Line: n, Data: l, Source: "live"})
		} else {
			out = append(out, Shown{Line: n, Source: "missing"})
		}
	}
	return out, true
}

func liveLines(root *confine.Root, rel string, from, to int64) map[int64][]byte {
	f, _, err := root.OpenRead(rel)
	if err != nil {
		return nil
	}
	defer f.Close()
	out := map[int64][]byte{}
	var n int64
	scanLines(f, 0, DefaultMaxLine, func(data []byte, size int64, hash uint64, off int64) error {
		n++
		if n > to {
			return errStop
		}
		if n >= from && int64(len(data)) == size {
			out[n] = append([]byte(nil), data...)
		}
		return nil
	})
	return out
}

var errStop = errors.New("stop")

// PruneStats says what Prune removed.
type PruneStats struct {
	Lines int64 // lines whose text was dropped
	Bytes int64 // of text
}

// Prune drops the text of lines every consumer of their log is done with,
// captured before cutoff. Lines of a live generation keep their hash (and
// so their identity); lines of older generations are removed whole. A log
// no consumer ever read is left alone (its consumer may not have run yet).
func (s *Spool) Prune(ctx context.Context, cutoff time.Time) (PruneStats, error) {
	var st PruneStats
	err := s.db.QueryRowContext(ctx, `SELECT COUNT(*), COALESCE(SUM(length(l.data)),0) FROM lines l JOIN logs g ON g.id=l.log
		WHERE l.data IS NOT NULL AND l.time < ? AND l.seq <= (SELECT MIN(p.seq) FROM progress p WHERE p.log=l.log)`, cutoff.UnixNano()).Scan(&st.Lines, &st.Bytes)
	if err != nil {
		return st, fmt.Errorf("prune spool: %w", err)
	}
	if st.Lines == 0 {
		return st, nil
	}
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return st, fmt.Errorf("prune spool: %w", err)
	}
	defer tx.Rollback()
	// Older generations: nothing refers to them but citations, which then
	// say the text was pruned.
	if _, err := tx.ExecContext(ctx, `DELETE FROM lines WHERE time < ? AND gen < (SELECT g.gen FROM logs g WHERE g.id=lines.log)
		AND seq <= (SELECT MIN(p.seq) FROM progress p WHERE p.log=lines.log)
		AND NOT EXISTS (SELECT 1 FROM carried c JOIN logs g ON g.id=c.log WHERE c.log=lines.log AND c.seq=lines.seq AND c.gen=g.gen)`, cutoff.UnixNano()); err != nil {
		return st, fmt.Errorf("prune spool: %w", err)
	}
	if _, err := tx.ExecContext(ctx, `UPDATE lines SET data=NULL WHERE data IS NOT NULL AND time < ?
		AND seq <= (SELECT MIN(p.seq) FROM progress p WHERE p.log=lines.log)`, cutoff.UnixNano()); err != nil {
		return st, fmt.Errorf("prune spool: %w", err)
	}
	if _, err := tx.ExecContext(ctx, `DELETE FROM carried WHERE gen < (SELECT g.gen FROM logs g WHERE g.id=carried.log)`); err != nil {
		return st, fmt.Errorf("prune spool: %w", err)
	}
	return st, tx.Commit()
}

// Forget removes a log whose file is gone and whose lines every consumer
// is done with, older than cutoff.
func (s *Spool) Forget(ctx context.Context, cutoff time.Time) (int64, error) {
	res, err := s.db.ExecContext(ctx, `DELETE FROM logs WHERE missing=1 AND changed < ?
		AND seq <= COALESCE((SELECT MIN(p.seq) FROM progress p WHERE p.log=logs.id), 0)`, cutoff.UnixNano())
	if err != nil {
		return 0, fmt.Errorf("forget spool logs: %w", err)
	}
	n, _ := res.RowsAffected()
	if n > 0 {
		for _, q := range []string{`DELETE FROM lines WHERE log NOT IN (SELECT id FROM logs)`,
			`DELETE FROM carried WHERE log NOT IN (SELECT id FROM logs)`,
			`DELETE FROM lineage WHERE log NOT IN (SELECT id FROM logs)`,
			`DELETE FROM progress WHERE log NOT IN (SELECT id FROM logs)`} {
			if _, err := s.db.ExecContext(ctx, q); err != nil {
				return n, fmt.Errorf("forget spool logs: %w", err)
			}
		}
	}
	return n, nil
}
