package rewrite

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/memwatch/memwatch/confine"
	"github.com/memwatch/memwatch/state"
	"golang.org/x/sys/unix"
)

func statT(fi fs.FileInfo) (*syscall.Stat_t, bool) {
	st, ok := fi.Sys().(*syscall.Stat_t)
	return st, ok
}

// archiveName picks the archive path for a target.
func archiveName(requested, relTarget string, now time.Time) string {
	if requested != "" {
		return requested
	}
	return filepath.Join(DefaultArchiveDir, relTarget+"."+now.Format("20060102-150405"))
}

// numbered is name with "-n" before its extension (n > 1).
func numbered(name string, n int) string {
	if n <= 1 {
		return name
	}
	ext := filepath.Ext(name)
	return fmt.Sprintf("%s-%d%s", strings.TrimSuffix(name, ext), n, ext)
}

// writeArchive stores data at rel inside root without ever overwriting an
// existing archive, with the mode and owner of the file it preserves,
// fsyncs it and its directory, and returns the root-relative path used and
// the archive, open for writing (the caller closes it): bytes an agent
// appends before the swap are carried into it.
func (w *Rewriter) writeArchive(root *confine.Root, rel string, data []byte, mode fs.FileMode, uid, gid int) (string, *os.File, error) {
	rel, err := root.Rel(rel)
	if err != nil {
		return "", nil, fmt.Errorf("archive: %w", err)
	}
	dir, err := root.MkdirAll(filepath.Dir(rel))
	if err != nil {
		return "", nil, fmt.Errorf("create archive directory: %w", err)
	}
	defer dir.Close()
	f, tmp, err := dir.CreateTemp(filepath.Base(rel), "a")
	if err != nil {
		return "", nil, fmt.Errorf("write archive: %w", err)
	}
	linked := false
	defer func() {
		if !linked {
			f.Close()
		}
		_ = dir.Unlink(tmp) // our temp name: its content is still at the target, or now under the archive's name
	}()
	if mode == 0 {
		mode = 0o600
	}
	if err := writeAll(f, data); err != nil {
		return "", nil, fmt.Errorf("write archive: %w", err)
	}
	if err := dir.Own(f, mode, uid, gid); err != nil {
		return "", nil, fmt.Errorf("write archive: %w", err)
	}
	if err := f.Sync(); err != nil {
		return "", nil, fmt.Errorf("write archive: %w", err)
	}
	base := filepath.Base(rel)
	for i := 1; i < 10000; i++ {
		name := numbered(base, i)
		// link fails when the name exists: an archive is never overwritten.
		err := dir.Link(tmp, dir, name)
		if errors.Is(err, fs.ErrExist) {
			continue
		}
		if err != nil {
			return "", nil, fmt.Errorf("write archive %s: %w", dir.Rel(name), err)
		}
		if err := dir.Sync(); err != nil {
			return "", nil, err
		}
		linked = true
		return dir.Rel(name), f, nil
	}
	return "", nil, fmt.Errorf("write archive %s: too many archives with that name", rel)
}

