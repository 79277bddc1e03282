// Package rewrite is the one way memwatch changes an agent's file.
//
// Every layout hands its new content to Apply, which guarantees:
//   - the pre-image is in an archive (fsynced, never overwritten) before
//     anything replaces it, unless the change only appends;
//   - a change the agent made while the new content was computed is either
//     carried into the result (append-only targets) or makes the attempt
//     start again: nothing the agent wrote is lost;
//   - the result replaces the target atomically (temp file, fsync, exchange,
//     fsync of the directory), keeping mode and owner;
//   - the change is journaled: a pending record before the swap, resolved
//     at the next start if memwatch is killed in between;
//   - nothing outside the store root is read or written.
package rewrite

import (
	"bytes"
	"context"
	"crypto/rand"
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

	"github.com/memwatch/memwatch/state"
)

// TempMarker is part of the name of every temporary file memwatch creates;
// files with it are removed by CleanTemp at start.
const TempMarker = ".memwatch-tmp-"

// DefaultArchiveDir is where pre-images go when a layout names no archive path.
const DefaultArchiveDir = ".memwatch/archive"

// RemovedSHA is the after-hash of a removal: the file is gone.
const RemovedSHA = "removed"

// ErrConflict means the target kept changing in a way that cannot be merged;
// the job should be re-queued.
var ErrConflict = errors.New("target changed while memwatch was rewriting it")

// ErrUnchanged is returned by Compute when there is nothing to write.
var ErrUnchanged = errors.New("nothing to change")

// Rejected is returned by Compute when a guard refused the new content.
type Rejected struct{ Reason string }

func (r *Rejected) Error() string { return "rejected: " + r.Reason }

// Request describes one rewrite of one target.
type Request struct {
	Root   string // the store root: nothing outside it is touched
	Target string // absolute, or relative to Root
	// Archive is the archive path relative to Root for the pre-image, e.g.
	// "memory/2026-01-15-1430.md"; "-2", "-3" are added before the extension
	// on collision. Empty means DefaultArchiveDir.
	Archive string
	// AppendOnly targets only grow at their end; bytes the agent appends
	// during a rewrite are carried into the result instead of restarting.
	AppendOnly bool
	// AllowCreate lets the target be missing; Compute then receives nil.
	AllowCreate bool
	// OwnedSHA marks memwatch's own earlier output (a derived file such as a
	// snapshot): when the target still has exactly this hash it is replaced
	// without an archive, since nothing an agent wrote is in it.
	OwnedSHA string
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
	// Resolvers settle pending journal records of changes that are not file
	// rewrites (database rows), by rule.
	Resolvers map[string]func(context.Context, *state.Record) (outcome, reason string)
}

// New returns a Rewriter journaling into db.
func New(db *state.DB, log *slog.Logger) *Rewriter {
	return &Rewriter{DB: db, Log: log, Now: time.Now, MaxAttempts: 3}
}

// Apply runs one rewrite. rec carries store, rule and token use, and is
// completed and journaled by Apply.
func (w *Rewriter) Apply(ctx context.Context, req Request, rec *state.Record) (Outcome, error) {
	target, err := Resolve(req.Root, req.Target)
	if err != nil {
		return Outcome{}, err
	}
	rec.Root = req.Root
	rec.Target = relTo(req.Root, target)
	start := time.Now()
	defer func() { rec.Duration = time.Since(start) }()
	for attempt := 1; ; attempt++ {
		out, err := w.attempt(ctx, req, target, rec)
		if errors.Is(err, ErrConflict) && attempt < w.MaxAttempts && ctx.Err() == nil {
			w.Log.Info("target changed during rewrite; starting again", "root", req.Root, "path", rec.Target, "rule", rec.Rule, "attempt", attempt)
			continue
		}
		return out, err
	}
}

func relTo(root, p string) string {
	if realRoot, err := filepath.EvalSymlinks(root); err == nil {
		if r, err := filepath.Rel(realRoot, p); err == nil && filepath.IsLocal(r) {
			return r
		}
	}
	if r, err := filepath.Rel(root, p); err == nil {
		return r
	}
	return p
}

