// Package rewrite is the one way memwatch changes an agent's file.
//
// Every layout hands its new content to Apply, which guarantees:
//   - memwatch never removes, truncates or overwrites content it has not
//     itself hashed as its own: the pre-image is in an archive (fsynced, never
//     overwritten) before anything replaces it, and anything found at a name
//     memwatch is about to delete that is not exactly what it archived or
//     wrote is kept (moved into the archive directory and journaled);
//   - an agent's write made while memwatch works is never lost: an append is
//     carried into the result, any other change makes the attempt start
//     again from the file as it now is;
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
// One attempt on target T in directory D (a descriptor, see confine.Dir),
// with what a kill or an agent's write at each step leaves on disk:
//
//  1. READ. Open T without following a symlink, read S, keep the descriptor
//     (its inode is S's identity). If T was written in the last Settle, wait
//     until it is quiet (at most MaxSettle) so S is not a half-written file.
//     Kill: nothing changed.
//  2. COMPUTE N from S (maybe an LLM call). Kill: nothing changed.
//  3. RECHECK. Read T again. Unchanged: go on. S plus appended bytes A: the
//     result becomes N+A and the pre-image S+A. Anything else: start again
//     (nothing written). Kill: nothing changed.
//  4. Pure append (N = S + tail): write the tail in place with O_APPEND on
//     the same inode and stop. No archive is needed: nothing is removed, and
//     undo removes the tail. A writer holding T open keeps writing to the
//     one file there is.
//  5. ARCHIVE S (unless T holds exactly memwatch's own earlier output): a
//     temp file in the archive directory, fsync, owner and mode of T, then
//     link() to a name that does not exist yet (an archive is never
//     overwritten), fsync of the directory. Kill: a leftover archive temp,
//     a copy of S which is still at T; removed at the next start.
//  6. JOURNAL pending {before: hash(S), after: hash(N), archive}. Kill: the
//     record is resolved at the next start by hashing T (still S: failed).
//  7. TEMP. Write N to a new temp file in D named with the record id,
//     fsync, give it T's owner and mode. Kill: the temp holds N (the
//     record's after-hash) and is removed at the next start.
//  8. HELD? If another process holds T open for writing (a read lease is
//     refused), remove the temp and return a BusyError: replacing T would
//     send that writer's later writes to an unlinked file.
//  9. EXCHANGE the temp and T with renameat2(RENAME_EXCHANGE): T is now N,
//     the temp name holds the displaced file X. Both survive, whatever the
//     agent did a moment before. Kill: T is N (the record resolves to done);
//     the temp name holds X, which the next start classifies as in step 11.
//  10. SETTLE. Wait until X has been quiet for Settle: a writer that opened
//     T just before the exchange finishes its write into X. If X does not
//     go quiet within MaxSettle, a writer is holding it: EXCHANGE BACK (T
//     is X again, with every byte that writer wrote), resolve the temp name
//     as in step 12, and return a BusyError.
//  11. CLASSIFY X. Exactly S: it is archived; remove it (after checking the
//     name still is that inode with that content). S plus a tail (writes in
//     flight at the exchange): append the tail to T, and keep X in the
//     archive directory, journaled: an agent that read T in the moment the
//     tail was missing may write T back without it, so the tail is never
//     only in T. (O_APPEND overwrites nothing; lines in flight may land after
//     lines written to T since the exchange: their order may change, never
//     their presence.) Anything else (the agent rewrote T in place, or
//     renamed a new file onto T just before the exchange): the agent's
//     version must win, so EXCHANGE BACK and resolve the temp name as in
//     step 12; the attempt ends in a conflict and starts again from the
//     agent's file.
//  12. RESOLVE the temp name after an exchange back. Exactly memwatch's N:
//     remove it. N plus bytes an agent appended while it was the target:
//     append them to T, and keep the file, as in step 11. Anything else
//     (the agent renamed yet another file onto T meanwhile): the newer of
//     the two agent files stays at T, the other is kept; nothing is deleted.
//  13. JOURNAL done with the hash of what is at T. Kill before it: the next
//     start finds T equal to N (or N plus appends) and records done.
//
// The next start (Recover, CleanTemp) applies the same rules to every temp
// file left in a root: a temp whose content is exactly the record's
// pre-image or result is removed; one that extends them has its tail
// appended to the target and is kept; anything else is kept in the archive
// directory. The rule under all of it: memwatch removes a file only when
// its content is exactly a copy it archived or wrote itself. So at no step
// can a kill or a write by the agent lose a byte the agent wrote.
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
	"github.com/memwatch/memwatch/state"
)

// TempMarker is part of the name of every temporary file memwatch creates.
const TempMarker = confine.TempMarker

// DefaultArchiveDir is where pre-images go when a layout names no archive path.
const DefaultArchiveDir = ".memwatch/archive"

// createdData marks the journal record of a change that created its
// target: its undo takes the file out again (into the archive).
const createdData = `{"created":true}`

// RemovedSHA is the after-hash of a removal: the file is gone.
const RemovedSHA = "removed"

// Defaults of the Rewriter's timing.
const (
	// DefaultSettle is how long a displaced file must stay unchanged before
	// memwatch decides about it: a write in flight at the exchange lands by then.
	DefaultSettle = 20 * time.Millisecond
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
	// Compute returns the new content from the current one. It may be slow
	// (an LLM call). It returns ErrUnchanged or a *Rejected to write nothing.
	Compute func(ctx context.Context, old []byte) ([]byte, error)
}