// Remove takes a file out of a root (retention, a summarised month): it is
// moved into the archive directory (archive, or DefaultArchiveDir when
// empty) under a name that does not exist yet, with its inode, owner and
// mode, and journaled so undo can bring it back. A writer holding it open
// keeps writing into the archived file. Nothing is ever deleted.
func (w *Rewriter) Remove(ctx context.Context, root *confine.Root, target, archive string, rec *state.Record) error {
	target, err := root.Rel(target)
	if err != nil {
		return err
	}
	real, err := root.Resolve(target)
	if err != nil {
		return err
	}
	dir, err := root.Dir(filepath.Dir(real))
	if err != nil {
		return fmt.Errorf("remove %s: %w", target, err)
	}
	defer dir.Close()
	name := filepath.Base(real)
	data, fi, err := dir.ReadFile(name)
	if err != nil {
		return fmt.Errorf("remove %s: %w", target, err)
	}
	if !dir.MayCreate() {
		return fmt.Errorf("remove %s: %w", target, confine.ErrDenied)
	}
	rec.Root, rec.Target = root.Path(), target
	rec.RootDev, rec.RootIno = rootID(root)
	rec.BeforeSHA, rec.BeforeSize = Hash(data), int64(len(data))
	if archive == "" {
		archive = archiveName("", target, w.Now())
	}
	adir, err := root.MkdirAll(filepath.Dir(archive))
	if err != nil {
		return fmt.Errorf("remove %s: %w", target, err)
	}
	defer adir.Close()
	// Pick the archive name first, so the pending record names it: the
	// next start then tells a move that happened from one that did not.
	aname := ""
	for i := 1; i < 10000; i++ {
		n := numbered(filepath.Base(archive), i)
		if _, err := adir.Lstat(n); errors.Is(err, fs.ErrNotExist) {
			aname = n
			break
		}
	}
	if aname == "" {
		return fmt.Errorf("remove %s: too many archives named %s", target, archive)
	}
	rec.Archive = adir.Rel(aname)
	rec.Outcome, rec.AfterSHA, rec.AfterSize = state.Pending, RemovedSHA, 0
	start := time.Now()
	if err := w.journal(ctx, rec, true); err != nil {
		return err
	}
	if err := dir.Move(name, adir, aname); err != nil {
		rec.Outcome, rec.Reason = state.Failed, err.Error()
		if uerr := w.journal(context.WithoutCancel(ctx), rec, false); uerr != nil {
			err = errors.Join(err, uerr)
		}
		return fmt.Errorf("remove %s: %w", target, err)
	}
	if err := errors.Join(adir.Sync(), dir.Sync()); err != nil {
		return err
	}
	// The agent may have written between the read and the move: the archive
	// holds what was removed, so the record says what it holds.
	if moved, _, err := adir.ReadFile(aname); err == nil {
		rec.BeforeSHA, rec.BeforeSize = Hash(moved), int64(len(moved))
	}
	_ = fi
	rec.Outcome, rec.Duration = state.Done, time.Since(start)
	w.Log.Info("removed file into the archive", "store", rec.Store, "root", rec.Root, "rule", rec.Rule, "path", rec.Target, "archive", rec.Archive, "reason", rec.Reason)
	return w.journal(context.WithoutCancel(ctx), rec, false)
}

// CleanTemp resolves the temporary files a killed memwatch left in root
// (see the package doc): what is provably memwatch's own or already in an
// archive is removed, a tail an agent appended is carried into the target
// first, anything else is kept in the archive directory. It returns how
// many it removed and how many it kept.
func (w *Rewriter) CleanTemp(ctx context.Context, root *confine.Root, store string) (removed, kept int, err error) {
	// A scan, a batch of names at a time: a root of a million files is
	// looked through without a listing of them all. A vanished or
	// unreadable directory is not ours to judge.
	sc, werr := root.Scan(".", func(string) bool { return true }, func(_ string, d fs.DirEntry) bool {
		return !d.IsDir() && confine.IsTemp(d.Name())
	})
	var temps []string
	for sc != nil && ctx.Err() == nil {
		rels, done := sc.Next(256)
		temps = append(temps, rels...)
		if done {
			break
		}
	}
	if sc != nil {
		sc.Close()
	}
	for _, t := range temps {
		r, k := w.resolveLeftover(ctx, root, store, t)
		removed += r
		kept += k
	}
	return removed, kept, werr
}

