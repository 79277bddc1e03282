package state

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/memwatch/memwatch/confine"
	"github.com/memwatch/memwatch/control"
)

// Outcomes of a journal record.
const (
	Pending  = "pending" // written before a swap; resolved at the next start if memwatch died
	Done     = "done"
	Skipped  = "skipped"
	Rejected = "rejected"
	Failed   = "failed"
)

// Record is one action memwatch took, or decided not to take (the
// type a client reads the journal as).
type Record = control.Record

// Append writes a record and returns its id.
func (d *DB) Append(ctx context.Context, r *Record) (int64, error) {
	if r.Time.IsZero() {
		r.Time = time.Now()
	}
	if r.Trigger == "" {
		r.Trigger = TriggerOf(ctx)
	}
	res, err := d.db.ExecContext(ctx, `INSERT INTO journal(time,store,root,rule,target,archive,before_sha,before_size,after_sha,after_size,tokens,duration_ms,duration_us,outcome,reason,data,root_dev,root_ino,key,trigger)
		VALUES(?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)`,
		r.Time.UnixNano(), r.Store, r.Root, r.Rule, r.Target, r.Archive, r.BeforeSHA, r.BeforeSize, r.AfterSHA, r.AfterSize,
		r.Tokens, r.Duration.Milliseconds(), r.Duration.Microseconds(), r.Outcome, r.Reason, r.Data, r.RootDev, r.RootIno, r.Key, r.Trigger)
	if err != nil {
		return 0, fmt.Errorf("append journal record: %w", err)
	}
	r.ID, _ = res.LastInsertId()
	return r.ID, nil
}

// Update rewrites a record in place (a pending record becoming final).
func (d *DB) Update(ctx context.Context, r *Record) error {
	_, err := d.db.ExecContext(ctx, `UPDATE journal SET archive=?,before_sha=?,before_size=?,after_sha=?,after_size=?,tokens=?,duration_ms=?,duration_us=?,outcome=?,reason=?,data=? WHERE id=?`,
		r.Archive, r.BeforeSHA, r.BeforeSize, r.AfterSHA, r.AfterSize, r.Tokens, r.Duration.Milliseconds(), r.Duration.Microseconds(), r.Outcome, r.Reason, r.Data, r.ID)
	if err != nil {
		return fmt.Errorf("update journal record %d: %w", r.ID, err)
	}
	return nil
}

// Filter selects journal records; zero fields match everything.
type Filter struct {
	Store   string
	Root    string
	Target  string
	Rule    string
	Outcome string
	// Archive selects the records that archived into this path.
	Archive string
	// WithArchive selects only records that name an archive.
	WithArchive bool
	// BeforeID selects records older than this one (a page after it).
	BeforeID int64
	// AfterID selects records newer than this one (what a follow has not
	// printed yet).
	AfterID int64
	// Since and Until bound the records' time (zero: unbounded; Until is
	// exclusive).
	Since, Until time.Time
	Limit        int
	// Dir, when set, keeps only the records made in that very directory
	// (its device and inode), and those that name none (a failure, a
	// refusal): what an owner of the root now may read of its history.
	Dir *confine.ID
}

const recordCols = `id,time,store,root,rule,target,archive,before_sha,before_size,after_sha,after_size,tokens,duration_ms,duration_us,outcome,reason,data,root_dev,root_ino,key,trigger`

// Journal returns records newest first.
func (d *DB) Journal(ctx context.Context, f Filter) ([]Record, error) {
	where, args := f.where()
	q := `SELECT ` + recordCols + ` FROM journal`
	if len(where) > 0 {
		q += " WHERE " + strings.Join(where, " AND ")
	}
	q += " ORDER BY id DESC"
	if f.Limit > 0 {
		q += fmt.Sprintf(" LIMIT %d", f.Limit)
	}
	return d.records(ctx, q, args...)
}

// JournalCount counts the records f selects (its Limit aside), without
// reading them.
func (d *DB) JournalCount(ctx context.Context, f Filter) (int, error) {
	where, args := f.where()
	q := `SELECT COUNT(*) FROM journal`
	if len(where) > 0 {
		q += " WHERE " + strings.Join(where, " AND ")
	}
	var n int
	if err := d.db.QueryRowContext(ctx, q, args...).Scan(&n); err != nil {
		return 0, fmt.Errorf("count journal records: %w", err)
	}
	return n, nil
}

