// Package rewrite is the one way memwatch changes an agent's file.
//
// Every layout hands its new content to Apply, which guarantees:
//   - every write an agent makes ends up in its live file, the file the
//     agent reads (a copy elsewhere is a backup, not a kept write): memwatch's
//     result goes live only while it contains everything the agent wrote,
//     an agent's version that met memwatch's goes live again at once, and
//     lines a genuine conflict left out are put back (see below);
//   - memwatch never removes, truncates or overwrites content it has not
//     itself hashed as its own: the pre-image is in an archive (fsynced,
//     never overwritten) before anything replaces it, and anything found at
//     a name memwatch is about to delete that is not exactly what it
//     archived or wrote is kept (moved into the archive directory and
//     journaled; a keep that fails is journaled as failed). The one
//     exception is asked for by name: a scrub (Request.Scrub, the opt-in
//     masking of credentials) keeps no pre-image, since keeping the values
//     is what it must not do;
//   - the result replaces the target atomically and keeps its owner and
//     mode; a file held open for writing by another process is not replaced
//     (its later writes would go to a file nobody reads): the rewrite is
//     deferred with a BusyError naming the holder when it can be seen;
//   - the change is journaled: a pending record before anything is
//     replaced, resolved at the next start if memwatch is killed;
//   - every file operation goes through a confine.Root: nothing outside the
//     store root is touched, and what memwatch creates belongs to the root's
//     owner.
//
// # The protocol
//
// One attempt on target T in directory D (a descriptor, see confine.Dir).
// All the slow work (the computation, the archive and its fsync, the
// journal, the temp file and its fsync) comes before the last check; the
// last check, the exchange and the classification of the displaced file
// run back to back, so memwatch's result is at T for microseconds before
// memwatch knows it holds every write the agent made.
//
//  1. READ. Open T without following a symlink, wait until it was last
//     written at least Settle ago (at most a few Settles), read S, keep the
//     descriptor (its inode is S's identity). COMPUTE N from S (maybe an LLM
//     call). Kill: nothing changed.
//  2. ARCHIVE S (unless N only inserts into S, or T holds exactly memwatch's
//     own earlier output): a temp file in the archive directory, fsync,
//     owner and mode of T, link() to a name that does not exist yet, fsync
//     of the directory; the archive stays open. Kill: at most a leftover
//     archive temp, removed at the next start.
//  3. JOURNAL pending {before: hash(S), after: hash(N), archive}. Kill: the
//     record is resolved at the next start by hashing T.
//  4. PURE APPEND (N = S + tail): the tail is written in place with
//     O_APPEND on S's inode, after anything an agent appended meanwhile;
//     no exchange, no archive. A writer holding T keeps writing to the one
//     file there is.
//  5. TEMP. Write N to a new temp file in D named with the record id,
//     fsync, owner and mode of T. Kill: the temp holds N and is removed at
//     the next start.
//  6. LAST CHECK. Read T again. S (same inode, same bytes): go on. S plus
//     bytes after a complete line (an agent appended, in place or by
//     renaming a file holding S and more onto T): the bytes are written
//     into the temp file and the archive (no fsync: they are as durable as
//     the agent's own write), S becomes S plus them, and the check runs
//     again (64 times at most: then BusyError). Anything else: once T has
//     been quiet for Settle, ErrConflict (the attempt starts again from
//     the agent's file). Then HELD? If another process holds T open for
//     writing and does not let go within a Settle, BusyError.
//  7. EXCHANGE the temp and T with renameat2(RENAME_EXCHANGE): T is N, the
//     temp name holds X, the file that was at T. Kill: T is N (the record
//     resolves to done); the next start classifies X as in 8.
//  8. CLASSIFY X at once: it must be S's inode, held open for writing by
//     nobody (a read lease is granted), with exactly S's bytes. Then it is
//     the archived pre-image: removed. N is live, and it holds every write
//     the agent made, since X held none that N lacks.
//  9. EXCHANGE BACK otherwise, at once: T is X again (the agent's version,
//     and the file a writer holding it writes to), the temp name holds N.
//     N as written is removed; N with bytes an agent appended in the
//     instant it was live has them appended to T (watched as lines put
//     back are, below), and is kept as a backup;
//     N rewritten by an agent is kept and what it added to N is put into
//     T (see below). If an agent had already renamed a newer file onto T
//     (N is gone), that file stays and X's additions to S are put into it.
//     If a writer opened N in the instant it was live and holds it, N goes
//     back to T (that writer's next writes go there), X is kept and what X
//     added to S is put into T. When what that writer wrote into N is
//     built on N (it lacks the lines N dropped, or has one only N had),
//     the rewrite took effect and is journaled done, as it is when the
//     newer file was written from N; a version of the writer's own over N
//     is a conflict.
//     Otherwise the attempt ends in ErrConflict (BusyError if a writer
//     holds X).
//  10. JOURNAL done with the hash of what is at T, and the pre-image with
//     every carried append (the archive's content).
//
// The next start (Recover, CleanTemp) applies the same rules to every temp
// file left in a root: a temp whose content is exactly the record's
// pre-image or result is removed; one that extends them has its tail
// appended to the target (unless the target has it) and is kept; anything
// else is kept and the lines it added to the pre-image are put into the
// target. The rule under all of it: memwatch removes a file only when its
// content is exactly a copy it archived or wrote itself.
//
// # One read-modify-write agent
//
// What an agent that reads T, adds its entry and writes T back (in place
// with O_TRUNC, or a temp file renamed onto T) leaves in the live file,
// by where its write and its next read fall:
//
//   - write before 6: the last check sees it (an append is carried; any
//     other change restarts the attempt from the agent's file).
//   - write between 6 and 7 (in place, or a rename): X is not S; 9 puts it
//     back at once.
//   - write between 7 and 8: in place it truncates N and writes S plus its
//     entry into it; by rename it replaces N. Either way T is the agent's
//     version, X is S, and 8 removes X. memwatch's compaction is undone by
//     the agent, nothing of the agent's is lost, and the rule runs again.
//   - read between 7 and 8, after a write between 6 and 8: the agent holds
//     N, which lacks that write, and writes N plus its next entry later.
//     This needs a write and the next read within microseconds of each
//     other (or memwatch descheduled in between); the protocol cannot
//     prevent it, so it repairs it (below).
//
// # Genuine conflicts
//
// When both memwatch's result and the agent's version carry a write of
// the agent's, only one can be the live file. The other is kept as a
// backup in the archive directory, and the lines its writer added are put
// into the live file: for markdown and JSONL memory, writes are lines
// added to what the agent read, so a line-level three-way merge against
// the version they were added to (S, or N) finds them (Added), and each
// block goes back after the lines it followed (Insert). An agent's
// deletion is never replayed. Lines whose version is not live are put back
// at once. Lines of X after an exchange back are live, but an agent that
// read N in the instant it was at T writes a version without them: for
// half an hour, a version of T written from N (it lacks every line N
// dropped, or has a line only N had) gets them back; a version written
// from X that lacks them is the agent's own edit and is left alone. Each
// put-back is a rewrite of its own, journaled under RuleRestore; the
// daemon runs it when the root changes, and Apply runs it before any
// rewrite of the file. A put-back meets read-modify-write agents like any
// rewrite: one that read the file just before writes its next version
// without the lines. So put-back lines stay watched: a later version that
// lacks every one of them (not some: that is the agent's edit) gets them
// back again, up to maxRestores times, until a version written after the
// put-back keeps them or memwatch's own rewrite takes them out (into its
// archive).
//
// What this cannot protect: an agent that writes into memwatch's temp
// names (they carry a random part and the TempMarker), and, on file systems
// without RENAME_EXCHANGE, a rename by the agent in the instant between the
// fallback's link and rename (documented at renameSwap).
package rewrite

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/memwatch/memwatch/confine"
	"github.com/memwatch/memwatch/filesum"
	"github.com/memwatch/memwatch/state"
)