// snapshot is what we read of the target, with the descriptor kept open so
// that writes to the old inode after the swap can still be detected.
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
}

func (s *snapshot) close() {
	if s != nil && s.f != nil {
		s.f.Close()
	}
}

func (s *snapshot) sameFile(o *snapshot) bool {
	return s.exists == o.exists && s.dev == o.dev && s.ino == o.ino
}

func readSnapshot(path string) (*snapshot, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NOFOLLOW, 0)
	if errors.Is(err, fs.ErrNotExist) {
		return &snapshot{sha: Hash(nil)}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", path, err)
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("stat %s: %w", path, err)
	}
	if !fi.Mode().IsRegular() {
		f.Close()
		return nil, fmt.Errorf("rewrite %s: not a regular file", path)
	}
	data, err := io.ReadAll(f)
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	s := &snapshot{f: f, exists: true, data: data, sha: Hash(data), mode: fi.Mode().Perm()}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		s.dev, s.ino, s.uid, s.gid = uint64(st.Dev), uint64(st.Ino), int(st.Uid), int(st.Gid)
	}
	return s, nil
}

// reread reads the inode behind a held descriptor again, from the start.
func (s *snapshot) reread() ([]byte, error) {
	fi, err := s.f.Stat()
	if err != nil {
		return nil, err
	}
	buf := make([]byte, fi.Size())
	n, err := s.f.ReadAt(buf, 0)
	if err != nil && !errors.Is(err, io.EOF) {
		return nil, err
	}
	return buf[:n], nil
}

// Hash is the hex sha256 used throughout the journal.
func Hash(b []byte) string {
	h := sha256.Sum256(b)
	return hex.EncodeToString(h[:])
}