// resolveLeftover decides about one leftover temp file.
func (w *Rewriter) resolveLeftover(ctx context.Context, root *confine.Root, store, rel string) (removed, kept int) {
	dir, err := root.Dir(filepath.Dir(rel))
	if err != nil {
		return 0, 0
	}
	defer dir.Close()
	name := filepath.Base(rel)
	data, fi, err := dir.ReadFile(name)
	if err != nil {
		w.Log.Warn("cannot read a leftover temp file; it stays", "root", root.Path(), "path", rel, "err", err)
		return 0, 0
	}
	target, tag := tempTarget(name)
	targetRel := filepath.Join(filepath.Dir(rel), target)
	rec := &state.Record{Store: store, Root: root.Path(), Target: targetRel}
	var jr *state.Record
	if id, ok := tempRecord(tag); ok && w.DB != nil {
		if r, err := w.DB.GetRecord(ctx, id); err == nil && r.Root == root.Path() {
			jr = &r
			rec.Target, rec.Store = r.Target, r.Store
		}
	}
	gone := func(why string) (int, int) {
		if st, err := dir.Lstat(name); err == nil && sameInodeSt(fi, st) {
			if err := dir.Unlink(name); err == nil {
				w.Log.Info("removed a temp file left by an interrupted rewrite", "root", root.Path(), "path", rel, "why", why)
				return 1, 0
			}
		}
		return 0, 0
	}
	switch {
	case strings.HasPrefix(tag, "a"):
		// An archive being written: a copy of a file still in place.
		return gone("an unfinished archive copy")
	case jr != nil:
		for _, known := range []struct {
			sha  string
			size int64
			what string
		}{{jr.BeforeSHA, jr.BeforeSize, "the pre-image"}, {jr.AfterSHA, jr.AfterSize, "memwatch's result"}} {
			if known.sha == "" || known.sha == RemovedSHA || int64(len(data)) < known.size || Hash(data[:known.size]) != known.sha {
				continue
			}
			if tail := data[known.size:]; len(tail) > 0 {
				// The tail goes into the target (unless it is there: appends
				// carried before the swap are in the result too), and the
				// file is kept below: only exact copies of what is archived
				// or written are removed.
				if cur, _, err := dir.ReadFile(target); err == nil && bytes.Contains(cur, tail) {
					break
				}
				if err := appendTo(dir, target, tail); err == nil {
					w.Log.Info("carried bytes an agent wrote during an interrupted rewrite into the target", "root", root.Path(), "path", targetRel, "bytes", len(tail))
				}
				break
			}
			return gone(known.what)
		}
	}
	// Anything else (such as the fallback's second name of a target, tag
	// "d") may hold an agent's bytes: it is kept, and the lines it added to
	// the pre-image go into the live file.
	keptAt := w.keepJournaled(dir, name, rec, "found after an interrupted rewrite; not memwatch's own, so kept")
	if keptAt == rel {
		return 0, 0 // could not be moved: it stays, and the journal says so
	}
	if jr != nil && jr.Archive != "" {
		if pre, err := root.ReadFile(jr.Archive); err == nil {
			if p, ok := Unpack(pre); ok {
				pre = p
			}
			w.addRisk(ctx, root.Path(), rec.Target, risk{Record: jr.ID, Blocks: Added(pre, data), Always: true, Until: w.Now().Add(riskAlways), Kept: keptAt})
			if _, err := w.Restore(ctx, root, rec.Target, rec.Store); err != nil {
				w.Log.Warn("put back an agent's lines found after an interrupted rewrite; retried on the next change", "root", root.Path(), "path", rec.Target, "err", err)
			}
		}
	}
	return 0, 1
}

func sameInodeSt(fi fs.FileInfo, st *unix.Stat_t) bool {
	a, ok := statT(fi)
	return ok && uint64(a.Dev) == uint64(st.Dev) && uint64(a.Ino) == uint64(st.Ino)
}

// appendTo appends b to name in dir.
func appendTo(dir *confine.Dir, name string, b []byte) error {
	f, err := dir.Open(name, os.O_WRONLY|os.O_APPEND)
	if err != nil {
		return err
	}
	if _, err := f.Write(b); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// tempTarget splits a temp name ".NAME<marker>TAG..." into NAME and the tag.
func tempTarget(name string) (target, tag string) {
	i := strings.Index(name, TempMarker)
	if i < 0 {
		return name, ""
	}
	return strings.TrimPrefix(name[:i], "."), name[i+len(TempMarker):]
}

// tempRecord reads the journal id from a rewrite temp's tag "r<ID>-...".
func tempRecord(tag string) (int64, bool) {
	if !strings.HasPrefix(tag, "r") {
		return 0, false
	}
	end := strings.IndexByte(tag, '-')
	if end < 0 {
		return 0, false
	}
	var id int64
	if _, err := fmt.Sscanf(tag[1:end], "%d", &id); err != nil {
		return 0, false
	}
	return id, true
}