// where is the filter as SQL conditions and their arguments.
func (f Filter) where() ([]string, []any) {
	var where []string
	var args []any
	for _, c := range []struct{ col, v string }{{"store", f.Store}, {"root", f.Root}, {"target", f.Target}, {"rule", f.Rule}, {"outcome", f.Outcome}, {"archive", f.Archive}} {
		if c.v != "" {
			where = append(where, c.col+"=?")
			args = append(args, c.v)
		}
	}
	if f.WithArchive {
		where = append(where, "archive != ''")
	}
	if f.BeforeID > 0 {
		where = append(where, "id < ?")
		args = append(args, f.BeforeID)
	}
	if f.AfterID > 0 {
		where = append(where, "id > ?")
		args = append(args, f.AfterID)
	}
	if !f.Since.IsZero() {
		where = append(where, "time >= ?")
		args = append(args, f.Since.UnixNano())
	}
	if !f.Until.IsZero() {
		where = append(where, "time < ?")
		args = append(args, f.Until.UnixNano())
	}
	if f.Dir != nil {
		where = append(where, "(root_ino = 0 OR root_dev = ? AND root_ino = ?)")
		args = append(args, int64(f.Dir.Dev), int64(f.Dir.Ino))
	}
	return where, args
}

// Latest returns the newest record of each root of store.
func (d *DB) Latest(ctx context.Context, store string) ([]Record, error) {
	return d.records(ctx, `SELECT `+recordCols+` FROM journal WHERE id IN (SELECT MAX(id) FROM journal WHERE store=? GROUP BY root)`, store)
}

// records runs a query selecting recordCols.
func (d *DB) records(ctx context.Context, q string, args ...any) ([]Record, error) {
	rows, err := d.db.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, fmt.Errorf("read journal: %w", err)
	}
	defer rows.Close()
	var out []Record
	for rows.Next() {
		r, err := scanRecord(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, r)
	}
	return out, rows.Err()
}

// ArchiveRoots is the set of roots with a record that names an archive:
// the only roots rotate.Archives finds any in. A status over 10,000
// session roots opened each of them and asked the journal twice, 1.3 s
// for none; journal_archive indexes those records alone.
func (d *DB) ArchiveRoots(ctx context.Context) (map[string]bool, error) {
	rows, err := d.db.QueryContext(ctx, `SELECT DISTINCT root FROM journal INDEXED BY journal_archive WHERE archive != ''`)
	if err != nil {
		return nil, fmt.Errorf("read journal: %w", err)
	}
	defer rows.Close()
	out := map[string]bool{}
	for rows.Next() {
		var root string
		if err := rows.Scan(&root); err != nil {
			return nil, fmt.Errorf("read journal: %w", err)
		}
		out[root] = true
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read journal: %w", err)
	}
	return out, nil
}

// ArchiveRecord is a record that made an archive the journal still
// holds, with the compression of that archive when one is done.
type ArchiveRecord struct {
	Record
	CompressedTo  string // the compressed file's name ('' when none)
	CompressedSHA string // its hash as the compression wrote it
}

// archiveCols is recordCols of the table aliased a.
var archiveCols = "a." + strings.ReplaceAll(recordCols, ",", ",a.")

// ArchiveRecords returns, newest first, root's records that made an
// archive (neither a compression nor a prune, the rules named by the
// caller) whose archive no done prune removed, under its name or its
// compressed one. Archive retention asks at every pass: reading every
// archive record of the root and its prunes made a year of daily
// compactions quadratic in the journal.
func (d *DB) ArchiveRecords(ctx context.Context, root, compressRule, pruneRule string) ([]ArchiveRecord, error) {
	rows, err := d.db.QueryContext(ctx, `SELECT `+archiveCols+`, COALESCE(c.archive,''), COALESCE(c.after_sha,'')
		FROM journal a INDEXED BY journal_archive
		LEFT JOIN journal c ON c.id = (SELECT MIN(x.id) FROM journal x
			WHERE x.root=a.root AND x.target=a.archive AND x.rule=?1 AND x.outcome=?4 AND x.archive != '')
		WHERE a.root=?2 AND a.archive != '' AND a.rule NOT IN (?1, ?3)
			AND NOT EXISTS (SELECT 1 FROM journal p
				WHERE p.root=a.root AND p.target=COALESCE(c.archive, a.archive) AND p.rule=?3 AND p.outcome=?4)
		ORDER BY a.id DESC`, compressRule, root, pruneRule, Done)
	if err != nil {
		return nil, fmt.Errorf("read journal: %w", err)
	}
	defer rows.Close()
	var out []ArchiveRecord
	for rows.Next() {
		var a ArchiveRecord
		a.Record, err = scanRecord(rows, &a.CompressedTo, &a.CompressedSHA)
		if err != nil {
			return nil, err
		}
		out = append(out, a)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read journal: %w", err)
	}
	return out, nil
}

