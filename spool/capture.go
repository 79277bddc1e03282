package spool

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/cespare/xxhash/v2"

	"github.com/memwatch/memwatch/confine"
)

// DefaultMaxLine is the longest line stored whole.
const DefaultMaxLine = 1 << 20

// Options tune a capture.
type Options struct {
	// MaxLine is the longest line stored whole; a longer one is stored cut
	// (its size and hash are of the whole line). 0 means DefaultMaxLine.
	MaxLine int
	// IsMessage tells message lines from metadata, state and invalid lines;
	// cut is true when data is only the start of the line. Required.
	IsMessage func(data []byte, cut bool) bool
	// Message, when set, tells a whole line appended to the log instead
	// of IsMessage, given its file offset and xxhash too, and must answer
	// as IsMessage would: the caller keeps its own decode of the line
	// (recall.LineMemo, for the index built next).
	Message func(off int64, data []byte, hash uint64) bool
}

// Result says what a capture found.
type Result struct {
	Lines    int   // lines captured now
	Messages int   // of which messages
	Known    int   // lines of a rewritten file recognised as captured before
	Gen      int64 // the live generation after the capture
	// Why is "new" (first capture), "append", "same" (nothing new),
	// "rewritten" (same messages, new file), "trimmed" (a new generation
	// keeping some captured messages), "replaced" (a new generation sharing
	// none), "cleared" (no message left), "gone" (the file is gone since the
	// last capture: it was deleted or renamed away) or "missing" (gone
	// before, still gone).
	Why string
	// Cut counts the lines captured now whose text was cut at MaxLine (or
	// at the bound of a database value), and Longest is the longest whole
	// line among them: each is stored cut, cited and searchable by its
	// start, its size kept.
	Cut     int
	Longest int64
}

// errChanged means the file changed between the two passes of a rematch;
// the capture starts again.
var errChanged = errors.New("log changed while being read")

// batchLines bounds one transaction of a capture.
const batchLines = 4000

// Capture copies the new complete lines of the log rel (in root) into the
// spool: on the first call every line, then what the agent appended; after
// a rewrite, the lines never captured (see the package doc).
func (s *Spool) Capture(ctx context.Context, root *confine.Root, rel string, o Options) (Result, error) {
	if o.IsMessage == nil {
		return Result{}, errors.New("spool: Options.IsMessage is required")
	}
	if o.MaxLine <= 0 {
		o.MaxLine = DefaultMaxLine
	}
	rel = filepath.Clean(rel)
	s.Bind(ctx, root.ID())
	defer s.lock(root.ID().Key(), rel)()
	for attempt := 0; ; attempt++ {
		res, err := s.capture(ctx, root, rel, o)
		if errors.Is(err, errChanged) && attempt < 3 {
			continue
		}
		return res, err
	}
}

// MarkGone marks the logs of root whose files are gone as missing, so
// their lines are held (searchable, consolidated) rather than expected in
// a live file: a log deleted while memwatch was not running, one of a
// state restored on a new host, or one deleted in a flood of changes
// whose capture was not queued. Each is captured as the write's own
// capture would have (what was appended before it went, through the file
// still held, is kept first). It returns how many it marked.
func (s *Spool) MarkGone(ctx context.Context, root *confine.Root, o Options) (int, error) {
	s.Bind(ctx, root.ID())
	n := 0
	// Prepared once: every root's first evaluation asks it, and preparing
	// it was most of 10,000 session directories' first evaluations.
	live, err := s.prepared(ctx, nil, liveLogs)
	if err != nil {
		return 0, fmt.Errorf("list spool logs: %w", err)
	}
	// A page of the live logs' names at a time: a root of a million logs
	// is never held in memory whole.
	for after := int64(0); ; {
		var ids []int64
		var paths []string
		rows, err := live.QueryContext(ctx, root.ID().Key(), after, virtualIno)
		if err != nil {
			return n, fmt.Errorf("list spool logs: %w", err)
		}
		for rows.Next() {
			var id int64
			var p string
			if err := rows.Scan(&id, &p); err != nil {
				rows.Close()
				return n, fmt.Errorf("list spool logs: %w", err)
			}
			ids, paths = append(ids, id), append(paths, p)
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return n, fmt.Errorf("list spool logs: %w", err)
		}
		if len(ids) == 0 {
			return n, nil
		}
		after = ids[len(ids)-1]
		for _, p := range paths {
			if err := ctx.Err(); err != nil {
				return n, err
			}
			if _, err := root.Lstat(p); !errors.Is(err, fs.ErrNotExist) {
				continue
			}
			res, err := s.Capture(ctx, root, p, o)
			if res.Why == "gone" {
				n++
			}
			if err != nil && !errors.Is(err, fs.ErrNotExist) {
				return n, err
			}
		}
	}
}

// liveLogs pages through a root's logs that are live files.
const liveLogs = `SELECT id, path FROM logs WHERE root=? AND id>? AND missing=0 AND ino!=? ORDER BY id LIMIT 1000`

