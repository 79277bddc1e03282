package rewrite

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"time"

	"github.com/memwatch/memwatch/confine"
	"github.com/memwatch/memwatch/filesum"
	"github.com/memwatch/memwatch/state"
)

// AppendContext is how much of a file's end Request.Append is given.
const AppendContext = 64 << 10

// appendAttempt makes a Request.Append change: step 4 of the protocol
// (PURE APPEND) without reading the file whole. What an append needs of
// the file is its end (a blank line before a markdown entry, the last
// cursor of a JSONL history) and its sha256 before and after, for the
// journal: the Rewriter's Sums continue the hash memwatch kept of the file
// since its last write (filesum), so only the bytes added are hashed.
// Nothing is removed, so nothing is archived; the tail goes in with
// O_APPEND on the inode read, after anything an agent appended meanwhile,
// whose bytes are then the pre-image's too. A file that does not exist
// yet takes the general path (it is created whole).
func (w *Rewriter) appendAttempt(ctx context.Context, req Request, dir *confine.Dir, name string, rec *state.Record, start time.Time) (Outcome, error) {
	f, err := dir.Open(name, os.O_RDONLY)
	if errors.Is(err, fs.ErrNotExist) {
		if !req.AllowCreate {
			return Outcome{}, fmt.Errorf("rewrite %s: %w", rec.Target, fs.ErrNotExist)
		}
		create := req
		create.Append = nil
		create.Compute = func(ctx context.Context, old []byte) ([]byte, error) {
			var end []byte
			if old != nil {
				end = old[max(0, len(old)-AppendContext):]
			}
			tail, err := req.Append(ctx, end)
			if err != nil {
				return nil, err
			}
			return append(append([]byte{}, old...), tail...), nil
		}
		return w.attempt(ctx, create, dir, name, rec, start)
	}
	if err != nil {
		return Outcome{}, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return Outcome{}, err
	}
	if !fi.Mode().IsRegular() {
		return Outcome{}, fmt.Errorf("rewrite %s: %w", rec.Target, confine.ErrNotRegular)
	}
	if !req.Root.Owner().MayWrite(fi) {
		return Outcome{}, fmt.Errorf("rewrite %s: %w (uid %d may not write it; memwatch leaves it alone)", rec.Target, confine.ErrDenied, req.Root.Owner().UID)
	}
	if fi.Size() > req.Root.MaxFileSize() {
		return Outcome{}, fmt.Errorf("read %s: %w (%d bytes, limit %d)", rec.Target, confine.ErrTooLarge, fi.Size(), req.Root.MaxFileSize())
	}
	before, err := w.sum(f)
	if err != nil {
		return Outcome{}, fmt.Errorf("read %s: %w", rec.Target, err)
	}
	end := make([]byte, min(before.Size, AppendContext))
	if n, err := f.ReadAt(end, before.Size-int64(len(end))); n < len(end) {
		return Outcome{}, fmt.Errorf("read %s: %w", rec.Target, err)
	}
	tail, err := req.Append(ctx, end)
	var rej *Rejected
	switch {
	case errors.Is(err, ErrUnchanged) || (err == nil && len(tail) == 0):
		return Outcome{Status: state.Skipped, Reason: "nothing to change"}, nil
	case errors.As(err, &rej):
		rec.Outcome, rec.Reason = state.Rejected, rej.Reason
		rec.BeforeSHA, rec.BeforeSize, rec.AfterSHA, rec.AfterSize = before.Sum, before.Size, before.Sum, before.Size
		if err := w.journal(ctx, rec, true); err != nil {
			return Outcome{}, err
		}
		return Outcome{Status: state.Rejected, Reason: rej.Reason, Record: rec.ID}, nil
	case err != nil:
		return Outcome{}, err
	}
	if err := ctx.Err(); err != nil {
		return Outcome{}, err
	}
	if w.BeforeChange != nil {
		w.BeforeChange(req.Root, rec.Target)
	}
	after := filesum.Extend(before, tail)
	rec.Archive, rec.Data = "", nil
	rec.BeforeSHA, rec.BeforeSize = before.Sum, before.Size
	rec.AfterSHA, rec.AfterSize = after.Sum, after.Size
	rec.Outcome = state.Pending
	if err := w.journal(ctx, rec, true); err != nil {
		return Outcome{}, err
	}
	pre, final, err := w.appendTail(dir, name, f, before, tail)
	if err != nil {
		return w.finish(ctx, req, rec, nil, nil, err, start)
	}
	rec.BeforeSHA, rec.BeforeSize = pre.Sum, pre.Size
	rec.AfterSHA, rec.AfterSize = final.Sum, final.Size
	rec.Outcome = state.Done
	rec.Duration = time.Since(start)
	if err := w.journal(context.WithoutCancel(ctx), rec, false); err != nil {
		return Outcome{}, err
	}
	if key := riskKey(rec.Root, rec.Target); w.atRisk(ctx, key) {
		// Lines a conflict put back into this file are watched (rare):
		// that bookkeeping reads the file whole.
		if cur, err := io.ReadAll(io.NewSectionReader(f, 0, final.Size)); err == nil {
			w.rewritten(ctx, key, cur[:pre.Size], cur, nil)
		}
	}
	w.Log.Info("rewrote file", "store", rec.Store, "root", rec.Root, "rule", rec.Rule, "path", rec.Target, "outcome", rec.Outcome,
		"archive", "", "before", rec.BeforeSize, "after", rec.AfterSize, "journal", rec.ID, "appended", len(tail))
	return Outcome{Status: state.Done, Record: rec.ID}, nil
}

