// Package spool captures every complete line of the session logs memwatch
// watches into a durable, append-only store in the state directory, as soon
// as it sees it, and keeps track of how the agent rewrites those logs.
//
// Agents do not only append to their logs: they trim them to the newest
// messages, clear them on /new, and rewrite the whole file on every save
// (a temp file renamed over it, with a metadata line that changes each
// time). The spool guarantees, for every log it captures:
//   - every complete line seen is stored once, with a content hash, before
//     anything reads it; what the agent trims, clears or rewrites afterwards
//     is still in the spool, so consolidation and summaries read ranges from
//     here, never from positions in the live file;
//   - identity is by content, not by position or inode: after any change that
//     is not a pure append (a new inode, a shorter file, an earlier byte
//     changed), the new file's message lines are matched by hash against the
//     messages of the file as last captured, in order and with
//     multiplicity; a matched line is the line already captured, wherever it
//     now stands; only lines never captured are new. Lines that are not
//     messages (metadata and state records, which agents rewrite on every
//     save) take no part in deciding the generation; when a new generation
//     holds one unchanged, it is carried too rather than stored again (an
//     agent rewriting its whole file each turn would otherwise store its
//     header once per turn). The cost is linear in the file size;
//   - every line has a sequence number (capture order, across rewrites),
//     and the generation and line number it had when captured. A file whose
//     message lines keep their positions stays in its generation (appends,
//     metadata rewrites); any other rewrite starts a new generation, whose
//     known lines are recorded at their new positions;
//   - a citation stays true: lines of generation 1 are cited as
//     path#Lx-y, later ones as path@g#Lx-y, and Show prints them from the
//     live file while that generation is live there, else from the spool;
//   - consumers (a rule) keep their progress as a sequence number, so a
//     range is processed once, whatever the agent does to the file;
//   - a line's text is kept until every consumer of its log is past it and
//     the retention period has passed (Prune); its hash is kept while its
//     generation is the live one, so matching keeps working.
//
// The spool lives in its own SQLite database (spool.db, WAL, synchronous
// NORMAL): a captured line survives a kill of memwatch at any instant, since
// a committed WAL frame is in the kernel's page cache before Capture returns.
// A power loss may lose the last commits; their lines are still in the log
// (or its held descriptor is gone with the machine) and are captured again,
// and the consumers' markers keep every range processed exactly once.
// FULL would fsync every batch and cut capture throughput several times.
// Capture of one log is serialized; different logs are captured
// concurrently.
package spool

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cespare/xxhash/v2"
	_ "modernc.org/sqlite" // registers the "sqlite" driver

	"github.com/memwatch/memwatch/confine"
	"github.com/memwatch/memwatch/state"
)

// FileName is the spool database in the state directory.
const FileName = "spool.db"