func (w *Rewriter) attempt(ctx context.Context, req Request, target string, rec *state.Record) (Outcome, error) {
	snap, err := readSnapshot(target)
	if err != nil {
		return Outcome{}, err
	}
	defer func() { snap.close() }()
	if !snap.exists && !req.AllowCreate {
		return Outcome{}, fmt.Errorf("rewrite %s: %w", target, fs.ErrNotExist)
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

	// Re-check: the agent may have written while we computed.
	cur, err := readSnapshot(target)
	if err != nil {
		return Outcome{}, err
	}
	if cur.sha != snap.sha || !cur.sameFile(snap) {
		if !req.AppendOnly || !cur.exists || !bytes.HasPrefix(cur.data, snap.data) {
			cur.close()
			return Outcome{}, ErrConflict
		}
		newData = append(newData, cur.data[len(snap.data):]...)
		w.Log.Info("carried appended tail into rewrite", "root", req.Root, "path", rec.Target, "bytes", len(cur.data)-len(snap.data))
	}
	snap.close()
	snap = cur

	// Archive the pre-image unless the change only inserts bytes (an append
	// is the common case): then nothing is removed, and undo takes the
	// insertion out again.
	rec.Archive, rec.Data = "", nil
	if at, ok := insertion(snap.data, newData); snap.exists && ok {
		rec.Data = []byte(fmt.Sprintf(`{"insert_at":%d}`, at))
	} else if snap.exists && !(req.OwnedSHA != "" && req.OwnedSHA == snap.sha) {
		arch, err := writeArchive(req.Root, archiveName(req.Archive, rec.Target, w.Now()), snap.data, snap.mode)
		if err != nil {
			return Outcome{}, err
		}
		rec.Archive = arch
	}
	rec.BeforeSHA, rec.BeforeSize = snap.sha, int64(len(snap.data))
	rec.AfterSHA, rec.AfterSize = Hash(newData), int64(len(newData))
	// The reason, if Compute set one (e.g. a fallback note), is kept.
	rec.Outcome = state.Pending
	if err := w.journal(ctx, rec, true); err != nil {
		return Outcome{}, err
	}

	var final []byte
	if snap.exists && bytes.HasPrefix(newData, snap.data) {
		// A pure append is written in place: the inode stays, so a writer
		// that keeps the file open never writes into a replaced file.
		final, err = appendInPlace(target, snap, newData[len(snap.data):])
	} else {
		final, err = swap(target, snap, newData, req.AppendOnly)
	}
	if err != nil {
		rec.Outcome, rec.Reason = state.Failed, err.Error()
		if errors.Is(err, ErrConflict) {
			rec.Reason = "conflict: target replaced during the swap; original kept, retrying"
		}
		// Use a fresh context: the record must be resolved even on shutdown.
		if uerr := w.journal(context.WithoutCancel(ctx), rec, false); uerr != nil {
			return Outcome{}, errors.Join(err, uerr)
		}
		return Outcome{}, err
	}
	rec.AfterSHA, rec.AfterSize = Hash(final), int64(len(final))
	rec.Outcome = state.Done
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

// journal appends (or updates) rec; without a database (one-off CLI edits
// such as stamp) nothing is journaled.
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

// Remove deletes a file inside root (retention rules), journaled with the
// hash and size it had. Nothing outside root can be removed.
func (w *Rewriter) Remove(ctx context.Context, root, target string, rec *state.Record) error {
	return w.remove(ctx, root, target, "", rec)
}

// RemoveArchived moves a file into an archive (never overwriting one) and
// removes it, journaled so undo can bring it back.
func (w *Rewriter) RemoveArchived(ctx context.Context, root, target, archive string, rec *state.Record) error {
	return w.remove(ctx, root, target, archive, rec)
}

func (w *Rewriter) remove(ctx context.Context, root, target, archive string, rec *state.Record) error {
	path, err := Resolve(root, target)
	if err != nil {
		return err
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("remove %s: %w", path, err)
	}
	rec.Root, rec.Target = root, relTo(root, path)
	rec.BeforeSHA, rec.BeforeSize = Hash(data), int64(len(data))
	if archive != "" {
		fi, _ := os.Stat(path)
		if rec.Archive, err = writeArchive(root, archive, data, fi.Mode().Perm()); err != nil {
			return err
		}
	}
	// The after-hash is known before the removal, so recovery can tell a
	// removal that happened from one that did not.
	rec.Outcome, rec.AfterSHA, rec.AfterSize = state.Pending, RemovedSHA, 0
	if err := w.journal(ctx, rec, true); err != nil {
		return err
	}
	if err := os.Remove(path); err != nil {
		rec.Outcome, rec.Reason = state.Failed, err.Error()
		_ = w.journal(context.WithoutCancel(ctx), rec, false)
		return fmt.Errorf("remove %s: %w", path, err)
	}
	if err := syncDir(filepath.Dir(path)); err != nil {
		return err
	}
	rec.Outcome = state.Done
	w.Log.Info("removed file", "store", rec.Store, "root", root, "rule", rec.Rule, "path", rec.Target, "reason", rec.Reason)
	return w.journal(context.WithoutCancel(ctx), rec, false)
}

// archiveName picks the archive path for a target.
func archiveName(requested, relTarget string, now time.Time) string {
	if requested != "" {
		return requested
	}
	return filepath.Join(DefaultArchiveDir, relTarget+"."+now.Format("20060102-150405"))
}

// writeArchive stores data at rel inside root without ever overwriting an
// existing archive, fsyncs it and its directory, and returns the path used.
func writeArchive(root, rel string, data []byte, mode fs.FileMode) (string, error) {
	abs, err := Resolve(root, rel)
	if err != nil {
		return "", fmt.Errorf("archive: %w", err)
	}
	dir := filepath.Dir(abs)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", fmt.Errorf("create archive directory: %w", err)
	}
	tmp, err := writeTemp(dir, filepath.Base(abs), data, mode)
	if err != nil {
		return "", fmt.Errorf("write archive: %w", err)
	}
	defer os.Remove(tmp)
	ext := filepath.Ext(abs)
	stem := strings.TrimSuffix(abs, ext)
	for i := 1; i < 10000; i++ {
		name := abs
		if i > 1 {
			name = fmt.Sprintf("%s-%d%s", stem, i, ext)
		}
		// link fails when the name exists: an archive is never overwritten.
		err := os.Link(tmp, name)
		if errors.Is(err, fs.ErrExist) {
			continue
		}
		if err != nil {
			return "", fmt.Errorf("write archive %s: %w", name, err)
		}
		if err := syncDir(dir); err != nil {
			return "", err
		}
		return relTo(root, name), nil
	}
	return "", fmt.Errorf("write archive %s: too many archives with that name", abs)
}

func randSuffix() string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// writeTemp writes data to a new temp file in dir and fsyncs it.
func writeTemp(dir, base string, data []byte, mode fs.FileMode) (string, error) {
	if mode == 0 {
		mode = 0o644
	}
	name := filepath.Join(dir, "."+base+TempMarker+randSuffix())
	f, err := os.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_EXCL, mode)
	if err != nil {
		return "", err
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		os.Remove(name)
		return "", err
	}
	// The umask may have narrowed the mode; set it exactly.
	if err := f.Chmod(mode); err != nil {
		f.Close()
		os.Remove(name)
		return "", err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		os.Remove(name)
		return "", err
	}
	if err := f.Close(); err != nil {
		os.Remove(name)
		return "", err
	}
	return name, nil
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("sync directory %s: %w", dir, err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("sync directory %s: %w", dir, err)
	}
	return nil
}