// TempMarker is part of the name of every temporary file memwatch creates.
const TempMarker = confine.TempMarker

// DefaultArchiveDir is where pre-images go when a layout names no archive path.
const DefaultArchiveDir = ".memwatch/archive"

// createdData marks the journal record of a change that created its
// target: its undo takes the file out again (into the archive).
const createdData = `{"created":true}`

// scrubbedData marks the journal record of a scrub (Request.Scrub): no
// pre-image was kept, so there is nothing to undo to.
const scrubbedData = `{"scrubbed":true}`

// RemovedSHA is the after-hash of a removal: the file is gone.
const RemovedSHA = "removed"

// Defaults of the Rewriter's timing.
const (
	// DefaultSettle is how long a file must have been unchanged before
	// memwatch reads it as a pre-image: an agent's rewrite in place (a
	// truncate, then writes) is done by then. It is short, so an agent
	// that writes every few milliseconds is still read within a few.
	DefaultSettle = 5 * time.Millisecond
	// DefaultMaxSettle bounds the wait for a file to go quiet; a file still
	// written after it is being written continuously.
	DefaultMaxSettle = 500 * time.Millisecond
)

// ErrConflict means the target kept changing in a way that cannot be merged;
// the job should start again from the current file.
var ErrConflict = errors.New("target changed while memwatch was rewriting it")