const schema = `
CREATE TABLE IF NOT EXISTS logs (
	id         INTEGER PRIMARY KEY AUTOINCREMENT,
	root       TEXT NOT NULL,
	path       TEXT NOT NULL,              -- relative to root
	gen        INTEGER NOT NULL DEFAULT 0, -- the live generation
	seq        INTEGER NOT NULL DEFAULT 0, -- the last sequence number given
	dev        INTEGER NOT NULL DEFAULT 0,
	ino        INTEGER NOT NULL DEFAULT 0,
	offset     INTEGER NOT NULL DEFAULT 0, -- just after the last complete line captured
	lines      INTEGER NOT NULL DEFAULT 0, -- complete lines of the live generation
	tail_off   INTEGER NOT NULL DEFAULT 0, -- where the last captured line starts
	tail_hash  INTEGER NOT NULL DEFAULT 0, -- its hash: a changed byte before offset shows there
	live_from  INTEGER NOT NULL DEFAULT 0, -- sequence of the first message in the live file
	live_msgs  INTEGER NOT NULL DEFAULT 0, -- messages in the live file
	missing    INTEGER NOT NULL DEFAULT 0, -- the file is gone
	first_seen INTEGER NOT NULL,           -- unix ns
	changed    INTEGER NOT NULL DEFAULT 0, -- unix ns of the last capture that found something
	-- mtime, settled and digest are added by upgrade (logs of older spools lack them)
	UNIQUE(root, path)
);
CREATE TABLE IF NOT EXISTS lines (
	log  INTEGER NOT NULL,
	seq  INTEGER NOT NULL,
	gen  INTEGER NOT NULL,
	line INTEGER NOT NULL,  -- 1-based, in its generation's file
	hash INTEGER NOT NULL,  -- xxhash64 of the whole line
	msg  INTEGER NOT NULL,  -- 1 for a message line
	size INTEGER NOT NULL,  -- the whole line's length
	time INTEGER NOT NULL,  -- capture time, unix ns
	data BLOB,              -- the line, cut at the store's max_line; NULL once pruned; empty when packed
	pack INTEGER NOT NULL DEFAULT 0, -- the block holding its text (packs.first), 0: inline
	PRIMARY KEY (log, seq)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS lines_gen ON lines(log, gen, line);
CREATE TABLE IF NOT EXISTS carried (
	log  INTEGER NOT NULL,
	gen  INTEGER NOT NULL,
	line INTEGER NOT NULL,  -- where a known line stands in this generation
	seq  INTEGER NOT NULL,
	PRIMARY KEY (log, gen, line)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS progress (
	consumer TEXT NOT NULL,
	log      INTEGER NOT NULL,
	seq      INTEGER NOT NULL,
	time     INTEGER NOT NULL,
	PRIMARY KEY (consumer, log)
) WITHOUT ROWID;
`

// Spool is the capture store. It is safe for concurrent use.
type Spool struct {
	db   *sql.DB
	rdb  *sql.DB // read-only connections for blocks (packs.go); nil: db
	path string
	Now  func() time.Time

	mu sync.Mutex
	// locks serialize the captures of one log: a log takes the stripe
	// of its key's hash (a million logs cost no map of a million locks;
	// two logs of a stripe wait for each other, rarely and briefly).
	locks *[lockStripes]sync.Mutex
	held  map[string]*heldLog // per log: the file last captured, still open
	tick  int64               // orders held logs for eviction
	// same are the logs a capture found settled and wholly captured, by
	// the file's stat then (capture.go, keptSame).
	same map[uint64]sameStat
	// matching lists the logs whose generation may be getting its
	// predecessor's tail back (see lineage.go), so an append to any
	// other log costs no lookup.
	matching map[int64]bool
	// stmts are the statements of the hot paths, prepared once on the one
	// connection: SQLite's parser costs more than a small capture.
	stmts map[string]*sql.Stmt
	// rematches counts captures that read a whole log again (tests), and
	// sameByStat those told unchanged by their stat alone.
	rematches  atomic.Int64
	sameByStat atomic.Int64
	// bound lists the root keys Bind has run for.
	bound state.Bindings
	// blocks are the last blocks of text read, decoded.
	blocks blockCache
}

// prepared returns q prepared (once); in tx when tx is not nil. The
// statements used in transactions are prepared by Open (hotStatements):
// with one connection, preparing on the database while a transaction
// holds it would wait forever, so one not prepared yet is prepared in tx.
func (s *Spool) prepared(ctx context.Context, tx *sql.Tx, q string) (*sql.Stmt, error) {
	s.mu.Lock()
	st := s.stmts[q]
	s.mu.Unlock()
	if st == nil && tx != nil {
		return tx.PrepareContext(ctx, q)
	}
	if st == nil {
		var err error
		if st, err = s.db.PrepareContext(ctx, q); err != nil {
			return nil, err
		}
		s.mu.Lock()
		if old := s.stmts[q]; old != nil {
			st.Close()
			st = old
		} else {
			s.stmts[q] = st
		}
		s.mu.Unlock()
	}
	if tx != nil {
		return tx.StmtContext(ctx, st), nil
	}
	return st, nil
}

