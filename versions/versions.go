// Package versions keeps every settled version of the agents' memory
// files, so what an agent does to its own memory (a note replaced by a
// shorter one, a file deleted by its consolidation step) can be seen and
// undone, with zero integration.
//
// A version is captured when the watcher sees the file written (after the
// write settles on the background queue, never on the evaluation path's
// critical section). Its content is stored once, by sha256: a version
// identical to an earlier one costs a row. A version is stored as a delta
// against the version before it (the bytes that differ from it, see
// encode), zstd-compressed, so 1,000 versions of a 20 KB file that change
// a line each cost tens of bytes apiece; every keyframeEvery-th version of
// a chain is stored whole, so reading any version decodes at most that
// many objects. A deletion is a version too
// (no content), so the files an agent deleted are listed and brought back.
//
// Versions live in their own SQLite database (versions.db) in the state
// directory, private to memwatch like the journal: they are served only
// through the daemon's scoped API and the CLI with access to the state
// directory, and a restore goes through the safe rewrite as the root's
// owner. Retention (Prune) keeps a number of versions per file, a maximum
// age and a number of bytes per root, and never drops a file's newest
// version.
package versions

import (
	"bytes"
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/klauspost/compress/zstd"
	_ "modernc.org/sqlite" // registers the "sqlite" driver

	"github.com/memwatch/memwatch/confine"
	"github.com/memwatch/memwatch/control"
	"github.com/memwatch/memwatch/filesum"
	"github.com/memwatch/memwatch/state"
)

// FileName is the versions database in the state directory.
const FileName = "versions.db"

// keyframeEvery bounds a delta chain: reading a version decodes at most
// this many objects.
const keyframeEvery = 32

// maxCache bounds the bytes of the newest contents kept in memory, so a
// capture computes its delta and line counts without decoding.
const maxCache = 32 << 20

const schema = `
CREATE TABLE IF NOT EXISTS files (
	id    INTEGER PRIMARY KEY AUTOINCREMENT,
	root  TEXT NOT NULL,   -- the root's key (confine.ID.Key): the directory it was captured from
	path  TEXT NOT NULL,   -- relative to root
	head  INTEGER NOT NULL DEFAULT 0,  -- the newest version number
	UNIQUE(root, path)
);
CREATE TABLE IF NOT EXISTS versions (
	file    INTEGER NOT NULL,
	n       INTEGER NOT NULL,  -- 1, 2, ... per file; stable across retention
	time    INTEGER NOT NULL,  -- unix ns, when captured
	sha     TEXT NOT NULL,     -- content sha256; '' for a deletion
	size    INTEGER NOT NULL,  -- bytes; -1 for a deletion
	lines   INTEGER NOT NULL,
	added   INTEGER NOT NULL,  -- lines added since the previous version
	removed INTEGER NOT NULL,  -- lines removed since the previous version
	writer  TEXT NOT NULL,     -- "agent" or "memwatch"
	record  INTEGER NOT NULL DEFAULT 0,  -- memwatch's journal record
	-- mode is added by upgrade (versions of older databases lack it)
	PRIMARY KEY (file, n)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS versions_time ON versions(time);
CREATE TABLE IF NOT EXISTS objects (
	sha   TEXT PRIMARY KEY,
	base  TEXT NOT NULL DEFAULT '',  -- the object this is a delta against
	depth INTEGER NOT NULL DEFAULT 0,
	size  INTEGER NOT NULL,          -- uncompressed
	data  BLOB NOT NULL
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS objects_base ON objects(base);
`

// Writers of a version.
const (
	ByAgent    = control.ByAgent
	ByMemwatch = control.ByMemwatch
)

// Version is one version of a file (the type a client reads it as).
type Version = control.Version

// ErrNoVersion is returned when a file has no such version.
var ErrNoVersion = errors.New("no such version")

// Store is the versions database. Safe for concurrent use.
type Store struct {
	db  *sql.DB
	dir string
	Now func() time.Time

	enc *zstd.Encoder // EncodeAll and DecodeAll are safe for concurrent use
	dec *zstd.Decoder

	// appendDepth is maxAppendDepth (tests lower it).
	appendDepth int

	// Sums, when set, is the registry of file hashes the rewrite keeps:
	// a file memwatch only appended to since its last version is captured
	// by reading the bytes added, not the file (nil: read whole).
	Sums *filesum.Registry

	mu    sync.Mutex
	cache map[string][]byte // sha -> content of files' newest versions
	size  int
	// bound lists the root keys Bind has run for; noMode says the
	// database predates Version.Mode.
	bound  state.Bindings
	noMode bool
}