// ErrUnchanged is returned by Compute when there is nothing to write.
var ErrUnchanged = errors.New("nothing to change")

// ErrBusy is wrapped by BusyError.
var ErrBusy = errors.New("target is being written continuously")

// BusyError means another process keeps the target open for writing, or
// writes it without pause, so replacing it now would lose its writes.
type BusyError struct {
	Path    string   // root-relative
	Why     string   // what was seen
	Holders []Holder // processes holding it open for writing, when visible
}

func (e *BusyError) Error() string {
	s := fmt.Sprintf("%s is being written continuously (%s)", e.Path, e.Why)
	if len(e.Holders) > 0 {
		var hs []string
		for _, h := range e.Holders {
			hs = append(hs, h.String())
		}
		s += " by " + strings.Join(hs, ", ")
	}
	return s
}

func (e *BusyError) Unwrap() error { return ErrBusy }

// Rejected is returned by Compute when a guard refused the new content.
type Rejected struct{ Reason string }

func (r *Rejected) Error() string { return "rejected: " + r.Reason }

// Request describes one rewrite of one target.
type Request struct {
	Root   *confine.Root
	Target string // relative to Root
	// Archive is the root-relative path for the pre-image, e.g.
	// "memory/2026-01-15-1430.md"; "-2", "-3" are added before the
	// extension on collision. Empty means DefaultArchiveDir.
	Archive string
	// AllowCreate lets the target be missing; Compute then receives nil,
	// and missing directories are created (owned by the root's owner).
	AllowCreate bool
	// OwnedSHA marks memwatch's own earlier output (a derived file such as a
	// snapshot): when the target still has exactly this hash it is replaced
	// without an archive, since nothing an agent wrote is in it.
	OwnedSHA string
	// Mode is a created file's mode; 0 means the root's FileMode. An
	// existing target keeps its own.
	Mode fs.FileMode
	// From lists the files (root-relative) the new content is made of. A
	// created file is never more readable than the most private of them:
	// its group and other bits are those every one of them has (a HISTORY.md
	// made from a 0600 session log is 0600). A file of From that cannot be
	// stat'ed (an agent deleted its log) counts as private. With From
	// empty, a created file is its owner's alone, unless Mode is set (a
	// restore of a file's recorded mode).
	From []string
	// Compute returns the new content from the current one. It may be slow
	// (an LLM call). It returns ErrUnchanged or a *Rejected to write nothing.
	Compute func(ctx context.Context, old []byte) ([]byte, error)
	// Append, set instead of Compute, makes the change a pure append to an
	// append-only file (a history): it is given the file's last bytes (at
	// most AppendContext; nil for a file that does not exist yet) and
	// returns the bytes to add after them, or ErrUnchanged. The file is
	// never read whole: the append, its journal record and its hashes cost
	// in proportion to the bytes added (see append.go).
	Append func(ctx context.Context, end []byte) ([]byte, error)
	// Scrub marks the one rewrite that keeps no copy of what it replaces:
	// the masking of credentials in an agent's log (scrub_secrets, opt-in),
	// whose point is that the values are kept nowhere. The pre-image is
	// not archived and the record cannot be undone; every other guarantee
	// holds (an agent's write meanwhile is carried into the result).
	Scrub bool

	// restoring marks Restore's own rewrite, which must not restore first;
	// used holds the entries of lines at risk its Compute put back.
	restoring bool
	used      *[]risk
}

