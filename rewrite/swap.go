package rewrite

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"github.com/memwatch/memwatch/confine"
	"github.com/memwatch/memwatch/state"
)

// swapper runs steps 7 to 12 of the protocol (see the package doc) for one
// attempt. It is used by one goroutine.
type swapper struct {
	w       *Rewriter
	dir     *confine.Dir
	name    string
	snap    *snapshot
	newData []byte
	rec     *state.Record
	mode    fs.FileMode

	ours     *os.File // our temp file, kept open: its inode identifies it
	oursIno  uint64
	oursDev  uint64
	keptDone bool
}

// file is what sits at a name, read once it was quiet.
type file struct {
	f     *os.File
	data  []byte
	dev   uint64
	ino   uint64
	size  int64
	mtime time.Time
}

func (x *file) close() {
	if x != nil && x.f != nil {
		x.f.Close()
	}
}

func (s *swapper) run(ctx context.Context) ([]byte, error) {
	mode, uid, gid := s.snap.mode, s.snap.uid, s.snap.gid
	if !s.snap.exists {
		owner := s.dir.Root().Owner()
		mode, uid, gid = s.mode, owner.UID, owner.GID
		if mode == 0 {
			mode = s.dir.Root().FileMode()
		}
	}
	// 7. TEMP, named with the journal record so the next start can tell it.
	f, tmp, err := s.dir.CreateTemp(s.name, fmt.Sprintf("r%d-", s.rec.ID))
	if err != nil {
		return nil, fmt.Errorf("write %s: %w", s.rec.Target, err)
	}
	s.ours = f
	defer f.Close()
	if err := writeAll(f, s.newData); err != nil {
		s.dropOurs(tmp)
		return nil, fmt.Errorf("write %s: %w", s.rec.Target, err)
	}
	if err := s.dir.Own(f, mode, uid, gid); err != nil {
		s.dropOurs(tmp)
		return nil, fmt.Errorf("give %s to uid %d: %w", s.rec.Target, uid, err)
	}
	if err := f.Sync(); err != nil {
		s.dropOurs(tmp)
		return nil, fmt.Errorf("sync %s: %w", s.rec.Target, err)
	}
	fi, err := f.Stat()
	if err != nil {
		s.dropOurs(tmp)
		return nil, err
	}
	s.oursDev, s.oursIno = inode(fi)

	if !s.snap.exists {
		// Create without clobbering a file the agent created meanwhile.
		err := s.dir.Link(tmp, s.dir, s.name)
		s.dropOurs(tmp)
		if errors.Is(err, fs.ErrExist) {
			return nil, ErrConflict
		}
		if err != nil {
			return nil, fmt.Errorf("create %s: %w", s.rec.Target, err)
		}
		return s.newData, s.dir.Sync()
	}

	// 8. HELD? A writer holding the old inode would keep writing into it.
	if held, ok := confine.HeldForWriting(s.snap.f); ok && held {
		s.dropOurs(tmp)
		return nil, s.busy("held open for writing")
	}

	// 9. EXCHANGE.
	s.step("before-exchange")
	err = s.dir.Exchange(tmp, s.name)
	s.step("after-exchange")
	if errors.Is(err, confine.ErrExchangeUnsupported) {
		return s.renameSwap(ctx, tmp)
	}
	if err != nil {
		s.dropOurs(tmp)
		return nil, fmt.Errorf("swap %s: %w", s.rec.Target, err)
	}

	// 10. SETTLE the displaced file.
	x, quiet, err := s.settle(ctx, tmp)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			// The agent removed or renamed the temp name: nothing of theirs is
			// left for memwatch to delete.
			return s.newData, s.dir.Sync()
		}
		// Never delete what could not be read: classify it at the next start.
		return nil, fmt.Errorf("read the file displaced from %s (left at %s): %w", s.rec.Target, s.dir.Rel(tmp), err)
	}
	defer x.close()
	if !quiet || s.held(x) {
		// A writer holds X: put it back, with every byte it wrote.
		if err := s.exchangeBack(ctx, tmp); err != nil {
			return nil, err
		}
		return nil, s.busy("kept being written after the swap")
	}

	// 11. CLASSIFY.
	final := s.newData
	switch {
	case bytes.Equal(x.data, s.snap.data):
		s.unlinkVerified(tmp, x, "the pre-image, archived")
	case bytes.HasPrefix(x.data, s.snap.data):
		// Writes in flight at the exchange landed in X. They go to the
		// target, and X is kept too: an agent that read the target in the
		// moment they were missing may write it back without them.
		tail := x.data[len(s.snap.data):]
		if err := s.appendToTarget(tail); err != nil {
			s.keep(tmp, fmt.Sprintf("an agent appended %d bytes to %s during the swap and they could not be carried over (%v)", len(tail), s.rec.Target, err))
		} else {
			s.w.Log.Info("carried bytes written during the swap", "root", s.rec.Root, "path", s.rec.Target, "bytes", len(tail))
			s.keep(tmp, fmt.Sprintf("the pre-image of %s with %d bytes an agent wrote during the swap (also appended to it)", s.rec.Target, len(tail)))
			final = append(append([]byte{}, s.newData...), tail...)
		}
	default:
		// The agent rewrote the file, or renamed a new one onto it, just
		// before the exchange: its version wins.
		if err := s.exchangeBack(ctx, tmp); err != nil {
			return nil, err
		}
		return nil, ErrConflict
	}
	return final, s.dir.Sync()
}