func newStore(db *sql.DB, dir string) (*Store, error) {
	// A 2 MiB window and the encoder's lower-memory mode: a version of a
	// large HISTORY.md otherwise keeps 16 MiB of history buffers alive.
	enc, err := zstd.NewWriter(nil, zstd.WithEncoderConcurrency(1), zstd.WithEncoderLevel(zstd.SpeedDefault), zstd.WithWindowSize(2<<20), zstd.WithLowerEncoderMem(true))
	if err != nil {
		return nil, err
	}
	dec, err := zstd.NewReader(nil, zstd.WithDecoderConcurrency(1), zstd.WithDecoderMaxMemory(1<<30))
	if err != nil {
		return nil, err
	}
	return &Store{db: db, dir: dir, Now: time.Now, enc: enc, dec: dec, cache: map[string][]byte{}, appendDepth: maxAppendDepth}, nil
}

// Open opens (creating) the versions database in the state directory dir.
func Open(ctx context.Context, dir string) (*Store, error) {
	db, path, err := state.OpenDB(ctx, dir, FileName, "versions", state.SyncNormal, schema)
	if err != nil {
		return nil, err
	}
	if err := state.AddColumns(ctx, db, state.Column{Table: "versions", Name: "mode", Decl: "INTEGER NOT NULL DEFAULT 0"}); err != nil {
		db.Close()
		return nil, fmt.Errorf("upgrade versions %s: %w", path, err)
	}
	st, err := newStore(db, dir)
	if err != nil {
		db.Close()
		return nil, err
	}
	if err := st.bound.Check(ctx, db, "files"); err != nil {
		db.Close()
		return nil, fmt.Errorf("open versions %s: %w", path, err)
	}
	return st, nil
}

// OpenReadOnly opens an existing versions database for reading.
func OpenReadOnly(ctx context.Context, dir string) (*Store, error) {
	if err := state.Trusted(dir); err != nil {
		return nil, err
	}
	path := filepath.Join(dir, FileName)
	if _, err := os.Stat(path); err != nil {
		return nil, fmt.Errorf("no versions in %s: %w", dir, err)
	}
	db, err := sql.Open("sqlite", "file:"+path+"?mode=ro&_pragma=busy_timeout(10000)")
	if err != nil {
		return nil, fmt.Errorf("open versions %s: %w", path, err)
	}
	st, err := newStore(db, dir)
	if err != nil {
		db.Close()
		return nil, err
	}
	st.bound.ReadOnly = true
	var n int
	if err := db.QueryRowContext(ctx, `SELECT COUNT(*) FROM pragma_table_info('versions') WHERE name='mode'`).Scan(&n); err == nil && n == 0 {
		st.noMode = true // written by an older memwatch: read without modes
	}
	return st, nil
}

// upgrade adds the columns later releases keep: versions.mode, the file's
// permission bits.
// Close closes the database.
func (s *Store) Close() error {
	s.enc.Close()
	s.dec.Close()
	return s.db.Close()
}

// Hash is the content hash versions are stored by (the journal's).
func Hash(b []byte) string {
	h := sha256.Sum256(b)
	return hex.EncodeToString(h[:])
}