// Outcome says what Apply did.
type Outcome struct {
	Status  string // state.Done, state.Skipped or state.Rejected
	Reason  string
	Archive string // archive path relative to root, "" when nothing was archived
	Record  int64  // journal id, 0 when nothing was journaled
	// Target and Also are an undo's: the file it restored (or removed,
	// when the undone change created it) and the other changes of the same
	// action it undid with it.
	Target  string
	Removed bool
	Also    []Outcome
}

// Rewriter applies rewrites and journals them.
type Rewriter struct {
	DB  *state.DB
	Log *slog.Logger
	Now func() time.Time
	// MaxAttempts bounds restarts after ErrConflict within one Apply.
	MaxAttempts int
	// Settle and MaxSettle time the quiet checks (see the package doc).
	Settle, MaxSettle time.Duration
	// Resolvers settle pending journal records of changes that are not file
	// rewrites (database rows), by rule.
	Resolvers map[string]func(context.Context, *state.Record) (outcome, reason string)
	// OpenRoot opens the root a journal record names, for undo and
	// recovery: the daemon's opens it as a root of the policy in force
	// (its store's checks), refusing a path that is no root any more. Nil
	// opens it with the default checks.
	OpenRoot func(path string) (*confine.Root, error)

	// BeforeChange, when set, is called before memwatch changes an
	// existing file (the daemon captures the agent's version of it, which
	// memwatch's write would otherwise be the first to be seen after).
	BeforeChange func(root *confine.Root, rel string)

	// Sums keeps the sha256 of the files memwatch appends to, so an
	// append's journal record does not hash the file whole; nil hashes it.
	Sums *filesum.Registry

	// hook lets tests act as an agent at the protocol's steps
	// ("before-exchange", "after-exchange", "after-exchange-back"); nil
	// outside tests.
	hook func(step string)
	// risk is the lines at risk after conflicts (see Restore).
	risk risks
}

// New returns a Rewriter journaling into db (nil: nothing is journaled).
func New(db *state.DB, log *slog.Logger) *Rewriter {
	return &Rewriter{DB: db, Log: log, Now: time.Now, MaxAttempts: 3, Settle: DefaultSettle, MaxSettle: DefaultMaxSettle}
}

// Hash is the hex sha256 used throughout the journal.
func Hash(b []byte) string {
	h := sha256.Sum256(b)
	return hex.EncodeToString(h[:])
}

// Apply runs one rewrite. rec carries store, rule and token use, and is
// completed and journaled by Apply.
func (w *Rewriter) Apply(ctx context.Context, req Request, rec *state.Record) (Outcome, error) {
	start := time.Now()
	defer func() { rec.Duration = time.Since(start) }()
	target, err := req.Root.Rel(req.Target)
	if err != nil {
		return Outcome{}, err
	}
	rec.Root, rec.Target = req.Root.Path(), target
	rec.RootDev, rec.RootIno = rootID(req.Root)
	// An in-root symlink keeps pointing at the file it names: rewrite that one.
	real, err := req.Root.Resolve(target)
	if err != nil {
		return Outcome{}, err
	}
	var dir *confine.Dir
	if req.AllowCreate {
		dir, err = req.Root.MkdirAll(filepath.Dir(real))
	} else {
		dir, err = req.Root.Dir(filepath.Dir(real))
	}
	if err != nil {
		return Outcome{}, fmt.Errorf("rewrite %s: %w", target, err)
	}
	defer dir.Close()
	name := filepath.Base(real)
	for attempt := 1; ; attempt++ {
		// Lines a conflict left out of the live file go back first, so the
		// rewrite starts from a file that has them.
		w.restoreFirst(ctx, req, target, rec.Store)
		var out Outcome
		if req.Append != nil {
			out, err = w.appendAttempt(ctx, req, dir, name, rec, start)
		} else {
			out, err = w.attempt(ctx, req, dir, name, rec, start)
		}
		if errors.Is(err, ErrConflict) && attempt < w.MaxAttempts && ctx.Err() == nil {
			w.Log.Info("target changed during rewrite; starting again", "root", rec.Root, "path", rec.Target, "rule", rec.Rule, "attempt", attempt)
			rec.ID, rec.Time = 0, time.Time{} // a new record for the new attempt
			continue
		}
		return out, err
	}
}