// Outcome says what Apply did.
type Outcome struct {
	Status  string // state.Done, state.Skipped or state.Rejected
	Reason  string
	Archive string // archive path relative to root, "" when nothing was archived
	Record  int64  // journal id, 0 when nothing was journaled
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

	// hook lets tests act as an agent at the protocol's steps
	// ("before-exchange", "after-exchange"); nil outside tests.
	hook func(step string)
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
		out, err := w.attempt(ctx, req, dir, name, rec, start)
		if errors.Is(err, ErrConflict) && attempt < w.MaxAttempts && ctx.Err() == nil {
			w.Log.Info("target changed during rewrite; starting again", "root", rec.Root, "path", rec.Target, "rule", rec.Rule, "attempt", attempt)
			continue
		}
		return out, err
	}
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

func (s *snapshot) sameInode(o *snapshot) bool {
	return s.exists == o.exists && s.dev == o.dev && s.ino == o.ino
}

func readSnapshot(dir *confine.Dir, name string) (*snapshot, error) {
	f, err := dir.Open(name, os.O_RDONLY)
	if errors.Is(err, fs.ErrNotExist) {
		return &snapshot{sha: Hash(nil)}, nil
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
	s.sha = Hash(s.data)
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
		rec.BeforeSHA, rec.BeforeSize = snap.sha, int64(len(snap.data))
		rec.AfterSHA, rec.AfterSize = snap.sha, int64(len(snap.data))
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

	// 3. RECHECK: the agent may have written while we computed.
	cur, err := readSnapshot(dir, name)
	if err != nil {
		return Outcome{}, err
	}
	if cur.sha != snap.sha || !cur.sameInode(snap) {
		if !cur.exists || !bytes.HasPrefix(cur.data, snap.data) {
			cur.close()
			return Outcome{}, ErrConflict
		}
		if tail := cur.data[len(snap.data):]; len(tail) > 0 {
			newData = append(append([]byte{}, newData...), tail...)
			w.Log.Info("carried appended tail into rewrite", "root", rec.Root, "path", rec.Target, "bytes", len(tail))
		}
	}
	snap.close()
	snap = cur
	if snap.exists {
		fi, err := snap.f.Stat()
		if err != nil {
			return Outcome{}, err
		}
		if !req.Root.Owner().MayWrite(fi) {
			return Outcome{}, fmt.Errorf("rewrite %s: %w (uid %d may not write it; memwatch leaves it alone)", rec.Target, confine.ErrDenied, req.Root.Owner().UID)
		}
	}

	pureAppend := snap.exists && bytes.HasPrefix(newData, snap.data)
	if snap.exists && !pureAppend {
		// 8, asked early: a file held open for writing will not be replaced,
		// so do not archive it either. The swap asks again just before.
		if held, ok := confine.HeldForWriting(snap.f); ok && held {
			fi, _ := snap.f.Stat()
			dev, ino := inode(fi)
			return Outcome{}, &BusyError{Path: rec.Target, Why: "held open for writing", Holders: writers(dev, ino)}
		}
	}

	// 5. ARCHIVE the pre-image unless the change only inserts bytes: then
	// nothing is removed, and undo takes the insertion out again.
	rec.Archive, rec.Data = "", nil
	if !snap.exists {
		rec.Data = []byte(createdData) // undo removes the file again
	} else if at, ok := insertion(snap.data, newData); ok {
		rec.Data = []byte(fmt.Sprintf(`{"insert_at":%d}`, at))
	} else if snap.exists && !(req.OwnedSHA != "" && req.OwnedSHA == snap.sha) {
		arch, err := w.writeArchive(req.Root, archiveName(req.Archive, rec.Target, w.Now()), snap.data, snap.mode, snap.uid, snap.gid)
		if err != nil {
			return Outcome{}, err
		}
		rec.Archive = arch
	}
	rec.BeforeSHA, rec.BeforeSize = snap.sha, int64(len(snap.data))
	rec.AfterSHA, rec.AfterSize = Hash(newData), int64(len(newData))
	// 6. JOURNAL pending. The reason, if Compute set one (a fallback note), is kept.
	rec.Outcome = state.Pending
	if err := w.journal(ctx, rec, true); err != nil {
		return Outcome{}, err
	}

	var final []byte
	if pureAppend {
		// 4. A pure append is written in place: the inode stays, so a writer
		// that keeps the file open never writes into a replaced file.
		final, err = appendInPlace(dir, name, snap, newData[len(snap.data):])
	} else {
		s := &swapper{w: w, dir: dir, name: name, snap: snap, newData: newData, rec: rec, mode: req.Mode}
		final, err = s.run(ctx)
	}
	if err != nil {
		rec.Outcome, rec.Reason, rec.Duration = state.Failed, err.Error(), time.Since(start)
		var busy *BusyError
		switch {
		case errors.As(err, &busy):
			rec.Outcome, rec.Reason = state.Skipped, "deferred: "+busy.Error()
		case errors.Is(err, ErrConflict):
			rec.Reason = "conflict: the agent wrote the file during the swap; its version is kept, memwatch starts again"
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
	w.Log.Info("rewrote file", "store", rec.Store, "root", rec.Root, "rule", rec.Rule, "path", rec.Target, "outcome", rec.Outcome,
		"archive", rec.Archive, "before", rec.BeforeSize, "after", rec.AfterSize, "journal", rec.ID)
	return Outcome{Status: state.Done, Archive: rec.Archive, Record: rec.ID}, nil
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
	return append(append([]byte{}, snap.data...), tail...), nil
}

func sameInode(fi fs.FileInfo, dev, ino uint64) bool {
	st, ok := fi.Sys().(*syscall.Stat_t)
	return ok && uint64(st.Dev) == dev && uint64(st.Ino) == ino
}

// IsTemp reports whether a path is one of memwatch's temporary files.
func IsTemp(p string) bool { return confine.IsTemp(p) }
