package spool

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/cespare/xxhash/v2"

	"github.com/memwatch/memwatch/confine"
	"github.com/memwatch/memwatch/control"
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

// A citation's numbers come from clients (the socket, MCP, a URL): they are
// bounded before they drive any work.
const (
	// MaxCitedLine is the largest line or generation number a citation may
	// name. No log has more lines (each is at least a byte: 2^40 lines is a
	// terabyte), and numbers this size still add and subtract (the lines
	// shown around a citation) without overflowing.
	MaxCitedLine = 1 << 40
	// MaxCitedLines bounds the lines one citation names.
	MaxCitedLines = 100_000
	// MaxShowBytes bounds the text of the lines one Show returns; the lines
	// past it are returned without their text (Source "omitted").
	MaxShowBytes = 16 << 20
)

// ErrNoSuchLine means a citation names lines past the end of its file (or
// of its generation in the spool).
var ErrNoSuchLine = control.ErrNoSuchLine

var citeRE = regexp.MustCompile(`^(.+?)(?:@(\d+))?#L(\d+)(?:-L?(\d+))?$`)

// ParseCitation reads "path#L10", "path#L10-20" or "path@3#L10-20". Every
// number is checked: one that does not fit, or is past MaxCitedLine, is an
// error, as is a range of more than MaxCitedLines lines.
func ParseCitation(s string) (Citation, error) {
	m := citeRE.FindStringSubmatch(strings.TrimSpace(s))
	if m == nil {
		return Citation{}, fmt.Errorf("citation %q: want PATH#Lx, PATH#Lx-y or PATH@GEN#Lx-y", clip(s))
	}
	num := func(what, v string) (int64, error) {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n > MaxCitedLine {
			return 0, fmt.Errorf("citation %q: %s %s is too large (at most %d)", clip(s), what, clip(v), int64(MaxCitedLine))
		}
		if n < 1 {
			return 0, fmt.Errorf("citation %q: %s %s: they start at 1", clip(s), what, v)
		}
		return n, nil
	}
	c := Citation{Path: m[1], Gen: 1}
	var err error
	if m[2] != "" {
		if c.Gen, err = num("generation", m[2]); err != nil {
			return Citation{}, err
		}
	}
	if c.From, err = num("line", m[3]); err != nil {
		return Citation{}, err
	}
	c.To = c.From
	if m[4] != "" {
		if c.To, err = num("line", m[4]); err != nil {
			return Citation{}, err
		}
	}
	if c.To < c.From {
		return Citation{}, fmt.Errorf("citation %q: the range ends (L%d) before it starts (L%d)", clip(s), c.To, c.From)
	}
	if c.To-c.From >= MaxCitedLines {
		return Citation{}, fmt.Errorf("citation %q: %d lines; a citation names at most %d", clip(s), c.To-c.From+1, MaxCitedLines)
	}
	return c, nil
}

// clip bounds the client's text an error repeats.
func clip(s string) string {
	const max = 200
	if len(s) <= max {
		return s
	}
	return s[:max] + "…"
}

// Widen returns the citation with n more lines on each side (the context
// a page shows around it), within the bounds ParseCitation keeps.
func (c Citation) Widen(n int64) Citation {
	n = min(max(n, 0), (MaxCitedLines-1-(c.To-c.From))/2)
	c.From = max(1, c.From-n)
	c.To = min(c.To+n, MaxCitedLine)
	return c
}

// Shown is one line of a citation: from the live file or the spool.
type Shown = control.Shown

// ErrUnknownLog means the spool never captured the cited log.
var ErrUnknownLog = control.ErrUnknownLog