// CreateMode is the mode of a file memwatch creates in root from the files
// from (see Request.From): mode (the root's FileMode when 0), without the
// group and other bits any of them lacks. No from: mode when it was given,
// else the owner's bits alone.
func CreateMode(root *confine.Root, mode fs.FileMode, from []string) fs.FileMode {
	given := mode != 0
	if !given {
		mode = root.FileMode()
	}
	if len(from) == 0 {
		if given {
			return mode
		}
		return mode & 0o700
	}
	for _, rel := range from {
		fi, err := root.Stat(rel)
		if err != nil || !fi.Mode().IsRegular() {
			return mode & 0o700 // unknown: as private as it gets
		}
		mode &= fi.Mode().Perm() | 0o700
	}
	return mode
}

// snapshot is what was read of the target, with the descriptor kept open:
// its inode is the pre-image's identity.
type snapshot struct {
	f      *os.File
	exists bool
	data   []byte
	sha    string
	dev    uint64
	ino    uint64
	mode   fs.FileMode
	uid    int
	gid    int
	mtime  time.Time
}

func (s *snapshot) close() {
	if s != nil && s.f != nil {
		s.f.Close()
		s.f = nil
	}
}

// hash is the pre-image's sha256, computed once.
func (s *snapshot) hash() string {
	if s.sha == "" {
		s.sha = Hash(s.data)
	}
	return s.sha
}

func (s *snapshot) sameInode(o *snapshot) bool {
	return s.exists == o.exists && s.dev == o.dev && s.ino == o.ino
}

func readSnapshot(dir *confine.Dir, name string) (*snapshot, error) {
	f, err := dir.Open(name, os.O_RDONLY)
	if errors.Is(err, fs.ErrNotExist) {
		return &snapshot{}, nil
	}
	if err != nil {
		return nil, err
	}
	s := &snapshot{f: f, exists: true}
	if err := s.reread(dir.Root().MaxFileSize()); err != nil {
		f.Close()
		return nil, fmt.Errorf("read %s: %w", dir.Rel(name), err)
	}
	return s, nil
}

// reread reads the inode behind the descriptor again, from the start.
func (s *snapshot) reread(limit int64) error {
	fi, err := s.f.Stat()
	if err != nil {
		return err
	}
	if fi.Size() > limit {
		return fmt.Errorf("%w (%d bytes, limit %d)", confine.ErrTooLarge, fi.Size(), limit)
	}
	buf := make([]byte, fi.Size())
	n, err := s.f.ReadAt(buf, 0)
	if err != nil && n < len(buf) && !errors.Is(err, io.EOF) {
		return err
	}
	s.data = buf[:n]
	s.sha = "" // hashed when needed: the last check compares bytes
	s.mode, s.mtime = fi.Mode().Perm(), fi.ModTime()
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		s.dev, s.ino, s.uid, s.gid = uint64(st.Dev), uint64(st.Ino), int(st.Uid), int(st.Gid)
	}
	return nil
}

// waitQuiet waits (at most a few Settle periods) until the snapshot's file
// was last written at least Settle ago, then rereads it, so that a file an
// agent is rewriting in place is rarely read half written. A file written
// without pause is read anyway: what changes after is re-checked in step 3.
func (w *Rewriter) waitQuiet(ctx context.Context, s *snapshot, limit int64) error {
	if !s.exists {
		return nil
	}
	deadline := time.Now().Add(4 * w.Settle)
	for time.Since(s.mtime) < w.Settle && time.Now().Before(deadline) {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(w.Settle):
		}
		fi, err := s.f.Stat()
		if err != nil {
			return err
		}
		if !fi.ModTime().Equal(s.mtime) || fi.Size() != int64(len(s.data)) {
			if err := s.reread(limit); err != nil {
				return err
			}
		}
	}
	return nil
}