func (s *swapper) step(name string) {
	if s.w.hook != nil {
		s.w.hook(name)
	}
}

func writeAll(f *os.File, b []byte) error {
	_, err := f.Write(b)
	return err
}

func inode(fi fs.FileInfo) (dev, ino uint64) {
	if st, ok := statT(fi); ok {
		return uint64(st.Dev), uint64(st.Ino)
	}
	return 0, 0
}

// dropOurs removes the temp name while it still is our unchanged temp file.
func (s *swapper) dropOurs(tmp string) {
	st, err := s.dir.Lstat(tmp)
	if err != nil || uint64(st.Ino) != s.oursIno || uint64(st.Dev) != s.oursDev {
		return
	}
	_ = s.dir.Unlink(tmp)
}

func (s *swapper) busy(why string) error {
	b := &BusyError{Path: s.rec.Target, Why: why}
	if s.snap.f != nil {
		if fi, err := s.snap.f.Stat(); err == nil {
			dev, ino := inode(fi)
			b.Holders = writers(dev, ino)
		}
	}
	return b
}

// held reports whether a writer holds x open (a lease is refused).
func (s *swapper) held(x *file) bool {
	held, ok := confine.HeldForWriting(x.f)
	return ok && held
}

// settle opens what is at name and waits until it has not changed for
// Settle (at most MaxSettle), then reads it.
func (s *swapper) settle(ctx context.Context, name string) (*file, bool, error) {
	f, err := s.dir.Open(name, os.O_RDONLY)
	if err != nil {
		return nil, false, err
	}
	x := &file{f: f}
	sig := func() (int64, time.Time, error) {
		fi, err := f.Stat()
		if err != nil {
			return 0, time.Time{}, err
		}
		return fi.Size(), fi.ModTime(), nil
	}
	size, mtime, err := sig()
	if err != nil {
		f.Close()
		return nil, false, err
	}
	quiet := false
	deadline := time.Now().Add(s.w.MaxSettle)
	for {
		select {
		case <-ctx.Done():
		case <-time.After(s.w.Settle):
		}
		size2, mtime2, err := sig()
		if err != nil {
			f.Close()
			return nil, false, err
		}
		if size2 == size && mtime2.Equal(mtime) {
			quiet = true
			break
		}
		size, mtime = size2, mtime2
		if time.Now().After(deadline) || ctx.Err() != nil {
			break
		}
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, false, err
	}
	x.dev, x.ino = inode(fi)
	x.size, x.mtime = fi.Size(), fi.ModTime()
	limit := s.dir.Root().MaxFileSize()
	if fi.Size() > limit {
		// Too large to compare: it is not memwatch's, so it is kept.
		return x, quiet, nil
	}
	buf := make([]byte, fi.Size())
	n, err := f.ReadAt(buf, 0)
	if err != nil && n < len(buf) {
		f.Close()
		return nil, false, err
	}
	x.data = buf[:n]
	return x, quiet, nil
}