// Open opens (creating if needed) the spool in the state directory dir.
func Open(ctx context.Context, dir string) (*Spool, error) {
	db, path, err := state.OpenDB(ctx, dir, FileName, "spool", state.SyncNormal, schema+lineageSchema+packSchema)
	if err != nil {
		return nil, err
	}
	if err := upgrade(ctx, db); err != nil {
		db.Close()
		return nil, fmt.Errorf("upgrade spool %s: %w", path, err)
	}
	rdb, err := sql.Open("sqlite", "file:"+path+"?mode=ro&_pragma=busy_timeout(10000)")
	if err != nil {
		db.Close()
		return nil, fmt.Errorf("open spool %s: %w", path, err)
	}
	rdb.SetMaxOpenConns(2)
	s := &Spool{db: db, rdb: rdb, path: path, Now: time.Now, locks: new([lockStripes]sync.Mutex), held: map[string]*heldLog{}, matching: map[int64]bool{}, stmts: map[string]*sql.Stmt{}}
	for _, q := range hotStatements {
		if _, err := s.prepared(ctx, nil, q); err != nil {
			s.Close()
			return nil, fmt.Errorf("initialise spool %s: %w", path, err)
		}
	}
	if err := s.bound.Check(ctx, db, "logs"); err != nil {
		s.Close()
		return nil, fmt.Errorf("open spool %s: %w", path, err)
	}
	return s, nil
}

// upgrade adds the columns later releases keep per log:
//   - mtime: the file's modification time when last captured (unix ns);
//   - settled: 1 when that capture came a clock tick or more after it, so
//     an equal mtime later means no write since;
//   - digest: the xxhash state of the bytes up to offset, which tells
//     whether a file of the same size and mtime as an unsettled capture
//     was rewritten in the same tick.
func upgrade(ctx context.Context, db *sql.DB) error {
	for _, col := range []struct{ table, name, decl string }{
		{"logs", "mtime", "INTEGER NOT NULL DEFAULT 0"},
		{"logs", "settled", "INTEGER NOT NULL DEFAULT 0"},
		{"logs", "digest", "BLOB"},
		// Packs (packs.go): a spool written before them has every line
		// inline, counted per log so that Pack converts it.
		{"lines", "pack", "INTEGER NOT NULL DEFAULT 0"},
		{"logs", "inline", "INTEGER NOT NULL DEFAULT 0"},
	} {
		var n int
		if err := db.QueryRowContext(ctx, `SELECT COUNT(*) FROM pragma_table_info(?) WHERE name = ?`, col.table, col.name).Scan(&n); err != nil {
			return err
		}
		if n > 0 {
			continue
		}
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, `ALTER TABLE `+col.table+` ADD COLUMN `+col.name+` `+col.decl); err != nil {
			tx.Rollback()
			// Another process opening the spool added it first.
			if db.QueryRowContext(ctx, `SELECT COUNT(*) FROM pragma_table_info(?) WHERE name = ?`, col.table, col.name).Scan(&n); n > 0 {
				continue
			}
			return err
		}
		if col.name == "inline" {
			if _, err := tx.ExecContext(ctx, `UPDATE logs SET inline=COALESCE((SELECT SUM(length(data)) FROM lines WHERE lines.log=logs.id AND lines.pack=0 AND lines.data IS NOT NULL),0)`); err != nil {
				tx.Rollback()
				return err
			}
		}
		if err := tx.Commit(); err != nil {
			return err
		}
	}
	// The logs a rule looks at besides the files it lists: those gone
	// lately (GoneSince) and a database's conversations (RecordLogs),
	// found without reading every log of the root.
	_, err := db.ExecContext(ctx, `CREATE INDEX IF NOT EXISTS logs_gone ON logs(root, missing, changed);
		CREATE INDEX IF NOT EXISTS logs_ino ON logs(root, ino);
		CREATE INDEX IF NOT EXISTS logs_held ON logs(root) WHERE `+heldWhere+`;
		CREATE INDEX IF NOT EXISTS logs_inline ON logs(inline) WHERE inline >= `+packMinSQL)
	return err
}

// hotStatements run in capture transactions: prepared once, by Open (a
// statement of 64 rows' parameters prepared anew in each transaction was
// a sixth of the spool's SQLite time in a catch-up).
var hotStatements = func() []string {
	qs := []string{insertLog, updateLog, insertPack}
	for _, n := range insertSizes {
		qs = append(qs, insertLines[n], insertPacked[n])
	}
	return qs
}()