func (w *Rewriter) attempt(ctx context.Context, req Request, dir *confine.Dir, name string, rec *state.Record, start time.Time) (Outcome, error) {
	limit := req.Root.MaxFileSize()
	snap, err := readSnapshot(dir, name)
	if err != nil {
		return Outcome{}, err
	}
	defer func() { snap.close() }()
	if !snap.exists && !req.AllowCreate {
		return Outcome{}, fmt.Errorf("rewrite %s: %w", rec.Target, fs.ErrNotExist)
	}
	if err := w.waitQuiet(ctx, snap, limit); err != nil {
		return Outcome{}, err
	}
	newData, err := req.Compute(ctx, snap.data)
	var rej *Rejected
	switch {
	case errors.Is(err, ErrUnchanged):
		return Outcome{Status: state.Skipped, Reason: "nothing to change"}, nil
	case errors.As(err, &rej):
		rec.Outcome, rec.Reason = state.Rejected, rej.Reason
		rec.BeforeSHA, rec.BeforeSize = snap.hash(), int64(len(snap.data))
		rec.AfterSHA, rec.AfterSize = snap.hash(), int64(len(snap.data))
		if err := w.journal(ctx, rec, true); err != nil {
			return Outcome{}, err
		}
		w.Log.Warn("rewrite rejected; original kept", "store", rec.Store, "root", rec.Root, "rule", rec.Rule, "path", rec.Target, "reason", rej.Reason, "journal", rec.ID)
		return Outcome{Status: state.Rejected, Reason: rej.Reason, Record: rec.ID}, nil
	case err != nil:
		return Outcome{}, err
	}
	if snap.exists && bytes.Equal(newData, snap.data) {
		return Outcome{Status: state.Skipped, Reason: "nothing to change"}, nil
	}
	if err := ctx.Err(); err != nil {
		return Outcome{}, err
	}

	if snap.exists {
		fi, err := snap.f.Stat()
		if err != nil {
			return Outcome{}, err
		}
		if !req.Root.Owner().MayWrite(fi) {
			return Outcome{}, fmt.Errorf("rewrite %s: %w (uid %d may not write it; memwatch leaves it alone)", rec.Target, confine.ErrDenied, req.Root.Owner().UID)
		}
	}

	if snap.exists && w.BeforeChange != nil {
		w.BeforeChange(req.Root, rec.Target)
	}
	if snap.exists && bytes.HasPrefix(newData, snap.data) {
		// 4. A pure append is written in place: the inode stays, so a writer
		// that keeps the file open never writes into a replaced file, and
		// O_APPEND puts it after anything an agent appended meanwhile.
		return w.appendOnly(ctx, req, dir, name, snap, newData[len(snap.data):], rec, start)
	}
	if snap.exists {
		// Asked early: a file held open for writing will not be replaced,
		// so do not archive it either. The swap asks again just before.
		if w.heldOpen(ctx, req.Root, snap.f) {
			fi, _ := snap.f.Stat()
			dev, ino := inode(fi)
			return Outcome{}, &BusyError{Path: rec.Target, Why: "held open for writing", Holders: writers(dev, ino)}
		}
	}

	// 2. ARCHIVE the pre-image unless the change only inserts bytes: then
	// nothing is removed, and undo takes the insertion out again.
	s := &swapper{w: w, dir: dir, name: name, snap: snap, rec: rec}
	if !snap.exists {
		s.mode = CreateMode(req.Root, req.Mode, req.From)
	}
	rec.Archive, rec.Data = "", nil
	if !snap.exists {
		rec.Data = []byte(createdData) // undo removes the file again
	} else if at, ok := insertion(snap.data, newData); ok {
		rec.Data = []byte(fmt.Sprintf(`{"insert_at":%d}`, at))
	} else if req.Scrub {
		rec.Data = []byte(scrubbedData)
	} else if !(req.OwnedSHA != "" && req.OwnedSHA == snap.hash()) {
		arch, af, err := w.writeArchive(req.Root, archiveName(req.Archive, rec.Target, w.Now()), snap.data, snap.mode, snap.uid, snap.gid)
		if err != nil {
			return Outcome{}, err
		}
		defer af.Close()
		rec.Archive, s.archive, s.archiveSize = arch, af, int64(len(snap.data))
	}
	rec.BeforeSHA, rec.BeforeSize = snap.hash(), int64(len(snap.data))
	rec.AfterSHA, rec.AfterSize = Hash(newData), int64(len(newData))
	// 3. JOURNAL pending. The reason, if Compute set one (a fallback note), is kept.
	rec.Outcome = state.Pending
	if err := w.journal(ctx, rec, true); err != nil {
		return Outcome{}, err
	}

	s.newData = newData
	// A whole rewrite (an archived pre-image, a new file, a file memwatch
	// owns) keeps what it wrote with its record, so the record shows its
	// diff whatever the file becomes (an insertion's diff is its versions').
	keep := (rec.Archive != "" || !snap.exists || rec.Data == nil) && !req.Scrub
	final, err := s.run(ctx)
	// Appends carried in the last check are in the pre-image too.
	rec.BeforeSHA, rec.BeforeSize = Hash(snap.data), int64(len(snap.data))
	out, err := w.finish(ctx, req, rec, snap.data, final, err, start)
	if err == nil && keep && w.DB != nil {
		if kerr := w.DB.KeepWritten(context.WithoutCancel(ctx), rec.ID, final); kerr != nil {
			w.Log.Warn("keep what a rewrite wrote (its diff will show while the file or a version has it)", "path", rec.Target, "journal", rec.ID, "err", kerr)
		}
	}
	return out, err
}