// unlinkVerified removes name if it still is x's inode with x's content;
// otherwise what is there is kept. what says why x may go, for the log.
func (s *swapper) unlinkVerified(name string, x *file, what string) {
	st, err := s.dir.Lstat(name)
	if err != nil {
		return // gone already: nothing to remove
	}
	fi, ferr := x.f.Stat()
	if uint64(st.Ino) != x.ino || uint64(st.Dev) != x.dev || ferr != nil || fi.Size() != x.size || !fi.ModTime().Equal(x.mtime) {
		s.keep(name, "the file at "+s.dir.Rel(name)+" changed after memwatch read it")
		return
	}
	if err := s.dir.Unlink(name); err != nil {
		s.w.Log.Warn("could not remove a displaced file; it is kept", "root", s.rec.Root, "path", s.dir.Rel(name), "err", err)
	}
}

// appendToTarget appends b to whatever is at the target now.
func (s *swapper) appendToTarget(b []byte) error {
	f, err := s.dir.Open(s.name, os.O_WRONLY|os.O_APPEND)
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

// exchangeBack puts what was displaced to tmp back at the target and
// resolves what that moves to tmp (step 12).
func (s *swapper) exchangeBack(ctx context.Context, tmp string) error {
	if err := s.dir.Exchange(tmp, s.name); err != nil {
		// Both names still hold both files; the next start classifies tmp.
		return fmt.Errorf("put the agent's version of %s back (it is at %s): %w", s.rec.Target, s.dir.Rel(tmp), err)
	}
	s.resolveTemp(ctx, tmp, 0)
	return s.dir.Sync()
}

// resolveTemp decides about what an exchange back moved to tmp: memwatch's
// own result (maybe with bytes the agent appended to it while it was the
// target) is removed once those bytes are carried over; an agent's file is
// never removed: the newer of it and the target stays at the target, the
// other is kept in the archive directory.
func (s *swapper) resolveTemp(ctx context.Context, tmp string, depth int) {
	y, _, err := s.settle(ctx, tmp)
	if err != nil {
		if !errors.Is(err, fs.ErrNotExist) {
			s.w.Log.Warn("could not read a displaced file; it is left for the next start", "root", s.rec.Root, "path", s.dir.Rel(tmp), "err", err)
		}
		return
	}
	defer y.close()
	if y.ino == s.oursIno && y.dev == s.oursDev && y.data != nil {
		switch {
		case bytes.Equal(y.data, s.newData):
			s.unlinkVerified(tmp, y, "memwatch's own result")
			return
		case bytes.HasPrefix(y.data, s.newData):
			tail := y.data[len(s.newData):]
			if err := s.appendToTarget(tail); err == nil {
				s.w.Log.Info("carried bytes written to memwatch's result back into the agent's file", "root", s.rec.Root, "path", s.rec.Target, "bytes", len(tail))
				s.keep(tmp, fmt.Sprintf("memwatch's result of %s with %d bytes an agent appended to it while it was in place (also appended to the agent's version)", s.rec.Target, len(tail)))
				return
			}
		}
		s.keep(tmp, "memwatch's result of "+s.rec.Target+" was changed by an agent while it was in place")
		return
	}
	// An agent's file. The newer one belongs at the target.
	if depth < 3 {
		if t, err := s.dir.Open(s.name, os.O_RDONLY); err == nil {
			tfi, err := t.Stat()
			t.Close()
			if err == nil && y.mtime.After(tfi.ModTime()) {
				if err := s.dir.Exchange(tmp, s.name); err == nil {
					s.resolveTemp(ctx, tmp, depth+1)
					return
				}
			}
		}
	}
	s.keep(tmp, "an agent wrote "+s.rec.Target+" again during the swap; this older version is kept")
}

// keep moves the file at name (in the target's directory) into the
// archive directory, never deleting it, and journals where it went.
func (s *swapper) keep(name, why string) {
	if s.keptDone {
		return
	}
	s.keptDone = true
	rel, err := keepFile(s.w, s.dir, name, s.rec)
	if err != nil {
		s.w.Log.Error("could not move a file memwatch must keep; it stays where it is", "root", s.rec.Root, "path", s.dir.Rel(name), "err", err)
		return
	}
	s.w.Log.Warn("kept a file found during a rewrite", "root", s.rec.Root, "path", s.rec.Target, "kept", rel, "why", why)
	kr := &state.Record{Store: s.rec.Store, Root: s.rec.Root, Rule: RuleKept, Target: s.rec.Target, Archive: rel,
		Outcome: state.Done, Reason: why}
	if err := s.w.journal(context.Background(), kr, true); err != nil {
		s.w.Log.Error("journal a kept file", "err", err, "kept", rel)
	}
}

// RuleKept journals a file memwatch found and moved into the archive
// directory instead of deleting it.
const RuleKept = "kept"

// keepFile moves dir/name into the target's archive directory under a new
// name and returns its root-relative path.
func keepFile(w *Rewriter, dir *confine.Dir, name string, rec *state.Record) (string, error) {
	base := filepath.Base(rec.Target)
	rel := archiveName("", rec.Target, w.Now())
	adir, err := dir.Root().MkdirAll(filepath.Dir(rel))
	if err != nil {
		return "", err
	}
	defer adir.Close()
	stamp := w.Now().Format("20060102-150405")
	for i := 1; i < 1000; i++ {
		n := fmt.Sprintf("%s.kept-%s", base, stamp)
		if i > 1 {
			n = fmt.Sprintf("%s.kept-%s-%d", base, stamp, i)
		}
		err := dir.Move(name, adir, n)
		if errors.Is(err, fs.ErrExist) {
			continue
		}
		if err != nil {
			return "", err
		}
		_ = adir.Sync()
		_ = dir.Sync()
		return adir.Rel(n), nil
	}
	return "", fmt.Errorf("keep %s: too many kept files", dir.Rel(name))
}

// renameSwap replaces the target where RENAME_EXCHANGE is missing: the
// current target first gets a second name (link), so the rename destroys
// nothing; what it displaced is then classified like X. What it cannot do
// is put an agent's version back atomically: that version is kept in the
// archive directory instead, and an agent rename in the instant between the
// link and the rename replaces a file that has no second name.
func (s *swapper) renameSwap(ctx context.Context, tmp string) ([]byte, error) {
	hold, err := s.freeName("d")
	if err != nil {
		s.dropOurs(tmp)
		return nil, err
	}
	if err := s.dir.Link(s.name, s.dir, hold); err != nil {
		s.dropOurs(tmp)
		return nil, fmt.Errorf("swap %s: %w", s.rec.Target, err)
	}
	if err := s.dir.Replace(tmp, s.name); err != nil {
		_ = s.dir.Unlink(hold)
		s.dropOurs(tmp)
		return nil, fmt.Errorf("rename into %s: %w", s.rec.Target, err)
	}
	x, _, err := s.settle(ctx, hold)
	if err != nil {
		return s.newData, nil
	}
	defer x.close()
	switch {
	case bytes.Equal(x.data, s.snap.data):
		s.unlinkVerified(hold, x, "the pre-image, archived")
		return s.newData, s.dir.Sync()
	case bytes.HasPrefix(x.data, s.snap.data):
		tail := x.data[len(s.snap.data):]
		if err := s.appendToTarget(tail); err == nil {
			s.keep(hold, "the pre-image of "+s.rec.Target+" with bytes an agent wrote during the swap (also appended to it)")
			return append(append([]byte{}, s.newData...), tail...), s.dir.Sync()
		}
	}
	s.keep(hold, "an agent wrote "+s.rec.Target+" during the swap; its version is kept")
	return s.newData, s.dir.Sync()
}

// freeName returns a temp-marked name that does not exist in the directory.
func (s *swapper) freeName(tag string) (string, error) {
	f, name, err := s.dir.CreateTemp(s.name, tag)
	if err != nil {
		return "", err
	}
	f.Close()
	return name, s.dir.Unlink(name)
}