const (
	insertLog = `INSERT INTO logs(root, path, first_seen) VALUES(?,?,?)`
	updateLog = `UPDATE logs SET gen=?, seq=?, dev=?, ino=?, offset=?, lines=?, tail_off=?, tail_hash=?, live_from=?, live_msgs=?, missing=?, changed=?, mtime=?, settled=?, digest=?, inline=inline+? WHERE id=?`
)

// OpenReadOnly opens an existing spool for reading (memwatch show while the
// daemon runs).
func OpenReadOnly(ctx context.Context, dir string) (*Spool, error) {
	if err := state.Trusted(dir); err != nil {
		return nil, err
	}
	path := filepath.Join(dir, FileName)
	if _, err := os.Stat(path); err != nil {
		return nil, fmt.Errorf("no spool in %s: %w", dir, err)
	}
	db, err := sql.Open("sqlite", "file:"+path+"?mode=ro&_pragma=busy_timeout(10000)")
	if err != nil {
		return nil, fmt.Errorf("open spool %s: %w", path, err)
	}
	s := &Spool{db: db, path: path, Now: time.Now, locks: new([lockStripes]sync.Mutex), held: map[string]*heldLog{}, matching: map[int64]bool{}, stmts: map[string]*sql.Stmt{}}
	s.bound.ReadOnly = true
	return s, nil
}

// Close closes the held logs and the database.
func (s *Spool) Close() error {
	s.mu.Lock()
	for k, h := range s.held {
		h.f.Close()
		delete(s.held, k)
	}
	for _, st := range s.stmts {
		st.Close()
	}
	s.mu.Unlock()
	if s.rdb != nil {
		s.rdb.Close()
	}
	return s.db.Close()
}

// lockStripes is how many locks the logs' captures share.
const lockStripes = 256

// lock serializes captures of one log.
func (s *Spool) lock(root, rel string) func() {
	l := &s.locks[xxhash.Sum64String(root+"\x00"+rel)%lockStripes]
	l.Lock()
	return l.Unlock
}

// Log is what the spool knows of one log file.
type Log struct {
	ID       int64
	Root     string // the root's key (confine.ID.Key)
	Path     string // relative to the root
	Gen      int64  // the live generation (0: nothing captured yet)
	Seq      int64  // the last sequence number given
	Lines    int64  // complete lines of the live generation
	Offset   int64  // bytes of the live file captured
	LiveFrom int64  // sequence of the first message in the live file
	LiveMsgs int64  // messages in the live file
	Missing  bool   // the file is gone (deleted or renamed away)
	First    time.Time
	Changed  time.Time // the last capture that found something new

	dev, ino, tailOff int64
	tailHash          uint64
	mtime             int64  // the file's mtime at the last capture (unix ns)
	settled           bool   // ...taken a clock tick or more after the write
	digest            []byte // xxhash state of the bytes before Offset; nil: unknown
	inlined           int64  // text left inline since the last save (packs.go)
}

const logCols = `id, root, path, gen, seq, lines, offset, live_from, live_msgs, missing, first_seen, changed, dev, ino, tail_off, tail_hash, mtime, settled, digest`

func scanLog(row interface{ Scan(...any) error }) (Log, error) {
	var l Log
	var first, changed int64
	var missing, settled int
	var tailHash int64
	err := row.Scan(&l.ID, &l.Root, &l.Path, &l.Gen, &l.Seq, &l.Lines, &l.Offset, &l.LiveFrom, &l.LiveMsgs, &missing,
		&first, &changed, &l.dev, &l.ino, &l.tailOff, &tailHash, &l.mtime, &settled, &l.digest)
	l.Missing, l.First, l.Changed, l.tailHash = missing != 0, time.Unix(0, first), time.Unix(0, changed), uint64(tailHash)
	l.settled = settled != 0
	return l, err
}

// Find returns the spool's record of a log of the root (as captured from
// that very directory: see Bind); ok is false when it was never captured.
func (s *Spool) Find(ctx context.Context, root confine.ID, rel string) (Log, bool, error) {
	st, err := s.prepared(ctx, nil, `SELECT `+logCols+` FROM logs WHERE root=? AND path=?`)
	if err != nil {
		return Log{}, false, fmt.Errorf("read spool log %s: %w", rel, err)
	}
	l, err := scanLog(st.QueryRowContext(ctx, root.Key(), filepath.Clean(rel)))
	if errors.Is(err, sql.ErrNoRows) {
		return Log{}, false, nil
	}
	if err != nil {
		return Log{}, false, fmt.Errorf("read spool log %s: %w", rel, err)
	}
	return l, true, nil
}