// swap puts newData at target and returns the content finally in place
// (newData plus any tail the agent appended during the swap).
func swap(target string, snap *snapshot, newData []byte, appendOnly bool) ([]byte, error) {
	dir := filepath.Dir(target)
	if !snap.exists {
		// A new file may be the first in its directory (Resolve kept it inside the root).
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return nil, fmt.Errorf("create directory for %s: %w", target, err)
		}
	}
	tmp, err := writeTemp(dir, filepath.Base(target), newData, snap.mode)
	if err != nil {
		return nil, fmt.Errorf("write %s: %w", target, err)
	}
	if snap.exists {
		// Keep the owner; only root can change it, and then it matters.
		if err := os.Lchown(tmp, snap.uid, snap.gid); err != nil && !errors.Is(err, fs.ErrPermission) {
			os.Remove(tmp)
			return nil, fmt.Errorf("chown %s: %w", tmp, err)
		}
	}
	if !snap.exists {
		// Create without clobbering a file the agent created meanwhile.
		err := os.Link(tmp, target)
		os.Remove(tmp)
		if errors.Is(err, fs.ErrExist) {
			return nil, ErrConflict
		}
		if err != nil {
			return nil, fmt.Errorf("create %s: %w", target, err)
		}
		return newData, syncDir(dir)
	}
	exchanged, err := exchange(tmp, target)
	if err != nil {
		os.Remove(tmp)
		return nil, fmt.Errorf("swap %s: %w", target, err)
	}
	if !exchanged {
		return renameSwap(tmp, target, snap, newData, appendOnly)
	}
	// tmp now holds whatever was at target at the instant of the exchange.
	displaced, same, err := displacedContent(tmp, snap)
	if err != nil {
		return nil, err
	}
	final := newData
	if !same {
		if !appendOnly || !bytes.HasPrefix(displaced, snap.data) {
			// Put the agent's version back; ours is discarded and the job retried.
			if _, err := exchange(tmp, target); err != nil {
				return nil, fmt.Errorf("restore %s after conflict (agent version kept at %s): %w", target, tmp, err)
			}
			os.Remove(tmp)
			return nil, ErrConflict
		}
		tail := displaced[len(snap.data):]
		if err := appendFile(target, tail); err != nil {
			return nil, fmt.Errorf("carry %d appended bytes into %s (they are kept in %s): %w", len(tail), target, tmp, err)
		}
		final = append(append([]byte{}, newData...), tail...)
	}
	if err := os.Remove(tmp); err != nil {
		return nil, fmt.Errorf("remove %s: %w", tmp, err)
	}
	return final, syncDir(dir)
}