func (s *Spool) capture(ctx context.Context, root *confine.Root, rel string, o Options) (res Result, err error) {
	var drained Result
	defer func() { res.Lines, res.Messages = res.Lines+drained.Lines, res.Messages+drained.Messages }()
	key := root.ID().Key()
	if gen, ok := s.keptSame(root, key, rel); ok {
		return Result{Gen: gen, Why: "same"}, nil
	}
	st, found, err := s.Find(ctx, root.ID(), rel)
	if err != nil {
		return Result{}, err
	}
	if found && st.ino == virtualIno {
		return Result{Gen: st.Gen, Why: "same"}, nil // records come by CaptureRecords
	}
	opened := s.Now() // before the stat: see keepSame
	f, fi, err := root.OpenRead(rel)
	if found && !st.Missing && st.Gen > 0 && (err != nil || !sameInode(fi, st.dev, st.ino)) {
		// The agent renamed another file over the log or deleted it: what
		// it appended to the old file since the last capture is still
		// readable through the descriptor kept from then.
		var derr error
		if drained, derr = s.drainHeld(ctx, key, rel, &st, o); derr != nil {
			if f != nil {
				f.Close()
			}
			return Result{}, derr
		}
	}
	if errors.Is(err, fs.ErrNotExist) {
		if found && !st.Missing {
			// Deleted or renamed away: nothing of it is live any more.
			st.Missing, st.LiveMsgs, st.LiveFrom = true, 0, st.Seq+1
			st.Lines, st.Offset, st.dev, st.ino, st.tailOff, st.tailHash = 0, 0, 0, 0, 0, 0
			if err := s.saveLog(ctx, s.db, &st); err != nil {
				return Result{}, err
			}
			return Result{Gen: st.Gen, Why: "gone"}, nil
		}
		return Result{Gen: st.Gen, Why: "missing"}, err
	}
	if err != nil {
		return Result{}, err
	}
	defer func() { s.hold(key, rel, f, st.dev, st.ino) }()
	sys := fi.Sys().(*syscall.Stat_t)
	dev, ino := int64(sys.Dev), int64(sys.Ino)
	if !found {
		// Added in the capture's own transaction (appendLines): one
		// commit for a new log, not two.
		st = Log{Root: key, Path: rel, First: s.Now()}
	}
	switch {
	case st.Gen == 0:
		st.Gen, st.dev, st.ino, st.Missing = 1, dev, ino, false
		res, err := s.appendLines(ctx, f, &st, o)
		res.Why = "new"
		return res, err
	case !st.Missing && st.dev == dev && st.ino == ino && fi.Size() == st.Offset && s.tailIntact(f, &st) && s.unchanged(ctx, f, fi, &st):
		// Nothing new: no transaction at all (a start-up evaluates
		// thousands of logs that have not changed), and no read of the
		// lines already matched.
		s.keepSame(key, rel, fi, st.Gen, opened)
		return Result{Gen: st.Gen, Why: "same"}, nil
	case !st.Missing && st.dev == dev && st.ino == ino && fi.Size() > st.Offset && s.tailIntact(f, &st):
		res, err := s.appendLines(ctx, f, &st, o)
		if res.Why == "" {
			res.Why = "append"
		}
		return res, err
	}
	return s.rematch(ctx, f, &st, dev, ino, o)
}

// sameStat is a log's file as a capture that found it wholly captured
// and settled stat'ed it.
type sameStat struct {
	dev, ino, size, mtime, ctime, gen int64
}

// maxSame bounds the logs kept as unchanged, about 100 bytes each (a
// home of more: the captures past it query the spool, a cost, never a
// loss).
const maxSame = 1 << 18

// sameKey is a log's key in Spool.same: a hash of its root's key and its
// path (what two logs share only by chance is a hash; a file's stat is
// its own).
func sameKey(rootKey, rel string) uint64 {
	d := xxhash.New()
	d.WriteString(rootKey)
	d.WriteString("\x00")
	d.WriteString(rel)
	return d.Sum64()
}

// keptSame reports whether the log rel is still the file a capture found
// wholly captured (keepSame), by one lstat, and its generation: a root's
// evaluation captures each of its logs, and a query of the spool for each
// made an agent's every write cost a fifth of a second of CPU in a
// project of a thousand sessions. The file's change time is what no
// write, truncation, rename over or utimes leaves as it was, and was
// settled when kept: equal, the file is as captured. Any other finding
// forgets it, before the capture (the one writer of the log's row, under
// its lock) goes on.
func (s *Spool) keptSame(root *confine.Root, rootKey, rel string) (int64, bool) {
	k := sameKey(rootKey, rel)
	s.mu.Lock()
	kept, ok := s.same[k]
	s.mu.Unlock()
	if !ok {
		return 0, false
	}
	if fi, err := root.Lstat(rel); err == nil {
		if st, ok := fi.Sys().(*syscall.Stat_t); ok && fi.Mode().IsRegular() &&
			(sameStat{int64(st.Dev), int64(st.Ino), fi.Size(), fi.ModTime().UnixNano(), confine.ChangeTime(st), kept.gen}) == kept {
			s.sameByStat.Add(1)
			return kept.gen, true
		}
	}
	s.mu.Lock()
	delete(s.same, k)
	s.mu.Unlock()
	return 0, false
}

// keepSame records the log's file (fi, stat'ed at the time opened,
// before the capture read it) as wholly captured at generation gen, when
// its change time was settled then: a write after the stat gets a later
// change time, unless it came within the clock tick of the one before.
func (s *Spool) keepSame(rootKey, rel string, fi os.FileInfo, gen int64, opened time.Time) {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return
	}
	ctime := confine.ChangeTime(st)
	slack := mtimeSlack
	if ctime%int64(time.Second) == 0 {
		slack = 2 * time.Second // a file system that keeps whole seconds
	}
	if opened.UnixNano()-ctime < int64(slack) {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.same == nil || len(s.same) >= maxSame {
		s.same = map[uint64]sameStat{} // checked by a query again: a cost, never a loss
	}
	s.same[sameKey(rootKey, rel)] = sameStat{int64(st.Dev), int64(st.Ino), fi.Size(), fi.ModTime().UnixNano(), ctime, gen}
}