// LiveGen is the generation of a log now live in its file, 0 when the
// spool does not know it or it is gone: what recall cites a rewritten log
// by (path@N#Lx).
func (s *Spool) LiveGen(ctx context.Context, root confine.ID, rel string) int64 {
	l, ok, err := s.Find(ctx, root, rel)
	if err != nil || !ok || l.Missing {
		return 0
	}
	return l.Gen
}

// Gens is the live generations of the logs of the roots one search
// reads, each root's in one query when it is first asked (a root of
// thousands of logs costs one query, not one per log). Safe for
// concurrent use.
type Gens struct {
	s   *Spool
	ctx context.Context
	mu  sync.Mutex
	m   map[string]map[string]int64 // by root key, then path: logs rewritten since (generation > 1)
	// held are the roots with a log gone, a database's conversations or a
	// log rewritten (the only ones Of and Held find anything in), read in
	// one query for the search: a home of forty projects asked each its
	// own, twice, at every search. nil: not read yet, or a Bind since.
	held map[string]bool
	// byRoot is m by the root opened for the search (its key made once,
	// not for each of its files).
	byRoot map[*confine.Root]map[string]int64
}

// heldWhere is what makes a log one a search asks the spool about (gone,
// a database's conversations, rewritten); logs_held indexes those alone.
var heldWhere = fmt.Sprintf("(missing=1 OR ino=%d OR gen>1)", virtualIno)

// holds reports whether root may have held lines or rewritten logs. It
// binds the root first (a Bind may move rows to its key). g.mu is held.
func (g *Gens) holds(root confine.ID) bool {
	if g.s.Bind(g.ctx, root) {
		g.held = nil
	}
	if g.held == nil {
		g.held = map[string]bool{}
		rows, err := g.s.db.QueryContext(g.ctx, `SELECT DISTINCT root FROM logs INDEXED BY logs_held WHERE `+heldWhere)
		if err != nil {
			g.held = nil
			return true // the per-root queries say
		}
		defer rows.Close()
		for rows.Next() {
			var k string
			if rows.Scan(&k) == nil {
				g.held[k] = true
			}
		}
		if rows.Err() != nil {
			g.held = nil
			return true
		}
	}
	return g.held[root.Key()]
}

// Holds reports whether root may hold lines beyond its live files (a log
// gone or rewritten, a database's conversations): false means Held finds
// nothing there.
func (g *Gens) Holds(root confine.ID) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.holds(root)
}

// HeldLines is Spool.HeldLines for one tally: nothing asked of a root
// that holds nothing.
func (g *Gens) HeldLines(ctx context.Context, root *confine.Root, fn func(HeldLine) error) error {
	g.mu.Lock()
	holds := g.holds(root.ID())
	g.mu.Unlock()
	if !holds {
		return nil
	}
	return g.s.HeldLines(ctx, root, fn)
}

// Held is Spool.SearchHeld for one search: nothing asked of a root that
// holds nothing.
func (g *Gens) Held(ctx context.Context, root *confine.Root, fn func(rel string, gen, line int64, raw []byte) error) error {
	return g.HeldLines(ctx, root, func(h HeldLine) error { return fn(h.Path, h.Gen, h.Line, h.Data) })
}

// Gens returns the generations for one search.
func (s *Spool) Gens(ctx context.Context) *Gens {
	return &Gens{s: s, ctx: ctx, m: map[string]map[string]int64{}}
}

// Of is LiveGen of rel in root (1 for a log never rewritten, 0 for one
// the spool does not know: the search's default is the same).
func (g *Gens) Of(root *confine.Root, rel string) int64 {
	g.mu.Lock()
	defer g.mu.Unlock()
	m, ok := g.byRoot[root]
	if !ok {
		key := root.ID().Key()
		if m, ok = g.m[key]; !ok {
			if g.holds(root.ID()) {
				m = g.load(key)
			}
			g.m[key] = m
		}
		if g.byRoot == nil {
			g.byRoot = map[*confine.Root]map[string]int64{}
		}
		g.byRoot[root] = m
	}
	if len(m) == 0 {
		return 0
	}
	return m[filepath.Clean(rel)]
}