// settleWindow is how long the displaced file must stay unchanged before it
// is discarded: a writer that opened it just before the exchange gets that
// long to finish its write, which is then carried over.
const settleWindow = 20 * time.Millisecond

// displacedContent reads what the exchange moved to tmp, once it has been
// quiet for settleWindow, and reports whether it is exactly the snapshot we
// computed from.
func displacedContent(tmp string, snap *snapshot) ([]byte, bool, error) {
	f, err := os.Open(tmp)
	if err != nil {
		return nil, false, fmt.Errorf("open displaced %s: %w", tmp, err)
	}
	defer f.Close()
	var prev []byte
	for i := 0; i < 100; i++ {
		if _, err := f.Seek(0, io.SeekStart); err != nil {
			return nil, false, err
		}
		data, err := io.ReadAll(f)
		if err != nil {
			return nil, false, fmt.Errorf("read displaced %s: %w", tmp, err)
		}
		if i > 0 && bytes.Equal(data, prev) {
			return data, bytes.Equal(data, snap.data), nil
		}
		prev = data
		time.Sleep(settleWindow)
	}
	return prev, bytes.Equal(prev, snap.data), nil
}

// appendInPlace appends tail to the target the agent also appends to. The
// target was re-checked just before; a write that slipped in since is kept,
// as the bytes are appended after it.
func appendInPlace(target string, snap *snapshot, tail []byte) ([]byte, error) {
	f, err := os.OpenFile(target, os.O_WRONLY|os.O_APPEND|syscall.O_NOFOLLOW, 0)
	if err != nil {
		return nil, fmt.Errorf("append to %s: %w", target, err)
	}
	defer f.Close()
	if _, err := f.Write(tail); err != nil {
		return nil, fmt.Errorf("append to %s: %w", target, err)
	}
	if err := f.Sync(); err != nil {
		return nil, fmt.Errorf("sync %s: %w", target, err)
	}
	return append(append([]byte{}, snap.data...), tail...), nil
}

// renameSwap is the fallback where exchange is unsupported: rename, then
// detect late writes through the descriptor still open on the old inode.
func renameSwap(tmp, target string, snap *snapshot, newData []byte, appendOnly bool) ([]byte, error) {
	if err := os.Rename(tmp, target); err != nil {
		os.Remove(tmp)
		return nil, fmt.Errorf("rename into %s: %w", target, err)
	}
	if err := syncDir(filepath.Dir(target)); err != nil {
		return nil, err
	}
	late, err := snap.reread()
	if err != nil || bytes.Equal(late, snap.data) {
		return newData, nil
	}
	if appendOnly && bytes.HasPrefix(late, snap.data) {
		tail := late[len(snap.data):]
		if err := appendFile(target, tail); err != nil {
			return nil, err
		}
		return append(append([]byte{}, newData...), tail...), nil
	}
	// Keep the late write next to the target so nothing is lost.
	keep := target + ".memwatch-conflict-" + randSuffix()
	if err := os.WriteFile(keep, late, snap.mode); err != nil {
		return nil, fmt.Errorf("save late write to %s: %w", keep, err)
	}
	return newData, nil
}

func appendFile(path string, data []byte) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		return err
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// CleanTemp removes temporary files a killed memwatch left under root and
// returns how many it removed. Their content is always also elsewhere: a
// temp file is either an unfinished new version or a pre-image already archived.
func CleanTemp(root string) (int, error) {
	n := 0
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return nil // a vanished or unreadable subdirectory is not our business here
		}
		if !d.IsDir() && strings.Contains(d.Name(), TempMarker) {
			if err := os.Remove(p); err == nil {
				n++
			}
		}
		return nil
	})
	return n, err
}

// IsTemp reports whether a path is one of memwatch's temporary files.
func IsTemp(p string) bool { return strings.Contains(filepath.Base(p), TempMarker) }