// forgetSame forgets every log kept as unchanged: their rows changed
// other than by a capture.
func (s *Spool) forgetSame() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.same = nil
}

// mtimeSlack covers the coarse clock file times are taken from (a kernel
// tick, up to 10 ms) against the fine one captures are timed with.
const mtimeSlack = 20 * time.Millisecond

// unchanged reports whether a log of the size last captured, its last line
// intact, was not written since, without reading what was matched before:
// its mtime is the one recorded then, and that capture came a clock tick
// or more after the write (settled), so any later write would show as a
// later mtime. A capture that came within the tick (an agent's append
// captured at once) cannot tell a rewrite in place to the same size in the
// same tick (found by FuzzCapture) from no write: the file's bytes are
// hashed once and compared with the digest kept of them, and the mtime is
// then settled. Kernels with fine-grained timestamps (Linux 6.13 and
// later on ext4, xfs, btrfs and tmpfs) give such a rewrite a later mtime
// anyway. The cost is a hash of the file (no database read) at most once
// per write, never a rematch.
func (s *Spool) unchanged(ctx context.Context, f *os.File, fi os.FileInfo, st *Log) bool {
	if fi.ModTime().UnixNano() != st.mtime || st.mtime == 0 {
		return false
	}
	if st.settled {
		return true
	}
	if st.digest == nil {
		return false
	}
	d := xxhash.New()
	if d.UnmarshalBinary(st.digest) != nil {
		return false
	}
	want := d.Sum64()
	d.Reset()
	if n, err := io.Copy(d, io.NewSectionReader(f, 0, st.Offset)); err != nil || n != st.Offset || d.Sum64() != want {
		return false
	}
	if s.Now().Sub(fi.ModTime()) >= mtimeSlack {
		st.settled = true
		if st.ID != 0 {
			if _, err := s.db.ExecContext(ctx, `UPDATE logs SET settled=1 WHERE id=? AND mtime=?`, st.ID, st.mtime); err != nil {
				return true // the next capture hashes it again
			}
		}
	}
	return true
}

// stamp records, after a capture read f up to st.Offset, the file's mtime
// and whether it is settled, and brings the digest of the bytes before
// Offset up to date from the digest of those before from (0: a fresh one).
// A file longer than what was read (written during the capture) gets no
// mtime: the next capture looks again.
func (s *Spool) stamp(f *os.File, st *Log, from int64) {
	d := xxhash.New()
	if from > 0 && (st.digest == nil || d.UnmarshalBinary(st.digest) != nil) {
		st.digest, st.mtime, st.settled = nil, 0, false
		return
	}
	if n, err := io.Copy(d, io.NewSectionReader(f, from, st.Offset-from)); err != nil || n != st.Offset-from {
		st.digest, st.mtime, st.settled = nil, 0, false
		return
	}
	st.digest, _ = d.MarshalBinary()
	fi, err := f.Stat()
	if err != nil || fi.Size() != st.Offset {
		st.mtime, st.settled = 0, false
		return
	}
	st.mtime = fi.ModTime().UnixNano()
	st.settled = s.Now().Sub(fi.ModTime()) >= mtimeSlack
}

// maxHeld bounds the descriptors kept open: the logs written most recently
// keep theirs.
const maxHeld = 256

// heldLog is a log file kept open after its capture.
type heldLog struct {
	f        *os.File
	dev, ino int64
	used     int64
}

func sameInode(fi os.FileInfo, dev, ino int64) bool {
	sys, ok := fi.Sys().(*syscall.Stat_t)
	return ok && int64(sys.Dev) == dev && int64(sys.Ino) == ino
}

// hold keeps f open as the log's last captured file (closing the one held
// before), or closes it when it is not the file the log's state is at.
func (s *Spool) hold(rootKey, rel string, f *os.File, dev, ino int64) {
	key := rootKey + "\x00" + rel
	s.mu.Lock()
	defer s.mu.Unlock()
	if old := s.held[key]; old != nil && old.f != f {
		old.f.Close()
		delete(s.held, key)
	}
	fi, err := f.Stat()
	if err != nil || !sameInode(fi, dev, ino) {
		f.Close()
		return
	}
	s.tick++
	s.held[key] = &heldLog{f: f, dev: dev, ino: ino, used: s.tick}
	if len(s.held) > maxHeld {
		var oldest string
		for k, h := range s.held {
			if oldest == "" || h.used < s.held[oldest].used {
				oldest = k
			}
		}
		s.held[oldest].f.Close()
		delete(s.held, oldest)
	}
}

// drainHeld captures what was appended to the log's previous file after
// the last capture, when that file is still held open and intact up to
// there, then lets it go.
func (s *Spool) drainHeld(ctx context.Context, rootKey, rel string, st *Log, o Options) (Result, error) {
	key := rootKey + "\x00" + rel
	s.mu.Lock()
	h := s.held[key]
	delete(s.held, key)
	s.mu.Unlock()
	if h == nil {
		return Result{}, nil
	}
	defer h.f.Close()
	fi, err := h.f.Stat()
	if err != nil || h.dev != st.dev || h.ino != st.ino || fi.Size() <= st.Offset || !s.tailIntact(h.f, st) {
		return Result{}, nil
	}
	return s.appendLines(ctx, h.f, st, o)
}