// Capture records the file root/rel as it is now, if it differs from its
// newest version: its content, or its deletion when it is gone (only if
// a version of it was captured before). who names the writer of content
// with a hash, or of the deletion for "" (memwatch's own changes are in
// its journal); nil says the agent. It returns the new version and the one before it (zero when none),
// and ok false when nothing changed.
func (s *Store) Capture(ctx context.Context, root *confine.Root, rel string, who func(sha string) (string, int64)) (v, prev Version, ok bool, err error) {
	rel = filepath.Clean(rel)
	id := root.ID()
	s.Bind(ctx, id)
	f, fi, rerr := root.OpenRead(rel)
	gone := errors.Is(rerr, fs.ErrNotExist)
	if rerr != nil && !gone {
		return Version{}, Version{}, false, rerr
	}
	if f != nil {
		defer f.Close()
		if fi.Size() > root.MaxFileSize() {
			return Version{}, Version{}, false, fmt.Errorf("read %s: %w (%d bytes, limit %d)", rel, confine.ErrTooLarge, fi.Size(), root.MaxFileSize())
		}
	}
	s.mu.Lock() // one capture at a time: numbers and deltas follow each other
	defer s.mu.Unlock()
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return Version{}, Version{}, false, fmt.Errorf("capture a version of %s: %w", rel, err)
	}
	defer tx.Rollback()
	var file, head int64
	key := id.Key()
	err = tx.QueryRowContext(ctx, `SELECT id, head FROM files WHERE root=? AND path=?`, key, rel).Scan(&file, &head)
	if errors.Is(err, sql.ErrNoRows) {
		if gone {
			return Version{}, Version{}, false, nil // never seen: nothing to record
		}
		err = tx.QueryRowContext(ctx, `INSERT INTO files(root, path) VALUES(?,?) RETURNING id`, key, rel).Scan(&file)
	}
	if err != nil {
		return Version{}, Version{}, false, fmt.Errorf("capture a version of %s: %w", rel, err)
	}
	if head > 0 {
		if prev, err = scanVersion(tx.QueryRowContext(ctx, `SELECT `+versionCols+` FROM versions WHERE file=? AND n=?`, file, head)); err != nil {
			return Version{}, Version{}, false, fmt.Errorf("capture a version of %s: %w", rel, err)
		}
		prev.Root, prev.Path = id.Path, rel
	}
	v = Version{Root: id.Path, Path: rel, N: head + 1, Time: s.Now(), Size: -1, Writer: ByAgent}
	if fi != nil {
		v.Mode = fi.Mode().Perm()
	}
	var data []byte // the content, when read whole
	switch {
	case gone:
		if head == 0 || prev.Deleted() {
			return Version{}, Version{}, false, nil
		}
		v.Removed = prev.Lines
		if who != nil {
			v.Writer, v.Record = who("")
		}
	default:
		cur, known := s.Sums.Known(fi)
		if known && head > 0 && cur.Sum == prev.SHA {
			return Version{}, Version{}, false, nil // as captured: not read at all
		}
		var app *appended
		if known && head > 0 && !prev.Deleted() && prev.Size < cur.Size {
			if _, ok := s.Sums.Prefix(fi, prev.Size, prev.SHA); ok {
				app, err = readAppended(f, prev, cur.Size)
				if err != nil {
					return Version{}, Version{}, false, fmt.Errorf("read %s: %w", rel, err)
				}
			}
		}
		if app != nil {
			// Only appended to since the last version (memwatch knows every
			// byte before): stored as the bytes added.
			v.SHA, v.Size = cur.Sum, cur.Size
			v.Lines, v.Added, v.Removed = app.lines(prev.Lines)
			if who != nil {
				v.Writer, v.Record = who(v.SHA)
			}
			if err := s.putAppended(ctx, tx, v.SHA, v.Size, prev, app.data, func() ([]byte, error) { return readWhole(f, fi) }); err != nil {
				return Version{}, Version{}, false, err
			}
			break
		}
		if data, err = readWhole(f, fi); err != nil {
			return Version{}, Version{}, false, fmt.Errorf("read %s: %w", rel, err)
		}
		whole := filesum.Extend(filesum.Zero(), data)
		if after, err := f.Stat(); err == nil && after.Size() == int64(len(data)) && after.ModTime().Equal(fi.ModTime()) {
			s.Sums.Record(after, whole)
		}
		v.SHA, v.Size, v.Lines = whole.Sum, int64(len(data)), int64(bytes.Count(data, []byte("\n")))
		if len(data) > 0 && data[len(data)-1] != '\n' {
			v.Lines++
		}
		if head > 0 && v.SHA == prev.SHA {
			return Version{}, Version{}, false, nil
		}
		var old []byte
		if head > 0 && !prev.Deleted() {
			if old, err = s.content(ctx, tx, prev.SHA); err != nil {
				return Version{}, Version{}, false, err
			}
			v.Removed = prev.Lines
		}
		v.Added, v.Removed = lineChanges(old, data)
		if who != nil {
			v.Writer, v.Record = who(v.SHA)
		}
		if err := s.putObject(ctx, tx, v.SHA, data, prev.SHA, old); err != nil {
			return Version{}, Version{}, false, err
		}
	}
	if _, err := tx.ExecContext(ctx, `INSERT INTO versions(file, n, time, sha, size, lines, added, removed, writer, record, mode) VALUES(?,?,?,?,?,?,?,?,?,?,?)`,
		file, v.N, v.Time.UnixNano(), v.SHA, v.Size, v.Lines, v.Added, v.Removed, v.Writer, v.Record, uint32(v.Mode)); err != nil {
		return Version{}, Version{}, false, fmt.Errorf("capture a version of %s: %w", rel, err)
	}
	if _, err := tx.ExecContext(ctx, `UPDATE files SET head=? WHERE id=?`, v.N, file); err != nil {
		return Version{}, Version{}, false, fmt.Errorf("capture a version of %s: %w", rel, err)
	}
	if err := tx.Commit(); err != nil {
		return Version{}, Version{}, false, fmt.Errorf("capture a version of %s: %w", rel, err)
	}
	s.remember(prev.SHA, v.SHA, data)
	return v, prev, true, nil
}