// load reads the generations of a root's rewritten logs (none when the
// spool cannot say: the search then cites generation 1, its default).
func (g *Gens) load(key string) map[string]int64 {
	m := map[string]int64{}
	st, err := g.s.prepared(g.ctx, nil, `SELECT path, gen FROM logs WHERE root=? AND missing=0 AND gen>1`)
	if err != nil {
		return m
	}
	rows, err := st.QueryContext(g.ctx, key)
	if err != nil {
		return m
	}
	defer rows.Close()
	for rows.Next() {
		var p string
		var gen int64
		if rows.Scan(&p, &gen) == nil {
			m[p] = gen
		}
	}
	return m
}

// Logs lists the logs of a root.
func (s *Spool) Logs(ctx context.Context, root confine.ID) ([]Log, error) {
	return s.logsWhere(ctx, `root=? ORDER BY path`, root.Key())
}

// GoneSince lists the logs of root marked gone (deleted or renamed away)
// at or after since, by the spool's clock, that consumer has not read to
// their last line, in the order they went, at most limit: what a rule
// still owes the logs an agent deleted, at a cost of the logs gone since,
// not of every log the root ever had.
func (s *Spool) GoneSince(ctx context.Context, root confine.ID, consumer string, since time.Time, limit int) ([]Log, error) {
	return s.logsWhere(ctx, `root=? AND missing=1 AND changed>=?
		AND seq > COALESCE((SELECT p.seq FROM progress p WHERE p.consumer=? AND p.log=logs.id), 0) ORDER BY changed, id LIMIT ?`, root.Key(), since.UnixNano(), consumer, limit)
}

// RecordLogs lists the logs of root that are a database's conversations
// (CaptureRecords), not files.
func (s *Spool) RecordLogs(ctx context.Context, root confine.ID) ([]Log, error) {
	return s.logsWhere(ctx, `root=? AND ino=? ORDER BY path`, root.Key(), virtualIno)
}

func (s *Spool) logsWhere(ctx context.Context, where string, args ...any) ([]Log, error) {
	rows, err := s.db.QueryContext(ctx, `SELECT `+logCols+` FROM logs WHERE `+where, args...)
	if err != nil {
		return nil, fmt.Errorf("list spool logs: %w", err)
	}
	defer rows.Close()
	var out []Log
	for rows.Next() {
		l, err := scanLog(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, l)
	}
	return out, rows.Err()
}

// Progress returns how far consumer has processed a log: the last sequence
// number it is done with (0: nothing).
func (s *Spool) Progress(ctx context.Context, consumer string, log int64) (int64, error) {
	var seq int64
	st, err := s.prepared(ctx, nil, `SELECT seq FROM progress WHERE consumer=? AND log=?`)
	if err == nil {
		err = st.QueryRowContext(ctx, consumer, log).Scan(&seq)
	}
	if errors.Is(err, sql.ErrNoRows) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("read progress of %s: %w", consumer, err)
	}
	return seq, nil
}

// Commit records that consumer is done with every line up to seq.
func (s *Spool) Commit(ctx context.Context, consumer string, log, seq int64) error {
	_, err := s.db.ExecContext(ctx, `INSERT INTO progress(consumer, log, seq, time) VALUES(?,?,?,?)
		ON CONFLICT(consumer, log) DO UPDATE SET seq=max(seq, excluded.seq), time=excluded.time`, consumer, log, seq, s.Now().UnixNano())
	if err != nil {
		return fmt.Errorf("commit progress of %s: %w", consumer, err)
	}
	return nil
}