// addLog adds st (ID 0) to the logs in the transaction tx.
func (s *Spool) addLog(ctx context.Context, tx *sql.Tx, st *Log) error {
	ins, err := s.prepared(ctx, tx, insertLog)
	if err != nil {
		return fmt.Errorf("add spool log %s: %w", st.Path, err)
	}
	res, err := ins.ExecContext(ctx, st.Root, st.Path, st.First.UnixNano())
	if err != nil {
		return fmt.Errorf("add spool log %s: %w", st.Path, err)
	}
	st.ID, _ = res.LastInsertId()
	return nil
}

// execer is a database or a transaction.
type execer interface {
	ExecContext(context.Context, string, ...any) (sql.Result, error)
}

func (s *Spool) saveLog(ctx context.Context, db execer, st *Log) error {
	missing := 0
	if st.Missing {
		missing = 1
	}
	settled := 0
	if st.settled {
		settled = 1
	}
	args := []any{st.Gen, st.Seq, st.dev, st.ino, st.Offset, st.Lines, st.tailOff, int64(st.tailHash), st.LiveFrom, st.LiveMsgs, missing, s.Now().UnixNano(), st.mtime, settled, st.digest, st.inlined, st.ID}
	tx, _ := db.(*sql.Tx)
	stmt, err := s.prepared(ctx, tx, updateLog)
	if err == nil {
		_, err = stmt.ExecContext(ctx, args...)
	}
	if err != nil {
		return fmt.Errorf("update spool log %s: %w", st.Path, err)
	}
	st.inlined = 0
	return nil
}

// tailIntact checks that the last line captured is still there, unchanged:
// a file rewritten in place to the same or a larger size shows there.
func (s *Spool) tailIntact(f *os.File, st *Log) bool {
	if st.Offset == 0 {
		return true
	}
	n := st.Offset - st.tailOff // the line and its newline
	sec := io.NewSectionReader(f, st.tailOff, n)
	d := xxhash.New()
	if _, err := io.CopyN(d, sec, n-1); err != nil {
		return false
	}
	var nl [1]byte
	if _, err := f.ReadAt(nl[:], st.Offset-1); err != nil || nl[0] != '\n' {
		return false
	}
	return d.Sum64() == st.tailHash
}

// capturer inserts lines in batches, each with the log's new state.
type capturer struct {
	s     *Spool
	ctx   context.Context
	st    *Log
	tx    *sql.Tx
	ins   *sql.Stmt // inserts rowsPerInsert lines at once; prepared when first needed
	rows  []any     // lines waiting for ins, 9 values each
	n     int
	res   Result
	now   int64
	ended bool
	added bool // the log was added in this transaction
	// pk gathers the text of the lines added since the last block
	// (packs.go), pend their rows; what is too little to pack at a commit
	// stays inline, counted in inline.
	pk     packer
	buf    *packBuf // pk's buffers (packBufs), returned at abort
	pend   []pendRow
	inline int64
	prows  []any     // packed lines waiting for pins, 9 values each
	pins   *sql.Stmt // inserts rowsPerInsert packed lines at once
}

// rowsPerInsert lines go in one INSERT: the per-statement cost of the
// driver dominates single-row inserts.
const rowsPerInsert = 64

// insertSizes are the INSERTs' sizes (rowsPerInsert first): the rows left
// at a commit go in by the largest that fit, with statements prepared
// once (hotStatements), not one of their count prepared each time.
var insertSizes = []int{rowsPerInsert, 16, 4, 1}

const insertPack = `INSERT OR REPLACE INTO packs(log, first, last, data) VALUES(?,?,?,?)`

const insertRow = "(?,?,?,?,?,?,?,?,?)"

// packedRow is a packed line: its text in its block, an empty blob here.
const packedRow = "(?,?,?,?,?,?,?,?,X'',?)"

// insertLines and insertPacked are the INSERTs of each of insertSizes'
// counts of rows, inline and packed, written once.
var insertLines, insertPacked = sizedInserts(
	"INSERT INTO lines(log, seq, gen, line, hash, msg, size, time, data) VALUES ", insertRow),
	sizedInserts("INSERT INTO lines(log, seq, gen, line, hash, msg, size, time, data, pack) VALUES ", packedRow)

func sizedInserts(head, row string) map[int]string {
	m := map[int]string{}
	for _, n := range insertSizes {
		m[n] = head + row + strings.Repeat(","+row, n-1)
	}
	return m
}

func (s *Spool) begin(ctx context.Context, st *Log) (*capturer, error) {
	c := &capturer{s: s, ctx: ctx, st: st, now: s.Now().UnixNano()}
	c.buf = packBufs.Get().(*packBuf)
	c.pk.raw = c.buf.raw[:0]
	return c, c.open()
}

func (c *capturer) open() error {
	tx, err := c.s.db.BeginTx(c.ctx, nil)
	if err != nil {
		return fmt.Errorf("spool: %w", err)
	}
	// The 64-row INSERT is prepared only for a capture that fills one:
	// parsing it costs more than a small log's whole capture.
	c.tx, c.ins, c.pins = tx, nil, nil
	return nil
}