// readWhole reads the file open as f from its start, fi.Size() bytes and
// whatever was appended since.
func readWhole(f *os.File, fi fs.FileInfo) ([]byte, error) {
	b := make([]byte, 0, fi.Size()+512)
	for {
		n, err := f.ReadAt(b[len(b):cap(b)], int64(len(b)))
		b = b[:len(b)+n]
		if err == io.EOF || (err == nil && n == 0) {
			return b, nil
		}
		if err != nil {
			return nil, err
		}
		if len(b) == cap(b) {
			b = append(b, 0)[:len(b)]
		}
	}
}

// appended is what was added to a file after its previous version.
type appended struct {
	data     []byte
	prevOpen bool // the previous version ended inside a line (no newline)
}

// readAppended reads the bytes of f from prev's end to size, and whether
// prev ended mid-line.
func readAppended(f *os.File, prev Version, size int64) (*appended, error) {
	a := &appended{data: make([]byte, size-prev.Size)}
	if n, err := f.ReadAt(a.data, prev.Size); n < len(a.data) {
		return nil, fmt.Errorf("read the bytes appended: %w", err)
	}
	if prev.Size > 0 {
		var last [1]byte
		if _, err := f.ReadAt(last[:], prev.Size-1); err != nil {
			return nil, err
		}
		a.prevOpen = last[0] != '\n'
	}
	return a, nil
}

// lines returns the appended version's line count and its changes from
// the previous one (prevLines lines), counted as lineChanges would: every
// line added is new; a last line the append continued is one removed.
func (a *appended) lines(prevLines int64) (lines, added, removed int64) {
	nl := int64(bytes.Count(a.data, []byte("\n")))
	open := a.data[len(a.data)-1] != '\n'
	lines = prevLines + nl
	if a.prevOpen {
		lines-- // the open line is continued, counted once below
	}
	if open {
		lines++
	}
	added = nl
	if open {
		added++
	}
	if a.prevOpen {
		removed = 1
	}
	return lines, added, removed
}

// remember keeps the newest content in memory for the next capture's delta.
func (s *Store) remember(old, sha string, data []byte) {
	if b, ok := s.cache[old]; ok && old != sha {
		delete(s.cache, old)
		s.size -= len(b)
	}
	if sha == "" || data == nil || len(data) > maxCache/4 { // nil: not read whole (an append)
		return
	}
	if _, ok := s.cache[sha]; !ok {
		for k, b := range s.cache {
			if s.size+len(data) <= maxCache {
				break
			}
			delete(s.cache, k)
			s.size -= len(b)
		}
		s.cache[sha] = data
		s.size += len(data)
	}
}

// lineChanges counts the lines added and removed from a to b, as a
// multiset: cheap, and what a person means by "+3 -1" for memory notes.
func lineChanges(a, b []byte) (added, removed int64) {
	count := map[string]int{}
	for _, l := range splitLines(a) {
		count[string(l)]++
	}
	for _, l := range splitLines(b) {
		if count[string(l)] > 0 {
			count[string(l)]--
		} else {
			added++
		}
	}
	for _, n := range count {
		removed += int64(n)
	}
	return added, removed
}

func splitLines(b []byte) [][]byte {
	var out [][]byte
	for len(b) > 0 {
		i := bytes.IndexByte(b, '\n')
		if i < 0 {
			return append(out, b)
		}
		out = append(out, b[:i])
		b = b[i+1:]
	}
	return out
}