// appendOnly writes a pure append after checking that the file still
// starts with what Compute saw (a rewrite by the agent meanwhile means the
// tail was computed from an old version: start again).
func (w *Rewriter) appendOnly(ctx context.Context, req Request, dir *confine.Dir, name string, snap *snapshot, tail []byte, rec *state.Record, start time.Time) (Outcome, error) {
	cur, err := readSnapshot(dir, name)
	if err != nil {
		return Outcome{}, err
	}
	cur.close()
	if !cur.exists || !cur.sameInode(snap) || !bytes.HasPrefix(cur.data, snap.data) {
		return Outcome{}, ErrConflict
	}
	rec.Archive, rec.Data = "", nil
	rec.BeforeSHA, rec.BeforeSize = cur.hash(), int64(len(cur.data))
	rec.AfterSHA, rec.AfterSize = Hash(append(append([]byte{}, cur.data...), tail...)), int64(len(cur.data)+len(tail))
	rec.Outcome = state.Pending
	if err := w.journal(ctx, rec, true); err != nil {
		return Outcome{}, err
	}
	final, err := appendInPlace(dir, name, snap, tail)
	if err == nil && int64(len(final)) != rec.AfterSize {
		// An agent appended between the check and our write: ours follows it.
		rec.BeforeSHA, rec.BeforeSize = Hash(final[:len(final)-len(tail)]), int64(len(final)-len(tail))
	}
	return w.finish(ctx, req, rec, cur.data, final, err, start)
}