// add stores a new line as the next sequence number. It waits with the
// block being gathered (packs.go) and goes in with it, packed or inline:
// each row is written once, in its final form.
func (c *capturer) add(gen, line int64, data []byte, size int64, hash uint64, msg bool) error {
	c.st.Seq++
	m := 0
	if msg {
		m = 1
		c.res.Messages++
		c.live(c.st.Seq)
	}
	if int64(len(data)) < size {
		c.res.Cut++
		c.res.Longest = max(c.res.Longest, size)
	}
	c.pk.add(c.st.Seq, data)
	c.pend = append(c.pend, pendRow{seq: c.st.Seq, gen: gen, line: line, hash: int64(hash), msg: m, size: size, at: len(c.pk.raw) - len(data), n: len(data)})
	if len(c.pk.raw) >= packTarget {
		if err := c.seal(true); err != nil {
			return err
		}
	}
	c.res.Lines++
	c.n++
	if c.n >= batchLines {
		return c.flush(true)
	}
	return nil
}

// pendRow is a line waiting for its block to close.
type pendRow struct {
	seq, gen, line, hash int64
	msg                  int
	size                 int64
	at, n                int // its text in the block's raw bytes (copied only when it goes in inline)
}

// row queues one line's insert; rows go in rowsPerInsert at a time, by
// the statement of their kind (inline text, or a block's).
func (c *capturer) row(packed bool, vals ...any) error {
	rows, ins, q := &c.rows, &c.ins, insertLines
	if packed {
		rows, ins, q = &c.prows, &c.pins, insertPacked
	}
	*rows = append(*rows, vals...)
	if len(*rows) < 9*rowsPerInsert {
		return nil
	}
	if *ins == nil {
		st, err := c.s.prepared(c.ctx, c.tx, q[rowsPerInsert])
		if err != nil {
			return fmt.Errorf("spool: %w", err)
		}
		*ins = st
	}
	if _, err := (*ins).ExecContext(c.ctx, *rows...); err != nil {
		return fmt.Errorf("spool lines: %w", err)
	}
	*rows = (*rows)[:0]
	return nil
}

// live counts a message of the live file.
func (c *capturer) live(seq int64) {
	c.st.LiveMsgs++
	if c.st.LiveFrom == 0 || seq < c.st.LiveFrom {
		c.st.LiveFrom = seq
	}
}

// carry records a known line at its place in a new generation; msg counts
// it among the known messages.
func (c *capturer) carry(gen, line, seq int64, msg bool) error {
	if _, err := c.tx.ExecContext(c.ctx, `INSERT OR REPLACE INTO carried(log, gen, line, seq) VALUES(?,?,?,?)`, c.st.ID, gen, line, seq); err != nil {
		return fmt.Errorf("spool a known line: %w", err)
	}
	if msg {
		c.res.Known++
	}
	c.n++
	if c.n >= batchLines {
		return c.flush(true)
	}
	return nil
}

// insertRows inserts the lines waiting in rows and prows.
func (c *capturer) insertRows() error {
	if err := c.insertSized(c.rows, insertLines); err != nil {
		return err
	}
	c.rows = c.rows[:0]
	if err := c.insertSized(c.prows, insertPacked); err != nil {
		return err
	}
	c.prows = c.prows[:0]
	return nil
}

// insertSized inserts rows (9 values each) by statements of q's sizes,
// the largest that fit first.
func (c *capturer) insertSized(rows []any, q map[int]string) error {
	for _, n := range insertSizes {
		for len(rows) >= 9*n {
			st, err := c.s.prepared(c.ctx, c.tx, q[n])
			if err != nil {
				return fmt.Errorf("spool: %w", err)
			}
			if _, err := st.ExecContext(c.ctx, rows[:9*n]...); err != nil {
				return fmt.Errorf("spool lines: %w", err)
			}
			rows = rows[9*n:]
		}
	}
	return nil
}