// Stores and rules that appear in the journal, sorted: what a filter can
// name (memwatch log refuses the others).
func (d *DB) JournalNames(ctx context.Context) (stores, rules []string, err error) {
	for _, c := range []struct {
		col string
		out *[]string
	}{{"store", &stores}, {"rule", &rules}} {
		rows, err := d.db.QueryContext(ctx, `SELECT DISTINCT `+c.col+` FROM journal WHERE `+c.col+` != '' ORDER BY 1`)
		if err != nil {
			return nil, nil, fmt.Errorf("read journal: %w", err)
		}
		for rows.Next() {
			var v string
			if err := rows.Scan(&v); err != nil {
				rows.Close()
				return nil, nil, err
			}
			*c.out = append(*c.out, v)
		}
		rows.Close()
	}
	return stores, rules, nil
}

// ErrNoRecord is returned when a journal id does not exist.
var ErrNoRecord = errors.New("no such journal record")

// Get returns one record.
func (d *DB) GetRecord(ctx context.Context, id int64) (Record, error) {
	r, err := scanRecord(d.db.QueryRowContext(ctx, `SELECT `+recordCols+` FROM journal WHERE id=?`, id))
	if errors.Is(err, sql.ErrNoRows) {
		if id > 0 && id <= d.prunedBelow(ctx) {
			return r, fmt.Errorf("journal record %d: %w", id, ErrPrunedRecord)
		}
		return r, fmt.Errorf("journal record %d: %w", id, ErrNoRecord)
	}
	return r, err
}

// LastFor returns the newest record for (root, rule, target) with one of the outcomes, if any.
func (d *DB) LastFor(ctx context.Context, root, rule, target string, outcomes ...string) (Record, bool, error) {
	q := `SELECT ` + recordCols + ` FROM journal WHERE root=? AND rule=? AND target=?`
	args := []any{root, rule, target}
	if len(outcomes) > 0 {
		q += ` AND outcome IN (?` + strings.Repeat(",?", len(outcomes)-1) + `)`
		for _, o := range outcomes {
			args = append(args, o)
		}
	}
	q += ` ORDER BY id DESC LIMIT 1`
	r, err := scanRecord(d.db.QueryRowContext(ctx, q, args...))
	if errors.Is(err, sql.ErrNoRows) {
		return r, false, nil
	}
	return r, err == nil, err
}

// triggerKey carries what started the work a context is for.
type triggerKey struct{}

// WithTrigger marks ctx as work started by trigger: the records journaled
// under it say so.
func WithTrigger(ctx context.Context, trigger string) context.Context {
	return context.WithValue(ctx, triggerKey{}, trigger)
}

// TriggerOf is what WithTrigger put in ctx ("" when nothing did).
func TriggerOf(ctx context.Context) string {
	t, _ := ctx.Value(triggerKey{}).(string)
	return t
}

// DoneKey reports whether a change with key was journaled done (or left
// pending by a memwatch that was killed) for root/target: an index
// lookup.
func (d *DB) DoneKey(ctx context.Context, root, target, key string) (bool, error) {
	var n int
	err := d.db.QueryRowContext(ctx, `SELECT COUNT(*) FROM journal WHERE root=? AND target=? AND key=? AND outcome IN (?,?)`, root, target, key, Done, Pending).Scan(&n)
	if err != nil {
		return false, fmt.Errorf("look up journal key: %w", err)
	}
	return n > 0, nil
}

type scanner interface{ Scan(...any) error }

// scanRecord reads recordCols, then extra: columns a query adds after them.
func scanRecord(s scanner, extra ...any) (Record, error) {
	var r Record
	var t, ms, us int64
	err := s.Scan(append([]any{&r.ID, &t, &r.Store, &r.Root, &r.Rule, &r.Target, &r.Archive, &r.BeforeSHA, &r.BeforeSize,
		&r.AfterSHA, &r.AfterSize, &r.Tokens, &ms, &us, &r.Outcome, &r.Reason, &r.Data, &r.RootDev, &r.RootIno, &r.Key, &r.Trigger}, extra...)...)
	if err != nil {
		if errors.Is(err, sql.ErrNoRows) {
			return r, err
		}
		return r, fmt.Errorf("read journal record: %w", err)
	}
	r.Time = time.Unix(0, t)
	r.Duration = time.Duration(ms) * time.Millisecond
	if us > 0 { // records written before duration_us have milliseconds only
		r.Duration = time.Duration(us) * time.Microsecond
	}
	return r, nil
}