// finish journals how a rewrite from pre ended, and updates the file's
// lines at risk when it is done.
func (w *Rewriter) finish(ctx context.Context, req Request, rec *state.Record, pre, final []byte, err error, start time.Time) (Outcome, error) {
	if err != nil {
		rec.Outcome, rec.Reason, rec.Duration = state.Failed, err.Error(), time.Since(start)
		var busy *BusyError
		switch {
		case errors.As(err, &busy):
			rec.Outcome, rec.Reason = state.Skipped, "deferred: "+busy.Error()
		case errors.Is(err, ErrConflict):
			rec.Reason = "conflict: the agent wrote the file during the rewrite; its version stays live, memwatch starts again"
		}
		// Use a fresh context: the record must be resolved even on shutdown.
		if uerr := w.journal(context.WithoutCancel(ctx), rec, false); uerr != nil {
			return Outcome{}, errors.Join(err, uerr)
		}
		return Outcome{}, err
	}
	rec.AfterSHA, rec.AfterSize = Hash(final), int64(len(final))
	rec.Outcome = state.Done
	rec.Duration = time.Since(start)
	if err := w.journal(context.WithoutCancel(ctx), rec, false); err != nil {
		return Outcome{}, err
	}
	var used []risk
	if req.used != nil {
		used = *req.used
	}
	w.rewritten(ctx, riskKey(rec.Root, rec.Target), pre, final, used)
	w.Log.Info("rewrote file", "store", rec.Store, "root", rec.Root, "rule", rec.Rule, "path", rec.Target, "outcome", rec.Outcome,
		"archive", rec.Archive, "before", rec.BeforeSize, "after", rec.AfterSize, "journal", rec.ID)
	return Outcome{Status: state.Done, Archive: rec.Archive, Record: rec.ID}, nil
}

// heldOpen reports whether another process holds f's file open for
// writing beyond a short while: an agent that opens, writes and closes
// (O_APPEND for every entry) lets go within a Settle, and is waited for;
// one that keeps it open is not.
func (w *Rewriter) heldOpen(ctx context.Context, root *confine.Root, f *os.File) bool {
	deadline := time.Now().Add(w.Settle)
	for {
		held, ok := root.HeldForWriting(f)
		if !ok || !held {
			return false
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return true
		}
		time.Sleep(w.Settle / 10)
	}
}

// insertion reports whether b is a with one contiguous block inserted, and where.
func insertion(a, b []byte) (int, bool) {
	if len(b) < len(a) {
		return 0, false
	}
	p := 0
	for p < len(a) && a[p] == b[p] {
		p++
	}
	return p, bytes.Equal(a[p:], b[len(b)-(len(a)-p):])
}

// journal appends (or updates) rec; without a database (one-off edits with
// no state directory) nothing is journaled.
func (w *Rewriter) journal(ctx context.Context, rec *state.Record, appendNew bool) error {
	if w.DB == nil {
		return nil
	}
	if appendNew {
		_, err := w.DB.Append(ctx, rec)
		return err
	}
	return w.DB.Update(ctx, rec)
}

// appendInPlace appends tail to the target's inode the snapshot read. A
// write that slipped in since is kept: O_APPEND puts ours after it.
func appendInPlace(dir *confine.Dir, name string, snap *snapshot, tail []byte) ([]byte, error) {
	f, err := dir.Open(name, os.O_WRONLY|os.O_APPEND)
	if err != nil {
		return nil, fmt.Errorf("append to %s: %w", dir.Rel(name), err)
	}
	defer f.Close()
	if fi, err := f.Stat(); err != nil || !sameInode(fi, snap.dev, snap.ino) {
		return nil, ErrConflict // replaced since the re-check: start again
	}
	if _, err := f.Write(tail); err != nil {
		return nil, fmt.Errorf("append to %s: %w", dir.Rel(name), err)
	}
	if err := f.Sync(); err != nil {
		return nil, fmt.Errorf("sync %s: %w", dir.Rel(name), err)
	}
	// What the file held the moment our bytes landed: they end at the
	// descriptor's offset, after whatever an agent appended before them.
	end, err := f.Seek(0, io.SeekCurrent)
	if err != nil || end < int64(len(tail)) {
		return append(append([]byte{}, snap.data...), tail...), nil
	}
	final := make([]byte, end)
	if n, err := snap.f.ReadAt(final, 0); n < len(final) && err != nil {
		return append(append([]byte{}, snap.data...), tail...), nil
	}
	return final, nil
}

func sameInode(fi fs.FileInfo, dev, ino uint64) bool {
	st, ok := fi.Sys().(*syscall.Stat_t)
	return ok && uint64(st.Dev) == dev && uint64(st.Ino) == ino
}

// IsTemp reports whether a path is one of memwatch's temporary files.
func IsTemp(p string) bool { return confine.IsTemp(p) }