// CommitMany records, in one transaction, that consumer is done with
// every line up to seqs[log] of each log.
func (s *Spool) CommitMany(ctx context.Context, consumer string, seqs map[int64]int64) error {
	if len(seqs) == 0 {
		return nil
	}
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("commit progress of %s: %w", consumer, err)
	}
	defer tx.Rollback()
	now := s.Now().UnixNano()
	for log, seq := range seqs {
		if _, err := tx.ExecContext(ctx, `INSERT INTO progress(consumer, log, seq, time) VALUES(?,?,?,?)
			ON CONFLICT(consumer, log) DO UPDATE SET seq=max(seq, excluded.seq), time=excluded.time`, consumer, log, seq, now); err != nil {
			return fmt.Errorf("commit progress of %s: %w", consumer, err)
		}
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("commit progress of %s: %w", consumer, err)
	}
	return nil
}

// Line is one captured line.
type Line struct {
	Seq  int64
	Gen  int64 // the generation it was captured in
	Line int64 // its line number there
	Hash uint64
	Msg  bool
	Size int64  // the whole line's length
	Data []byte // the line (cut at max_line); nil once pruned
	// Captured is when the spool got it.
	Captured time.Time
}

// Cut reports whether the line's text was cut at the store's max_line.
func (l Line) Cut() bool { return l.Data != nil && int64(len(l.Data)) < l.Size }

// Read calls fn for every line of a log with after < seq <= upto, in order;
// an error from fn stops it and is returned.
func (s *Spool) Read(ctx context.Context, log, after, upto int64, fn func(Line) error) error {
	rows, err := s.db.QueryContext(ctx, `SELECT seq, gen, line, hash, msg, size, time, data, pack FROM lines WHERE log=? AND seq>? AND seq<=? ORDER BY seq`, log, after, upto)
	if err != nil {
		return fmt.Errorf("read spool: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var l Line
		var hash, t, pack int64
		var msg int
		if err := rows.Scan(&l.Seq, &l.Gen, &l.Line, &hash, &msg, &l.Size, &t, &l.Data, &pack); err != nil {
			return fmt.Errorf("read spool: %w", err)
		}
		var err error
		if l.Data, err = s.text(ctx, log, l.Seq, pack, l.Data); err != nil {
			return err
		}
		l.Hash, l.Msg, l.Captured = uint64(hash), msg != 0, time.Unix(0, t)
		if err := fn(l); err != nil {
			return err
		}
	}
	return rows.Err()
}

// Messages counts the message lines of a log with after < seq <= upto.
func (s *Spool) Messages(ctx context.Context, log, after, upto int64) (int64, error) {
	var n int64
	st, err := s.prepared(ctx, nil, `SELECT COUNT(*) FROM lines WHERE log=? AND seq>? AND seq<=? AND msg=1`)
	if err == nil {
		err = st.QueryRowContext(ctx, log, after, upto).Scan(&n)
	}
	if err != nil {
		return 0, fmt.Errorf("count spool messages: %w", err)
	}
	return n, nil
}

// NthMessage returns the sequence number of the n-th (1-based) message line
// of a log after seq after; 0 when there are fewer.
func (s *Spool) NthMessage(ctx context.Context, log, after, n int64) (int64, error) {
	if n < 1 {
		return after, nil
	}
	var seq int64
	err := s.db.QueryRowContext(ctx, `SELECT seq FROM lines WHERE log=? AND seq>? AND msg=1 ORDER BY seq LIMIT 1 OFFSET ?`, log, after, n-1).Scan(&seq)
	if errors.Is(err, sql.ErrNoRows) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("find a spool message: %w", err)
	}
	return seq, nil
}

// Size is the spool database's size on disk, WAL included.
// Checkpoint folds the write-ahead log into the database and truncates
// it: a catch-up grows it to SQLite's checkpoint size (4 MiB), which
// would stay on disk however idle the daemon is after.
func (s *Spool) Checkpoint(ctx context.Context) error {
	if _, err := s.db.ExecContext(ctx, "PRAGMA wal_checkpoint(TRUNCATE)"); err != nil {
		return fmt.Errorf("checkpoint the spool: %w", err)
	}
	return nil
}

func (s *Spool) Size() int64 {
	var n int64
	for _, suffix := range []string{"", "-wal", "-shm"} {
		if fi, err := os.Stat(s.path + suffix); err == nil {
			n += fi.Size()
		}
	}
	return n
}