// putObject stores content under sha unless it is there: a delta against
// base (whose content is old) while the chain is short, whole otherwise.
func (s *Store) putObject(ctx context.Context, tx *sql.Tx, sha string, data []byte, base string, old []byte) error {
	var exists int
	if err := tx.QueryRowContext(ctx, `SELECT count(*) FROM objects WHERE sha=?`, sha).Scan(&exists); err != nil {
		return fmt.Errorf("store a version: %w", err)
	}
	if exists > 0 {
		return nil
	}
	depth := 0
	if base != "" && old != nil {
		if err := tx.QueryRowContext(ctx, `SELECT depth FROM objects WHERE sha=?`, base).Scan(&depth); err != nil {
			base = ""
		} else if depth+1 >= keyframeEvery {
			base = ""
		}
	} else {
		base = ""
	}
	enc, err := s.encode(data, base, old)
	if err != nil {
		return err
	}
	if base == "" {
		depth = -1
	}
	_, err = tx.ExecContext(ctx, `INSERT INTO objects(sha, base, depth, size, data) VALUES(?,?,?,?,?)`, sha, base, depth+1, len(data), enc)
	if err != nil {
		return fmt.Errorf("store a version: %w", err)
	}
	return nil
}

// maxAppendDepth bounds a chain of versions that only appended: each such
// delta is the bytes added, decoded by appending them (see content), so a
// long chain costs little to read, and a history appended to a few bytes
// at a time is not stored whole every keyframeEvery versions.
const maxAppendDepth = 1024

// putAppended stores the version sha (size bytes) of a file whose version
// before, prev, is its first bytes: a delta of the bytes added (data),
// unless the chain is long (then whole, read from f).
func (s *Store) putAppended(ctx context.Context, tx *sql.Tx, sha string, size int64, prev Version, data []byte, whole func() ([]byte, error)) error {
	var exists int
	if err := tx.QueryRowContext(ctx, `SELECT count(*) FROM objects WHERE sha=?`, sha).Scan(&exists); err != nil {
		return fmt.Errorf("store a version: %w", err)
	}
	if exists > 0 {
		return nil
	}
	var depth int
	if err := tx.QueryRowContext(ctx, `SELECT depth FROM objects WHERE sha=?`, prev.SHA).Scan(&depth); err != nil || depth+1 >= s.appendDepth {
		b, err := whole()
		if err != nil {
			return err
		}
		return s.putObject(ctx, tx, sha, b, "", nil)
	}
	d := binary.AppendUvarint(nil, uint64(prev.Size))
	d = binary.AppendUvarint(d, 0)
	d = append(d, data...)
	if _, err := tx.ExecContext(ctx, `INSERT INTO objects(sha, base, depth, size, data) VALUES(?,?,?,?,?)`, sha, prev.SHA, depth+1, size, s.enc.EncodeAll(d, nil)); err != nil {
		return fmt.Errorf("store a version: %w", err)
	}
	return nil
}

// A delta is the bytes of a version that differ from its base: the
// lengths of the prefix and suffix it shares with the base (uvarints),
// then the middle. Memory notes change in one place per write (a line
// edited, entries appended or trimmed), which this captures in O(n)
// without a diff; several edits far apart store the span between them,
// which zstd then compresses. Both forms are zstd-compressed.

func (s *Store) encode(data []byte, base string, old []byte) ([]byte, error) {
	if base == "" {
		return s.enc.EncodeAll(data, nil), nil
	}
	p := 0
	for p < len(data) && p < len(old) && data[p] == old[p] {
		p++
	}
	q := 0
	for q < len(data)-p && q < len(old)-p && data[len(data)-1-q] == old[len(old)-1-q] {
		q++
	}
	d := binary.AppendUvarint(nil, uint64(p))
	d = binary.AppendUvarint(d, uint64(q))
	d = append(d, data[p:len(data)-q]...)
	return s.enc.EncodeAll(d, nil), nil
}