// Show returns the lines a citation names. While the cited generation is
// the live one and the live file still holds those lines unchanged, they
// come from the file; otherwise from the spool (which says when a line's
// text was pruned). Lines past the generation's end are not returned; a
// citation that starts past it is ErrNoSuchLine. The answer is bounded
// (MaxCitedLines lines, MaxShowBytes of text) and stops when ctx ends.
func (s *Spool) Show(ctx context.Context, root *confine.Root, c Citation) ([]Shown, error) {
	st, found, err := s.Find(ctx, root.ID(), c.Path)
	if err != nil {
		return nil, err
	}
	if !found {
		return nil, fmt.Errorf("%s in %s: %w", c.Path, root.Path(), ErrUnknownLog)
	}
	if c.Gen > st.Gen {
		return nil, fmt.Errorf("%s has no generation %d yet (the live one is %d): %w", c.Path, c.Gen, st.Gen, ErrNoSuchLine)
	}
	var last int64
	if err := s.db.QueryRowContext(ctx, `SELECT MAX(COALESCE((SELECT MAX(line) FROM lines WHERE log=? AND gen=?), 0),
		COALESCE((SELECT MAX(line) FROM carried WHERE log=? AND gen=?), 0))`, st.ID, c.Gen, st.ID, c.Gen).Scan(&last); err != nil {
		return nil, fmt.Errorf("read spool: %w", err)
	}
	var live map[int64][]byte
	if c.Gen == st.Gen && !st.Missing {
		// Lines the agent wrote a moment ago may not be captured yet.
		live, last = liveLines(ctx, root, c.Path, c.From, c.To, last, false)
	}
	if c.From > last {
		return nil, fmt.Errorf("%s: L%d is past the end (%s): %w", c.Path, c.From, linesOf(last, c.Gen, st.Gen), ErrNoSuchLine)
	}
	c.To = min(c.To, last)
	want := map[int64]Line{}
	rows, err := s.db.QueryContext(ctx, `SELECT line, seq, hash, size, data, pack FROM lines WHERE log=? AND gen=? AND line BETWEEN ? AND ?
		UNION ALL SELECT c.line, c.seq, l.hash, l.size, l.data, l.pack FROM carried c JOIN lines l ON l.log=c.log AND l.seq=c.seq WHERE c.log=? AND c.gen=? AND c.line BETWEEN ? AND ?`,
		st.ID, c.Gen, c.From, c.To, st.ID, c.Gen, c.From, c.To)
	if err != nil {
		return nil, fmt.Errorf("read spool: %w", err)
	}
	budget := int64(MaxShowBytes)
	for rows.Next() {
		var l Line
		var h, pack int64
		if err := rows.Scan(&l.Line, &l.Seq, &h, &l.Size, &l.Data, &pack); err != nil {
			rows.Close()
			return nil, err
		}
		l.Hash = uint64(h)
		if l.Data, err = s.text(ctx, st.ID, l.Seq, pack, l.Data); err != nil {
			rows.Close()
			return nil, err
		}
		if live[l.Line] == nil {
			// Only the text that will be shown is held.
			if budget -= int64(len(l.Data)); budget < 0 {
				l.Data = nil
				l.Size = -1
			}
		}
		want[l.Line] = l
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read spool: %w", err)
	}
	out := make([]Shown, 0, c.To-c.From+1)
	for n := c.From; n <= c.To; n++ {
		if n&1023 == 0 && ctx.Err() != nil {
			return nil, ctx.Err()
		}
		l, ok := want[n]
		switch {
		case !ok:
			out = append(out, Shown{Line: n, Source: "missing"})
		case live[n] != nil && xxhash.Sum64(live[n]) == l.Hash:
			out = append(out, Shown{Line: n, Data: live[n], Source: "live"})
		case l.Size < 0:
			out = append(out, Shown{Line: n, Source: "omitted"})
		case l.Data == nil:
			out = append(out, Shown{Line: n, Source: "pruned"})
		default:
			out = append(out, Shown{Line: n, Data: l.Data, Source: "spool"})
		}
	}
	return out, nil
}

// linesOf says how long a generation is, for ErrNoSuchLine.
func linesOf(last, gen, liveGen int64) string {
	what := "the file has"
	if gen != liveGen {
		what = fmt.Sprintf("generation %d had", gen)
	}
	return fmt.Sprintf("%s %d line(s)", what, last)
}

// ShowFile returns the lines c names of a file the spool does not keep (a
// note: HISTORY.md, MEMORY.md, as recall cites them) as it is now; ok is
// false when root has no such regular file. A citation that starts past
// the file's end is ErrNoSuchLine; lines past it are not returned.
func ShowFile(ctx context.Context, root *confine.Root, c Citation) ([]Shown, bool, error) {
	if c.Gen != 1 {
		return nil, false, nil
	}
	f, fi, err := root.OpenRead(c.Path)
	if err != nil {
		return nil, false, nil
	}
	f.Close()
	if !fi.Mode().IsRegular() {
		return nil, false, nil
	}
	var live map[int64][]byte
	var last int64
	if strings.HasSuffix(c.Path, ".gz") {
		// A compressed archive: the lines it holds.
		b, err := root.ReadFile(c.Path)
		if err == nil {
			b, err = gunzip(b, root.MaxFileSize())
		}
		if err != nil {
			return nil, true, err
		}
		live, last = splitRange(b, c.From, c.To)
	} else {
		live, last = liveLines(ctx, root, c.Path, c.From, c.To, 0, true)
	}
	if err := ctx.Err(); err != nil {
		return nil, true, err
	}
	if c.From > last {
		return nil, true, fmt.Errorf("%s: L%d is past the end (the file has %d line(s)): %w", c.Path, c.From, last, ErrNoSuchLine)
	}
	return ShownOf(live, c.From, min(c.To, last)), true, nil
}