// Entry is a journal record as journal retention sees it: what it is for
// and roughly how many bytes it holds.
type Entry struct {
	ID      int64
	Time    time.Time
	Root    string
	Rule    string
	Target  string
	Archive string
	Outcome string
	// Bytes estimates the record's share of the database: its text
	// columns and data plus a fixed overhead for the row and its index
	// entries. It errs high for tiny records, which only prunes sooner.
	Bytes int64
}

// rowOverhead is the estimated fixed cost of a journal row: rowid, integer
// columns, record header and two index entries.
const rowOverhead = 96

// Entries lists every journal record, oldest first.
func (d *DB) Entries(ctx context.Context) ([]Entry, error) {
	rows, err := d.db.QueryContext(ctx, `SELECT j.id, time, root, rule, target, archive, outcome,
		length(store)+2*length(root)+2*length(rule)+2*length(target)+length(archive)+length(before_sha)+length(after_sha)+length(reason)+ifnull(length(j.data),0)+ifnull(length(w.data),0)
		FROM journal j LEFT JOIN written w ON w.id = j.id ORDER BY j.id`)
	if err != nil {
		return nil, fmt.Errorf("list journal: %w", err)
	}
	defer rows.Close()
	var out []Entry
	for rows.Next() {
		var e Entry
		var ns int64
		if err := rows.Scan(&e.ID, &ns, &e.Root, &e.Rule, &e.Target, &e.Archive, &e.Outcome, &e.Bytes); err != nil {
			return nil, fmt.Errorf("list journal: %w", err)
		}
		e.Time, e.Bytes = time.Unix(0, ns), e.Bytes+rowOverhead
		out = append(out, e)
	}
	return out, rows.Err()
}

// ErrPrunedRecord is returned for a journal record that journal retention
// removed: the action it recorded can no longer be undone.
var ErrPrunedRecord = errors.New("pruned by journal retention (journal_max_age, journal_max_bytes)")

// DeleteRecords removes journal records (journal retention) in one
// transaction and remembers the highest id removed, so that GetRecord can
// tell a pruned record from one that never was.
func (d *DB) DeleteRecords(ctx context.Context, ids []int64) error {
	if len(ids) == 0 {
		return nil
	}
	tx, err := d.db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("prune journal: %w", err)
	}
	defer tx.Rollback()
	stmt, err := tx.PrepareContext(ctx, `DELETE FROM journal WHERE id=?`)
	if err != nil {
		return fmt.Errorf("prune journal: %w", err)
	}
	defer stmt.Close()
	kept, err := tx.PrepareContext(ctx, `DELETE FROM written WHERE id=?`)
	if err != nil {
		return fmt.Errorf("prune journal: %w", err)
	}
	defer kept.Close()
	high := int64(0)
	for _, id := range ids {
		if _, err := stmt.ExecContext(ctx, id); err != nil {
			return fmt.Errorf("prune journal record %d: %w", id, err)
		}
		if _, err := kept.ExecContext(ctx, id); err != nil {
			return fmt.Errorf("prune journal record %d: %w", id, err)
		}
		high = max(high, id)
	}
	if _, err := tx.ExecContext(ctx, `INSERT INTO kv(ns,key,value) VALUES('journal','pruned-below',?)
		ON CONFLICT(ns,key) DO UPDATE SET value=CASE WHEN CAST(excluded.value AS INTEGER) > CAST(value AS INTEGER) THEN excluded.value ELSE value END`,
		[]byte(fmt.Sprint(high))); err != nil {
		return fmt.Errorf("prune journal: %w", err)
	}
	return tx.Commit()
}

// prunedBelow is the highest journal id retention removed (0 for none).
func (d *DB) prunedBelow(ctx context.Context) int64 {
	v, ok, err := d.Get(ctx, "journal", "pruned-below")
	if err != nil || !ok {
		return 0
	}
	var n int64
	fmt.Sscan(string(v), &n)
	return n
}