// decode returns the content an object stores, given its base's (old).
// When owned, old is the caller's to reuse: a delta that only appends to
// it is appended in place, so a chain of appends decodes in time
// proportional to the content, not to the chain times the content.
func (s *Store) decode(data []byte, old []byte, owned bool, base string, size int64) ([]byte, error) {
	d, err := s.dec.DecodeAll(data, nil)
	if err != nil {
		return nil, err
	}
	if base == "" {
		return d, nil
	}
	p, n1 := binary.Uvarint(d)
	q, n2 := binary.Uvarint(d[max(n1, 0):])
	if n1 <= 0 || n2 <= 0 || p+q > uint64(len(old)) {
		return nil, errors.New("corrupt delta")
	}
	mid := d[n1+n2:]
	if owned && q == 0 && p == uint64(len(old)) {
		out := append(old, mid...)
		if int64(len(out)) != size {
			return nil, errors.New("corrupt delta: wrong size")
		}
		return out, nil
	}
	out := make([]byte, 0, size)
	out = append(out, old[:p]...)
	out = append(out, mid...)
	out = append(out, old[uint64(len(old))-q:]...)
	if int64(len(out)) != size {
		return nil, errors.New("corrupt delta: wrong size")
	}
	return out, nil
}

// querier is a *sql.DB or *sql.Tx.
type querier interface {
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

// content returns the content stored under sha, following its delta chain.
func (s *Store) content(ctx context.Context, q querier, sha string) ([]byte, error) {
	if b, ok := s.cache[sha]; ok {
		return b, nil
	}
	type obj struct {
		base string
		size int64
		data []byte
	}
	var chain []obj
	for cur := sha; cur != ""; {
		if b, ok := s.cache[cur]; ok {
			out := b
			for i := len(chain) - 1; i >= 0; i-- {
				var err error
				// The cached bytes are shared: the first delta copies them.
				if out, err = s.decode(chain[i].data, out, i < len(chain)-1, chain[i].base, chain[i].size); err != nil {
					return nil, fmt.Errorf("read version %.12s: %w", sha, err)
				}
			}
			return out, nil
		}
		var o obj
		if err := q.QueryRowContext(ctx, `SELECT base, size, data FROM objects WHERE sha=?`, cur).Scan(&o.base, &o.size, &o.data); err != nil {
			return nil, fmt.Errorf("read version %.12s: %w", sha, err)
		}
		chain = append(chain, o)
		cur = o.base
		if len(chain) > maxAppendDepth+keyframeEvery {
			return nil, fmt.Errorf("read version %.12s: delta chain too long", sha)
		}
	}
	var out []byte
	for i := len(chain) - 1; i >= 0; i-- {
		var err error
		if out, err = s.decode(chain[i].data, out, true, chain[i].base, chain[i].size); err != nil {
			return nil, fmt.Errorf("read version %.12s: %w", sha, err)
		}
	}
	return out, nil
}

const versionCols = `n, time, sha, size, lines, added, removed, writer, record, mode`

// cols is versionCols as this database can answer them.
func (s *Store) cols() string {
	if s.noMode {
		return strings.Replace(versionCols, "mode", "0", 1)
	}
	return versionCols
}

func scanVersion(row interface{ Scan(...any) error }) (Version, error) {
	var v Version
	var t int64
	var mode uint32
	err := row.Scan(&v.N, &t, &v.SHA, &v.Size, &v.Lines, &v.Added, &v.Removed, &v.Writer, &v.Record, &mode)
	v.Time, v.Mode = time.Unix(0, t), fs.FileMode(mode)&fs.ModePerm
	return v, err
}

// List returns the versions of root/rel, oldest first: those captured
// from root's very directory (its ID), none of another that had its path.
func (s *Store) List(ctx context.Context, root confine.ID, rel string) ([]Version, error) {
	rows, err := s.db.QueryContext(ctx, `SELECT `+s.cols()+` FROM versions WHERE file=(SELECT id FROM files WHERE root=? AND path=?) ORDER BY n`, root.Key(), filepath.Clean(rel))
	if err != nil {
		return nil, fmt.Errorf("list versions of %s: %w", rel, err)
	}
	defer rows.Close()
	var out []Version
	for rows.Next() {
		v, err := scanVersion(rows)
		if err != nil {
			return nil, err
		}
		v.Root, v.Path = root.Path, filepath.Clean(rel)
		out = append(out, v)
	}
	return out, rows.Err()
}

// Roots lists the keys (confine.ID.Key) of the roots with versions.
func (s *Store) Roots(ctx context.Context) ([]string, error) {
	rows, err := s.db.QueryContext(ctx, `SELECT DISTINCT root FROM files ORDER BY root`)
	if err != nil {
		return nil, fmt.Errorf("list versioned roots: %w", err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var r string
		if err := rows.Scan(&r); err != nil {
			return nil, err
		}
		out = append(out, r)
	}
	return out, rows.Err()
}

// Files lists the paths of root with versions.
func (s *Store) Files(ctx context.Context, root confine.ID) ([]string, error) {
	rows, err := s.db.QueryContext(ctx, `SELECT path FROM files WHERE root=? ORDER BY path`, root.Key())
	if err != nil {
		return nil, fmt.Errorf("list versioned files: %w", err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var p string
		if err := rows.Scan(&p); err != nil {
			return nil, err
		}
		out = append(out, p)
	}
	return out, rows.Err()
}

// Get returns version n of root/rel and its content (nil for a deletion).
func (s *Store) Get(ctx context.Context, root confine.ID, rel string, n int64) (Version, []byte, error) {
	v, err := scanVersion(s.db.QueryRowContext(ctx, `SELECT `+s.cols()+` FROM versions WHERE file=(SELECT id FROM files WHERE root=? AND path=?) AND n=?`, root.Key(), filepath.Clean(rel), n))
	if errors.Is(err, sql.ErrNoRows) {
		return Version{}, nil, fmt.Errorf("%s@%d: %w", rel, n, ErrNoVersion)
	}
	if err != nil {
		return Version{}, nil, fmt.Errorf("read %s@%d: %w", rel, n, err)
	}
	v.Root, v.Path = root.Path, filepath.Clean(rel)
	if v.Deleted() {
		return v, nil, nil
	}
	s.mu.Lock()
	data, err := s.content(ctx, s.db, v.SHA)
	s.mu.Unlock()
	return v, data, err
}

// Content returns the content stored under sha (a version's hash; the
// journal's before and after hashes are the same hashes), or ErrNoVersion
// when no version of any file had it.
func (s *Store) Content(ctx context.Context, sha string) ([]byte, error) {
	var n int
	if err := s.db.QueryRowContext(ctx, `SELECT COUNT(*) FROM objects WHERE sha=?`, sha).Scan(&n); err != nil {
		return nil, fmt.Errorf("read version %.12s: %w", sha, err)
	}
	if n == 0 {
		return nil, fmt.Errorf("content %.12s: %w", sha, ErrNoVersion)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.content(ctx, s.db, sha)
}

// At returns the newest version of root/rel captured at or before t.
func (s *Store) At(ctx context.Context, root confine.ID, rel string, t time.Time) (Version, error) {
	v, err := scanVersion(s.db.QueryRowContext(ctx, `SELECT `+s.cols()+` FROM versions WHERE file=(SELECT id FROM files WHERE root=? AND path=?) AND time<=? ORDER BY n DESC LIMIT 1`, root.Key(), filepath.Clean(rel), t.UnixNano()))
	if errors.Is(err, sql.ErrNoRows) {
		return Version{}, fmt.Errorf("%s at %s: %w", rel, t.Format(time.RFC3339), ErrNoVersion)
	}
	v.Root, v.Path = root.Path, filepath.Clean(rel)
	return v, err
}

// DeletedSince returns, for each file of root whose newest version is a
// deletion captured at or after since, that deletion and the version
// before it (the content to bring back).
func (s *Store) DeletedSince(ctx context.Context, root confine.ID, since time.Time) ([][2]Version, error) {
	rows, err := s.db.QueryContext(ctx, `SELECT f.path, v.n, v.time FROM files f JOIN versions v ON v.file=f.id AND v.n=f.head
		WHERE f.root=? AND v.size<0 AND v.time>=? ORDER BY f.path`, root.Key(), since.UnixNano())
	if err != nil {
		return nil, fmt.Errorf("list deleted files: %w", err)
	}
	type del struct {
		path string
		n    int64
	}
	var dels []del
	for rows.Next() {
		var d del
		var t int64
		if err := rows.Scan(&d.path, &d.n, &t); err != nil {
			rows.Close()
			return nil, err
		}
		dels = append(dels, d)
	}
	rows.Close()
	var out [][2]Version
	for _, d := range dels {
		vs, err := s.List(ctx, root, d.path)
		if err != nil {
			return nil, err
		}
		var gone, before Version
		for _, v := range vs {
			if v.N == d.n {
				gone = v
			} else if v.N < d.n && !v.Deleted() {
				before = v
			}
		}
		if before.N > 0 {
			out = append(out, [2]Version{gone, before})
		}
	}
	return out, nil
}