// gunzip decompresses an archive retention compressed, at most limit bytes.
func gunzip(b []byte, limit int64) ([]byte, error) {
	zr, err := gzip.NewReader(bytes.NewReader(b))
	if err != nil {
		return nil, err
	}
	out, err := io.ReadAll(io.LimitReader(zr, limit+1))
	if err == nil && int64(len(out)) > limit {
		err = fmt.Errorf("over %d bytes decompressed", limit)
	}
	return out, err
}

// splitRange returns lines from..to of b (at most MaxShowBytes of them)
// and how many lines b has, the last without a newline included.
func splitRange(b []byte, from, to int64) (map[int64][]byte, int64) {
	out := map[int64][]byte{}
	budget := int64(MaxShowBytes)
	var n int64
	for len(b) > 0 {
		line, rest, _ := bytes.Cut(b, []byte{'\n'})
		n++
		if n >= from && n <= to && budget >= int64(len(line)) {
			budget -= int64(len(line))
			out[n] = line
		}
		b = rest
	}
	return out, n
}

// ShownOf lists lines from..to of lines (a map from a file read by line
// number), "missing" where it has none.
func ShownOf(lines map[int64][]byte, from, to int64) []Shown {
	out := make([]Shown, 0, max(0, min(to-from+1, MaxCitedLines)))
	for n := from; n <= to && len(out) < MaxCitedLines; n++ {
		if l, ok := lines[n]; ok {
			out = append(out, Shown{Line: n, Data: l, Source: "live"})
		} else {
			out = append(out, Shown{Line: n, Source: "missing"})
		}
	}
	return out
}

// liveLines reads lines from..to of a live file (nil when it cannot) and
// returns them with the file's last line number, or last when the file
// has fewer. Reading stops past to, at MaxShowBytes of text, and when ctx
// ends; a line cut at DefaultMaxLine is left out (the spool has it whole).
// A last line without its newline counts when partial is set (a note
// ends so; a log's is still being written).
func liveLines(ctx context.Context, root *confine.Root, rel string, from, to, last int64, partial bool) (map[int64][]byte, int64) {
	f, _, err := root.OpenRead(rel)
	if err != nil {
		return nil, last
	}
	defer f.Close()
	out := map[int64][]byte{}
	var n int64
	budget := int64(MaxShowBytes)
	keep := func(data []byte, whole bool) {
		if n >= from && whole && budget >= int64(len(data)) {
			budget -= int64(len(data))
			out[n] = append([]byte(nil), data...)
		}
	}
	end, err := scanLines(f, 0, DefaultMaxLine, func(data []byte, size int64, hash uint64, off int64) error {
		n++
		if n&1023 == 0 && ctx.Err() != nil {
			return errStop
		}
		if n > to {
			return errStop // the file goes on: its end is past the range
		}
		keep(data, int64(len(data)) == size)
		return nil
	})
	if err == nil && partial {
		rest := make([]byte, DefaultMaxLine+1)
		k, _ := io.ReadFull(io.NewSectionReader(f, end, int64(len(rest))), rest)
		if k > 0 {
			n++
			keep(rest[:k], k <= DefaultMaxLine)
		}
	}
	return out, max(n, last)
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
	defer s.forgetSame() // rows changed other than by a capture
	var st PruneStats
	err := s.db.QueryRowContext(ctx, `SELECT COUNT(*), COALESCE(SUM(CASE WHEN l.pack>0 THEN l.size ELSE length(l.data) END),0) FROM lines l JOIN logs g ON g.id=l.log
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
	// The pruned text leaves the blocks too.
	if err := s.repack(ctx, tx); err != nil {
		return st, err
	}
	return st, tx.Commit()
}

// Forget removes a log whose file is gone and whose lines every consumer
// is done with, older than cutoff.
func (s *Spool) Forget(ctx context.Context, cutoff time.Time) (int64, error) {
	defer s.forgetSame() // rows changed other than by a capture
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
			`DELETE FROM progress WHERE log NOT IN (SELECT id FROM logs)`,
			`DELETE FROM packs WHERE log NOT IN (SELECT id FROM logs)`} {
			if _, err := s.db.ExecContext(ctx, q); err != nil {
				return n, fmt.Errorf("forget spool logs: %w", err)
			}
		}
	}
	return n, nil
}