// seal closes the block of the lines added since the last: packed (pack),
// or left inline, counted for Pack.
func (c *capturer) seal(pack bool) error {
	if c.pk.n == 0 {
		return nil
	}
	defer func() { c.pk.reset(); c.pend = c.pend[:0] }()
	if pack {
		st, err := c.s.prepared(c.ctx, c.tx, insertPack)
		if err != nil {
			return fmt.Errorf("spool: %w", err)
		}
		if _, err := st.ExecContext(c.ctx, c.st.ID, c.pk.first, c.pk.last, c.zipped()); err != nil {
			return fmt.Errorf("spool: %w", err)
		}
	} else {
		c.inline += c.pk.text
	}
	for _, r := range c.pend {
		var err error
		if pack {
			err = c.row(true, c.st.ID, r.seq, r.gen, r.line, r.hash, r.msg, r.size, c.now, c.pk.first)
		} else {
			err = c.row(false, c.st.ID, r.seq, r.gen, r.line, r.hash, r.msg, r.size, c.now, bytes.Clone(c.pk.raw[r.at:r.at+r.n]))
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// flush commits the batch with the log's state, and starts another.
func (c *capturer) flush(more bool) error {
	err := c.seal(len(c.pk.raw) >= packMin)
	if err == nil {
		err = c.insertRows()
	}
	// Counted with the log's state (saveLog), not a statement of its own.
	c.st.inlined, c.inline = c.inline, 0
	if err != nil {
		c.tx.Rollback()
		return err
	}
	if err := c.s.saveLog(c.ctx, c.tx, c.st); err != nil {
		c.tx.Rollback()
		return err
	}
	if c.ins != nil {
		c.ins.Close()
	}
	if c.pins != nil {
		c.pins.Close()
	}
	if err := c.tx.Commit(); err != nil {
		return fmt.Errorf("spool: %w", err)
	}
	c.n = 0
	if more {
		return c.open()
	}
	c.ended = true
	return nil
}

func (c *capturer) abort() {
	if !c.ended && c.tx != nil {
		if c.ins != nil {
			c.ins.Close()
		}
		if c.pins != nil {
			c.pins.Close()
		}
		c.tx.Rollback()
	}
	if c.buf != nil && cap(c.pk.raw) <= maxPackBuf && cap(c.buf.z) <= maxPackBuf {
		// Nothing refers to them now: an inline line's row got a copy,
		// a block's statement has run (the driver copies what it binds).
		c.buf.raw = c.pk.raw[:0]
		packBufs.Put(c.buf)
	}
	c.buf, c.pk.raw = nil, nil
}

// zipped is the block gathered, compressed into the capture's buffer:
// valid until the next.
func (c *capturer) zipped() []byte {
	c.buf.z = c.pk.seal(c.buf.z)
	return c.buf.z
}

// appendLines captures the complete lines after st.Offset as the live
// generation's next lines.
func (s *Spool) appendLines(ctx context.Context, f *os.File, st *Log, o Options) (Result, error) {
	from := st.Offset
	if _, err := f.Seek(st.Offset, io.SeekStart); err != nil {
		return Result{}, err
	}
	// A generation that started empty may be getting its first messages
	// back (see lineage.go).
	var lin *lineage
	if st.ID != 0 && (st.LiveMsgs == 0 || s.isMatching(st.ID)) { // a new log has none
		var err error
		if lin, err = s.loadLineage(ctx, st); err != nil {
			return Result{}, err
		}
	}
	// While the generation's first messages may be its predecessor's
	// written back, so may its metadata lines: carried, not stored again.
	var metaQ map[uint64][]int64
	if lin != nil && lin.active && st.Gen > 1 {
		var err error
		if metaQ, err = s.metaBack(ctx, st); err != nil {
			return Result{}, err
		}
	}
	c, err := s.begin(ctx, st)
	if err != nil {
		return Result{}, err
	}
	defer c.abort()
	if st.ID == 0 {
		if err := s.addLog(ctx, c.tx, st); err != nil {
			return Result{}, err
		}
		c.added = true
	}
	if st.LiveFrom == 0 {
		st.LiveFrom = st.Seq + 1
	}
	_, err = scanLines(f, st.Offset, o.MaxLine, func(data []byte, size int64, hash uint64, off int64) error {
		st.Lines++
		st.tailOff, st.tailHash, st.Offset = off, hash, off+size+1
		var msg bool
		if cut := int64(len(data)) < size; o.Message != nil && !cut {
			msg = o.Message(off, data, hash)
		} else {
			msg = o.IsMessage(data, cut)
		}
		if msg {
			if seq, ok := lin.match(hash); ok {
				c.live(seq)
				return c.carry(st.Gen, st.Lines, seq, true)
			}
		} else if q := metaQ[hash]; len(q) > 0 {
			metaQ[hash] = q[1:]
			return c.carry(st.Gen, st.Lines, q[0], false)
		}
		return c.add(st.Gen, st.Lines, data, size, hash, msg)
	})
	if err != nil {
		return c.res, err
	}
	if c.res.Lines == 0 && c.res.Known == 0 && !c.added {
		c.res.Why = "same"
		c.res.Gen = st.Gen
		return c.res, nil
	}
	s.stamp(f, st, from)
	if err := s.saveLineage(ctx, c.tx, st.ID, lin); err != nil {
		return c.res, err
	}
	c.res.Gen = st.Gen
	return c.res, c.flush(false)
}

// entry is one line of a rewritten file, from the first pass.
type entry struct {
	hash uint64
	size int64
	msg  bool
}

// liveLine is a message of the live generation as captured.
type liveLine struct {
	line, seq int64
	hash      uint64
}

// liveMessages lists the messages of the log's live generation, in file
// order: the lines captured in it and the known lines carried into it.
func (s *Spool) liveMessages(ctx context.Context, st *Log) ([]liveLine, error) {
	rows, err := s.db.QueryContext(ctx, `SELECT line, seq, hash FROM lines WHERE log=? AND gen=? AND msg=1
		UNION ALL SELECT c.line, c.seq, l.hash FROM carried c JOIN lines l ON l.log=c.log AND l.seq=c.seq WHERE c.log=? AND c.gen=? AND l.msg=1
		ORDER BY 1`, st.ID, st.Gen, st.ID, st.Gen)
	if err != nil {
		return nil, fmt.Errorf("read the live messages: %w", err)
	}
	defer rows.Close()
	var out []liveLine
	for rows.Next() {
		var l liveLine
		var h int64
		if err := rows.Scan(&l.line, &l.seq, &h); err != nil {
			return nil, err
		}
		l.hash = uint64(h)
		out = append(out, l)
	}
	return out, rows.Err()
}

// liveMeta lists the lines of the log's live generation that are not
// messages (session headers, model changes, state), captured in it or
// carried into it, whose bytes the spool still holds.
func (s *Spool) liveMeta(ctx context.Context, st *Log) ([]liveLine, error) {
	rows, err := s.db.QueryContext(ctx, `SELECT line, seq, hash FROM lines WHERE log=? AND gen=? AND msg=0 AND data IS NOT NULL
		UNION ALL SELECT c.line, c.seq, l.hash FROM carried c JOIN lines l ON l.log=c.log AND l.seq=c.seq WHERE c.log=? AND c.gen=? AND l.msg=0 AND l.data IS NOT NULL
		ORDER BY 1`, st.ID, st.Gen, st.ID, st.Gen)
	if err != nil {
		return nil, fmt.Errorf("read the live metadata lines: %w", err)
	}
	defer rows.Close()
	var out []liveLine
	for rows.Next() {
		var l liveLine
		var h int64
		if err := rows.Scan(&l.line, &l.seq, &h); err != nil {
			return nil, err
		}
		l.hash = uint64(h)
		out = append(out, l)
	}
	return out, rows.Err()
}

// metaBack lists, by hash, the metadata lines of the generation before the
// live one that the live one does not hold yet: what an agent rewriting its
// whole file may be writing back.
func (s *Spool) metaBack(ctx context.Context, st *Log) (map[uint64][]int64, error) {
	rows, err := s.db.QueryContext(ctx, `SELECT seq, hash FROM (
		SELECT line, seq, hash FROM lines WHERE log=?1 AND gen=?2 AND msg=0 AND data IS NOT NULL
		UNION ALL SELECT c.line, c.seq, l.hash FROM carried c JOIN lines l ON l.log=c.log AND l.seq=c.seq WHERE c.log=?1 AND c.gen=?2 AND l.msg=0 AND l.data IS NOT NULL)
		WHERE seq NOT IN (SELECT seq FROM carried WHERE log=?1 AND gen=?3) ORDER BY line`, st.ID, st.Gen-1, st.Gen)
	if err != nil {
		return nil, fmt.Errorf("read the metadata lines before the rewrite: %w", err)
	}
	defer rows.Close()
	out := map[uint64][]int64{}
	for rows.Next() {
		var seq, h int64
		if err := rows.Scan(&seq, &h); err != nil {
			return nil, err
		}
		out[uint64(h)] = append(out[uint64(h)], seq)
	}
	return out, rows.Err()
}

// unmatched lists the messages of prev that no line of the new file is.
func unmatched(prev []liveLine, knownSeq []int64) []liveLine {
	kept := make(map[int64]bool, len(knownSeq))
	for _, seq := range knownSeq {
		if seq != 0 {
			kept[seq] = true
		}
	}
	var out []liveLine
	for _, p := range prev {
		if !kept[p.seq] {
			out = append(out, p)
		}
	}
	return out
}

// rematch handles a file that changed other than by appending: it reads
// every line's hash, recognises the messages captured before, and captures
// the rest (see the package doc).
func (s *Spool) rematch(ctx context.Context, f *os.File, st *Log, dev, ino int64, o Options) (Result, error) {
	s.rematches.Add(1)
	// Pass 1: hash and classify every line; keep no text.
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return Result{}, err
	}
	var entries []entry
	_, err := scanLines(f, 0, o.MaxLine, func(data []byte, size int64, hash uint64, off int64) error {
		entries = append(entries, entry{hash: hash, size: size, msg: o.IsMessage(data, int64(len(data)) < size)})
		return nil
	})
	if err != nil {
		return Result{}, err
	}
	// What the file held as last captured; nothing when it was seen gone.
	var prev []liveLine
	if !st.Missing {
		if prev, err = s.liveMessages(ctx, st); err != nil {
			return Result{}, err
		}
	}
	// A generation that started empty a moment ago: its predecessor's tail
	// may be what this file starts with (see lineage.go).
	var lin *lineage
	if !st.Missing && (st.LiveMsgs == 0 || s.isMatching(st.ID)) {
		if lin, err = s.loadLineage(ctx, st); err != nil {
			return Result{}, err
		}
	}
	// The same generation when every captured message is still at its line.
	same := !st.Missing && int64(len(entries)) >= st.Lines
	for _, p := range prev {
		if !same {
			break
		}
		i := p.line - 1
		same = i < int64(len(entries)) && entries[i].msg && entries[i].hash == p.hash
	}
	newLine := make([]bool, len(entries))
	knownSeq := make([]int64, len(entries))
	gen := st.Gen
	why := "rewritten"
	if same {
		for i := st.Lines; i < int64(len(entries)); i++ {
			newLine[i] = true
		}
		if int64(len(entries)) == st.Lines {
			why = "same"
		}
	} else {
		gen = st.Gen + 1
		queue := map[uint64][]int64{}
		for _, p := range prev {
			queue[p.hash] = append(queue[p.hash], p.seq)
		}
		// The other lines are carried too when the new generation holds
		// them unchanged: an agent that rewrites its whole transcript on
		// every turn (OpenClaw up to 2026.7.1) would otherwise have its
		// header and state lines stored again each turn.
		var meta []liveLine
		if !st.Missing {
			if meta, err = s.liveMeta(ctx, st); err != nil {
				return Result{}, err
			}
		}
		metaQueue := map[uint64][]int64{}
		for _, p := range meta {
			metaQueue[p.hash] = append(metaQueue[p.hash], p.seq)
		}
		known := 0
		for i, e := range entries {
			if q := metaQueue[e.hash]; !e.msg && len(q) > 0 {
				knownSeq[i], metaQueue[e.hash] = q[0], q[1:]
				continue
			}
			if q := queue[e.hash]; e.msg && len(q) > 0 {
				knownSeq[i], queue[e.hash] = q[0], q[1:]
				known++
				continue
			}
			if seq, ok := lin.match(e.hash); e.msg && ok {
				knownSeq[i] = seq
				known++
				continue
			}
			if e.msg {
				lin.stop() // the run ended: later messages are new
			}
			newLine[i] = true
		}
		messages := 0
		for _, e := range entries {
			if e.msg {
				messages++
			}
		}
		switch {
		case messages == 0:
			why = "cleared"
			// Maybe an in-place trim seen half written: remember what the
			// messages written back next would be (see lineage.go).
			tail := prev
			if lin != nil {
				tail = append(append([]liveLine(nil), lin.tail...), prev...)
			}
			lin = s.newLineage(gen, tail)
		case known == 0 && len(prev) > 0:
			why = "replaced"
		default:
			why = "trimmed"
			// Maybe a whole-file rewrite seen half written (OpenClaw
			// truncates its transcript and writes every line back on each
			// turn): the messages it dropped may be written back next.
			if dropped := unmatched(prev, knownSeq); len(dropped) > 0 {
				lin = s.newLineage(gen, dropped)
			}
		}
		if lin != nil {
			lin.gen = gen
		}
	}

	// Pass 2: capture the new lines, checking each is what pass 1 saw.
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return Result{}, err
	}
	c, err := s.begin(ctx, st)
	if err != nil {
		return Result{}, err
	}
	defer c.abort()
	if !same {
		st.Gen, st.LiveMsgs, st.LiveFrom = gen, 0, 0
	}
	st.Missing, st.dev, st.ino = false, dev, ino
	st.Lines, st.Offset, st.tailOff, st.tailHash = 0, 0, 0, 0
	var i int64
	_, err = scanLines(f, 0, o.MaxLine, func(data []byte, size int64, hash uint64, off int64) error {
		if i >= int64(len(entries)) {
			return nil // appended since pass 1: the next capture takes it
		}
		e := entries[i]
		i++
		if e.hash != hash || e.size != size {
			return errChanged
		}
		st.Lines, st.tailOff, st.tailHash, st.Offset = i, off, hash, off+size+1
		switch {
		case newLine[i-1]:
			return c.add(gen, i, data, size, hash, e.msg)
		case !same && knownSeq[i-1] != 0:
			if e.msg {
				c.live(knownSeq[i-1])
			}
			return c.carry(gen, i, knownSeq[i-1], e.msg)
		}
		return nil
	})
	if err != nil {
		return c.res, err
	}
	if i < int64(len(entries)) {
		return c.res, errChanged // shorter than pass 1 saw: changed again
	}
	if st.LiveFrom == 0 {
		st.LiveFrom = st.Seq + 1 // no message is live
	}
	if lin == nil && !same {
		lin = &lineage{} // a generation that did not start empty: none
	}
	s.stamp(f, st, 0)
	if err := s.saveLineage(ctx, c.tx, st.ID, lin); err != nil {
		return c.res, err
	}
	c.res.Gen, c.res.Why = gen, why
	return c.res, c.flush(false)
}

// scanBufs are scanLines' read buffers: a start-up that captures thousands
// of small logs allocates (and clears) none.
var scanBufs = sync.Pool{New: func() any { b := make([]byte, 1<<20); return &b }}

// scanLines reads complete lines from r, whose first byte is at file offset
// base, and calls fn with each: its bytes (at most maxLine; the rest is
// hashed and counted but not kept), its whole size, hash and offset. A
// partial last line is left. It returns the offset after the last line.
func scanLines(r io.Reader, base int64, maxLine int, fn func(data []byte, size int64, hash uint64, off int64) error) (int64, error) {
	bp := scanBufs.Get().(*[]byte)
	defer scanBufs.Put(bp)
	buf := *bp
	var carry []byte // the start of a line spanning reads, at most maxLine bytes
	var carryLen int64
	d := xxhash.New()
	lineStart := base
	for {
		n, rerr := io.ReadFull(r, buf)
		chunk := buf[:n]
		for len(chunk) > 0 {
			i := bytes.IndexByte(chunk, '\n')
			if i >= 0 && carryLen == 0 && i <= maxLine {
				if err := fn(chunk[:i], int64(i), xxhash.Sum64(chunk[:i]), lineStart); err != nil {
					return lineStart, err
				}
				lineStart += int64(i + 1)
				chunk = chunk[i+1:]
				continue
			}
			part := chunk
			if i >= 0 {
				part = chunk[:i]
			}
			if carryLen == 0 {
				d.Reset()
			}
			d.Write(part)
			if room := maxLine - len(carry); room > 0 {
				carry = append(carry, part[:min(room, len(part))]...)
			}
			carryLen += int64(len(part))
			if i < 0 {
				break
			}
			if err := fn(carry, carryLen, d.Sum64(), lineStart); err != nil {
				return lineStart, err
			}
			lineStart += carryLen + 1
			carry, carryLen = carry[:0], 0
			chunk = chunk[i+1:]
		}
		if rerr == io.EOF || rerr == io.ErrUnexpectedEOF {
			return lineStart, nil
		}
		if rerr != nil {
			return lineStart, rerr
		}
	}
}