// sum is the state of the whole file open as f: known to Sums, or hashed.
func (w *Rewriter) sum(f *os.File) (filesum.State, error) {
	st, err := w.Sums.Sum(f)
	if filesum.IsChanged(err) {
		// Written while hashed: hash what it is now, once more.
		st, err = w.Sums.Sum(f)
		if filesum.IsChanged(err) {
			return filesum.State{}, ErrConflict
		}
	}
	return st, err
}

// appendTail appends tail to the inode f reads (O_APPEND: after anything
// an agent appended since before was taken) and returns the states of the
// file just before the tail (before plus what the agent appended) and
// just after it.
func (w *Rewriter) appendTail(dir *confine.Dir, name string, f *os.File, before filesum.State, tail []byte) (pre, final filesum.State, err error) {
	fi, err := f.Stat()
	if err != nil {
		return pre, final, err
	}
	wf, err := dir.Open(name, os.O_WRONLY|os.O_APPEND)
	if err != nil {
		return pre, final, fmt.Errorf("append to %s: %w", dir.Rel(name), err)
	}
	defer wf.Close()
	wfi, err := wf.Stat()
	if err != nil {
		return pre, final, err
	}
	if !os.SameFile(fi, wfi) {
		return pre, final, ErrConflict // replaced since it was read: start again
	}
	// A version capture woken by this write waits for its hashes.
	done := w.Sums.Writing(fi)
	defer done()
	if _, err := wf.Write(tail); err != nil {
		return pre, final, fmt.Errorf("append to %s: %w", dir.Rel(name), err)
	}
	if err := wf.Sync(); err != nil {
		return pre, final, fmt.Errorf("sync %s: %w", dir.Rel(name), err)
	}
	end, err := wf.Seek(0, io.SeekCurrent)
	if err != nil {
		return pre, final, fmt.Errorf("append to %s: %w", dir.Rel(name), err)
	}
	at := end - int64(len(tail))
	if at < before.Size {
		// The agent cut the file meanwhile: what is before the tail is not
		// what was hashed; hash it.
		if pre, err = filesum.ExtendFrom(filesum.Zero(), f, max(at, 0)); err != nil {
			return pre, final, fmt.Errorf("append to %s: %w", dir.Rel(name), err)
		}
		return pre, filesum.Extend(pre, tail), nil
	}
	pre = before
	if at > before.Size {
		// An agent appended between the read and our write: ours follows.
		if pre, err = filesum.ExtendFrom(before, f, at); err != nil {
			return pre, final, fmt.Errorf("append to %s: %w", dir.Rel(name), err)
		}
	}
	final = filesum.Extend(pre, tail)
	if after, err := wf.Stat(); err == nil && after.Size() == end {
		w.Sums.Record(after, before, pre, final)
	}
	return pre, final, nil
}
