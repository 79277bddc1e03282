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
	"github.com/memwatch/memwatch/control"
	"github.com/memwatch/memwatch/state"
)

// maxCarries bounds the appends carried in the last check of one attempt:
// a file appended to without a pause is deferred, not chased.
const maxCarries = 64

// swapper runs steps 5 to 9 of the protocol (see the package doc) for one
// attempt. It is used by one goroutine.
type swapper struct {
	w       *Rewriter
	dir     *confine.Dir
	name    string
	snap    *snapshot // S: what is at the target; its descriptor names its inode
	newData []byte    // N, with every tail carried into it
	rec     *state.Record
	mode    fs.FileMode
	// archive is the archive of S, open, so a tail carried into N goes into
	// it too (nil when nothing was archived).
	archive     *os.File
	archiveSize int64

	ours    *os.File // our temp file, kept open: its inode identifies it
	oursIno uint64
	oursDev uint64
	tmp     string
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
	// 5. TEMP, named with the journal record so the next start can tell it.
	f, tmp, err := s.dir.CreateTemp(s.name, fmt.Sprintf("r%d-", s.rec.ID))
	if err != nil {
		return nil, fmt.Errorf("write %s: %w", s.rec.Target, err)
	}
	s.ours, s.tmp = f, tmp
	defer f.Close()
	if err := writeAll(f, s.newData); err != nil {
		s.dropOurs()
		return nil, fmt.Errorf("write %s: %w", s.rec.Target, err)
	}
	if err := s.giveAway(); err != nil {
		s.dropOurs()
		return nil, err
	}
	if err := f.Sync(); err != nil {
		s.dropOurs()
		return nil, fmt.Errorf("sync %s: %w", s.rec.Target, err)
	}
	fi, err := f.Stat()
	if err != nil {
		s.dropOurs()
		return nil, err
	}
	s.oursDev, s.oursIno = inode(fi)

	if !s.snap.exists {
		// Create without clobbering a file the agent created meanwhile.
		err := s.dir.Link(tmp, s.dir, s.name)
		s.dropOurs()
		if errors.Is(err, fs.ErrExist) {
			return nil, ErrConflict
		}
		if err != nil {
			return nil, fmt.Errorf("create %s: %w", s.rec.Target, err)
		}
		return s.newData, s.dir.Sync()
	}

	// 6. LAST CHECK, then 7. EXCHANGE and 8. CLASSIFY back to back: nothing
	// slow happens between them, so the instants in which an agent can
	// write unseen, or read memwatch's result, are microseconds.
	for {
		if err := s.lastCheck(ctx); err != nil {
			s.dropOurs()
			return nil, err
		}
		held, ok := s.dir.Root().HeldForWriting(s.snap.f)
		if !ok || !held {
			break
		}
		// A writer has the pre-image open. One that lets go soon (open,
		// write, close) is waited for, then the check runs again.
		if s.w.heldOpen(ctx, s.dir.Root(), s.snap.f) {
			s.dropOurs()
			return nil, s.busy("held open for writing")
		}
	}
	s.step("before-exchange")
	err = s.dir.Exchange(tmp, s.name)
	if errors.Is(err, confine.ErrExchangeUnsupported) {
		return s.renameSwap(ctx)
	}
	if err != nil {
		s.dropOurs()
		return nil, fmt.Errorf("swap %s: %w", s.rec.Target, err)
	}
	// Our descriptor for carries goes: open for writing, it would make the
	// kernel refuse a lease on the result as if an agent held it.
	s.ours.Close()
	s.step("after-exchange")
	why, busy, err := s.classify(ctx)
	if err != nil {
		// Never delete what could not be read: the next start classifies it.
		return nil, fmt.Errorf("read the file displaced from %s (left at %s): %w", s.rec.Target, s.dir.Rel(tmp), err)
	}
	if why == "" {
		return s.newData, s.dir.Sync()
	}
	// 9. EXCHANGE BACK: the agent's version goes live again at once.
	final, err := s.giveBack(ctx, why)
	if err != nil {
		return nil, err
	}
	if final != nil {
		// The agent's newer file was written from memwatch's result: the
		// change took effect (what it removed is in its archive).
		return final, nil
	}
	if busy {
		return nil, s.busy(why)
	}
	return nil, ErrConflict
}

// giveAway gives our temp file the target's owner and mode (the snapshot's,
// or the root's for a new file).
func (s *swapper) giveAway() error {
	mode, uid, gid := s.snap.mode, s.snap.uid, s.snap.gid
	if !s.snap.exists {
		owner := s.dir.Root().Owner()
		mode, uid, gid = s.mode, owner.UID, owner.GID
		if mode == 0 {
			mode = s.dir.Root().FileMode()
		}
	}
	if err := s.dir.Own(s.ours, mode, uid, gid); err != nil {
		return fmt.Errorf("give %s to uid %d: %w", s.rec.Target, uid, err)
	}
	return nil
}

// lastCheck reads the target again right before the exchange. Unchanged:
// go on. S plus bytes an agent appended (in place, or a new file by rename
// holding S and more): the bytes are carried into the temp file and the
// archive, and the check runs again. Anything else: a write under way is
// waited for (an in-place rewrite truncates first), then ErrConflict.
func (s *swapper) lastCheck(ctx context.Context) error {
	deadline := time.Now().Add(s.w.MaxSettle)
	for carries := 0; ; {
		cur, err := readSnapshot(s.dir, s.name)
		if err != nil {
			return err
		}
		if cur.exists && cur.sameInode(s.snap) && bytes.Equal(cur.data, s.snap.data) {
			cur.close()
			return nil
		}
		// A tail counts as appended only after a complete line: a pre-image
		// cut mid-line was read while an agent was still writing it.
		if cur.exists && bytes.HasPrefix(cur.data, s.snap.data) && lineEnd(s.snap.data) {
			if carries++; carries > maxCarries {
				cur.close()
				return s.busy("appended to without a pause")
			}
			if err := s.carry(cur); err != nil {
				cur.close()
				return err
			}
			continue
		}
		quiet := time.Since(cur.mtime)
		cur.close()
		if !cur.exists || quiet >= s.w.Settle || time.Now().After(deadline) {
			return ErrConflict
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(s.w.Settle - quiet):
		}
	}
}

// lineEnd reports whether b is empty or ends a line.
func lineEnd(b []byte) bool { return len(b) == 0 || b[len(b)-1] == '\n' }

// carry makes cur (S plus a tail) the pre-image: the tail goes into the
// temp file and the archive. No fsync: the tail is as durable as the
// agent's own write of it, and the check must follow at once.
func (s *swapper) carry(cur *snapshot) error {
	tail := cur.data[len(s.snap.data):]
	if len(tail) > 0 {
		if _, err := s.ours.WriteAt(tail, int64(len(s.newData))); err != nil {
			return fmt.Errorf("carry an append into %s: %w", s.rec.Target, err)
		}
		s.newData = append(s.newData, tail...)
		if s.archive != nil {
			if _, err := s.archive.WriteAt(tail, s.archiveSize); err != nil {
				return fmt.Errorf("carry an append into archive %s: %w", s.rec.Archive, err)
			}
			s.archiveSize += int64(len(tail))
		}
		s.w.Log.Debug("carried appended bytes into the rewrite", "root", s.rec.Root, "path", s.rec.Target, "bytes", len(tail))
	}
	renamed := !cur.sameInode(s.snap)
	s.snap.close()
	*s.snap = *cur
	if renamed {
		// A new file by rename: the result takes its owner and mode.
		return s.giveAway()
	}
	return nil
}

// classify decides about X, the file the exchange moved to the temp name,
// at once: it must be S's inode, held open for writing by nobody, with
// exactly S's content. why says what else it was ("" when it was S); busy
// says a writer holds it.
func (s *swapper) classify(ctx context.Context) (why string, busy bool, err error) {
	st, err := s.dir.Lstat(s.tmp)
	if errors.Is(err, fs.ErrNotExist) {
		// Something removed the temp name: nothing is left there to judge.
		return "", false, nil
	}
	if err != nil {
		return "", false, err
	}
	if uint64(st.Ino) != s.snap.ino || uint64(st.Dev) != s.snap.dev {
		return "an agent replaced it just before the swap", false, nil
	}
	held, ok := s.dir.Root().HeldForWriting(s.snap.f)
	if !ok {
		// No leases here: wait until X is quiet instead.
		x, quiet, err := s.settle(ctx, s.tmp)
		if err != nil {
			return "", false, err
		}
		defer x.close()
		held = !quiet
	}
	if held {
		return "held open for writing", true, nil
	}
	x := make([]byte, len(s.snap.data)+1)
	n, err := s.snap.f.ReadAt(x, 0)
	if n != len(s.snap.data) || !bytes.Equal(x[:n], s.snap.data) {
		return "an agent wrote it during the swap", false, nil
	}
	if err := s.dir.Unlink(s.tmp); err != nil && !errors.Is(err, fs.ErrNotExist) {
		s.w.Log.Warn("could not remove the displaced pre-image (it is archived); it is kept", "root", s.rec.Root, "path", s.dir.Rel(s.tmp), "err", err)
		s.keep(s.tmp, "the pre-image of "+s.rec.Target+", which could not be removed")
	}
	return "", false, nil
}

// giveBack runs when X is not exactly S. If memwatch's result is still at
// the target, the two are exchanged back at once: the agent's version X is
// live again, and what went back to the temp name (the result, which an
// agent may have written to in the instant it was in place) is resolved.
// If an agent already replaced the result, its newer file stays and X's
// additions are merged into it. Either way the lines X added to S are
// watched: an agent that read the result in that instant writes its next
// version without them (see "Genuine conflicts" in the package doc).
//
// It returns the live file when that newer file, or the result a writer
// held open (which then went live again), was written from memwatch's
// result (it lacks the lines the result dropped, or has one only the
// result had): then the rewrite took effect after all, and is journaled
// done (a record that says failed for a change in place would mislead undo
// and the user).
func (s *swapper) giveBack(ctx context.Context, why string) ([]byte, error) {
	var xdata, final []byte
	tst, terr := s.dir.Lstat(s.name)
	if terr == nil && uint64(tst.Ino) == s.oursIno && uint64(tst.Dev) == s.oursDev {
		if err := s.dir.Exchange(s.tmp, s.name); err != nil {
			// Both names still hold both files; the next start classifies tmp.
			return nil, fmt.Errorf("put the agent's version of %s back (it is at %s): %w", s.rec.Target, s.dir.Rel(s.tmp), err)
		}
		s.step("after-exchange-back")
		if x, err := s.readAt(s.name); err == nil {
			xdata = x.data
			x.close()
		}
		if s.resolveOurs(ctx) {
			// A writer held the result open, so its file went live again
			// (X's additions are put back into it). The rewrite took
			// effect if what the writer wrote there was built on the
			// result; a version of its own written over it is the
			// agent's, as a conflict's is.
			final = s.liveFromResult()
		}
	} else if x, err := s.readAt(s.tmp); err == nil {
		// An agent renamed a newer file onto the target after the exchange:
		// it stays; X, older, is merged into it and kept as a backup.
		xdata = x.data
		x.close()
		s.mergeAndKeep(ctx, s.tmp, xdata, s.snap.data, "an agent replaced "+s.rec.Target+" twice during the swap; the older version")
		final = s.liveFromResult()
	} else if !errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("read the file displaced from %s (left at %s): %w", s.rec.Target, s.dir.Rel(s.tmp), err)
	}
	if final != nil {
		s.w.Log.Info("an agent wrote the file during the swap; the live file is built on memwatch's result, so the rewrite took effect, and the agent's lines go into it", "root", s.rec.Root, "path", s.rec.Target, "why", why)
	} else {
		s.w.Log.Info("an agent wrote the file during the swap; its version stays live", "root", s.rec.Root, "path", s.rec.Target, "why", why)
	}
	if xdata != nil && final == nil {
		// Memwatch's result was visible for an instant: a version written
		// from it lacks what X added. Watched, and put back if that happens.
		s.w.addRisk(ctx, s.rec.Root, s.rec.Target, risk{
			Record:  s.rec.ID,
			Blocks:  Added(s.snap.data, xdata),
			Dropped: lineSample(s.snap.data, s.newData, 16),
			Novel:   lineSample(s.newData, s.snap.data, 16),
			Until:   s.w.Now().Add(riskDeferred),
		})
	}
	return final, s.dir.Sync()
}

// liveFromResult returns the live file when it was written from
// memwatch's result (it lacks the lines the result dropped, or has one
// only the result had), else nil.
func (s *swapper) liveFromResult() []byte {
	live, err := s.readAt(s.name)
	if err != nil {
		return nil
	}
	defer live.close()
	r := risk{Dropped: lineSample(s.snap.data, s.newData, 16), Novel: lineSample(s.newData, s.snap.data, 16)}
	if len(r.Dropped)+len(r.Novel) > 0 && r.fromResult(live.data) {
		return live.data
	}
	return nil
}

// resolveOurs decides about what the exchange back moved to the temp name:
// memwatch's result as written (removed), or the result with what an agent
// wrote into it while it was in place (its additions go into the live
// file; the file is kept as a backup). It reports whether the result went
// live again instead: a writer held it open, and its next writes go there.
func (s *swapper) resolveOurs(ctx context.Context) (resultLive bool) {
	y, err := s.readAt(s.tmp)
	if err != nil {
		if !errors.Is(err, fs.ErrNotExist) {
			s.w.Log.Warn("could not read a displaced file; it is left for the next start", "root", s.rec.Root, "path", s.dir.Rel(s.tmp), "err", err)
		}
		return
	}
	defer y.close()
	if y.ino != s.oursIno || y.dev != s.oursDev {
		// An agent renamed its own file onto the temp name: never ours to judge.
		s.keep(s.tmp, "a file an agent put at memwatch's temp name during the swap of "+s.rec.Target)
		return false
	}
	if held, ok := s.dir.Root().HeldForWriting(y.f); ok && held {
		// A writer opened the result in the instant it was in place and
		// holds it: its later writes go there, so that file must be live.
		// It goes back to the target; the agent's other version is merged.
		if err := s.dir.Exchange(s.tmp, s.name); err == nil {
			x, err := s.readAt(s.tmp)
			if err == nil {
				defer x.close()
				s.mergeAndKeep(ctx, s.tmp, x.data, s.snap.data, "the agent's version of "+s.rec.Target+" displaced by a writer that holds memwatch's result open")
			}
			return true
		}
	}
	switch {
	case bytes.Equal(y.data, s.newData):
		s.unlinkVerified(s.tmp, y)
	case bytes.HasPrefix(y.data, s.newData):
		tail := y.data[len(s.newData):]
		if err := s.appendToTarget(tail); err != nil {
			s.w.addRisk(ctx, s.rec.Root, s.rec.Target, risk{Record: s.rec.ID, Blocks: Added(s.newData, y.data), Always: true,
				Until: s.w.Now().Add(riskAlways), Kept: s.keep(s.tmp, "memwatch's result of "+s.rec.Target+" with bytes an agent appended to it that could not be carried over")})
			return false
		}
		s.w.Log.Info("carried bytes an agent appended to memwatch's result back into its version", "root", s.rec.Root, "path", s.rec.Target, "bytes", len(tail))
		kept := s.keep(s.tmp, fmt.Sprintf("memwatch's result of %s with %d bytes an agent appended to it in the instant it was in place (also appended to the agent's version)", s.rec.Target, len(tail)))
		s.watchCarried(ctx, Added(s.newData, y.data), kept)
	default:
		s.mergeAndKeep(ctx, s.tmp, y.data, s.newData, "memwatch's result of "+s.rec.Target+" as an agent rewrote it in the instant it was in place")
	}
	return false
}

// watchCarried watches lines memwatch appended to the live file (what an
// agent wrote into the result in the instant it was live) as it watches
// lines it put back: an agent that read the file before they were
// appended (a read-modify-write) writes its next version without them,
// and they go back (see mergeRisks). Lines the live file lacks already
// are put back whatever it looks like.
func (s *swapper) watchCarried(ctx context.Context, blocks []Block, kept string) {
	live, err := s.readAt(s.name)
	if err != nil {
		return
	}
	defer live.close()
	// Missing already: in no live file, put back within riskAlways.
	r := risk{Record: s.rec.ID, Blocks: blocks, Always: true, Until: s.w.Now().Add(riskAlways), Kept: kept}
	if len(Missing(live.data, blocks)) == 0 {
		r.Restored, r.Restores, r.Until = Hash(live.data), 1, s.w.Now().Add(riskDeferred)
	}
	s.w.addRisk(ctx, s.rec.Root, s.rec.Target, r)
}

// mergeAndKeep keeps the file at name (holding data, an agent's version
// written from base) as a backup, and records the lines it added to base
// as at risk with Always: the next step of the rewrite (or the daemon's
// restore job) puts them into the live file.
func (s *swapper) mergeAndKeep(ctx context.Context, name string, data, base []byte, what string) {
	kept := s.keep(name, what+"; the lines it added are put back into the live file")
	s.w.addRisk(ctx, s.rec.Root, s.rec.Target, risk{Record: s.rec.ID, Blocks: Added(base, data), Always: true,
		Until: s.w.Now().Add(riskAlways), Kept: kept})
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

// dropOurs removes the temp name while it still is our temp file.
func (s *swapper) dropOurs() {
	st, err := s.dir.Lstat(s.tmp)
	if err != nil || uint64(st.Ino) != s.oursIno || uint64(st.Dev) != s.oursDev {
		return
	}
	_ = s.dir.Unlink(s.tmp)
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

// readAt opens and reads what is at name now.
func (s *swapper) readAt(name string) (*file, error) {
	f, err := s.dir.Open(name, os.O_RDONLY)
	if err != nil {
		return nil, err
	}
	return s.read(f)
}

func (s *swapper) read(f *os.File) (*file, error) {
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, err
	}
	x := &file{f: f}
	x.dev, x.ino = inode(fi)
	x.size, x.mtime = fi.Size(), fi.ModTime()
	if limit := s.dir.Root().MaxFileSize(); fi.Size() > limit {
		f.Close()
		return nil, fmt.Errorf("%w (%d bytes, limit %d)", confine.ErrTooLarge, fi.Size(), limit)
	}
	buf := make([]byte, fi.Size())
	n, err := f.ReadAt(buf, 0)
	if err != nil && n < len(buf) {
		f.Close()
		return nil, err
	}
	x.data = buf[:n]
	return x, nil
}

// settle opens what is at name and waits until it has not changed for
// Settle (at most MaxSettle), then reads it. Only where the kernel has no
// leases to say whether a writer holds a file.
func (s *swapper) settle(ctx context.Context, name string) (*file, bool, error) {
	f, err := s.dir.Open(name, os.O_RDONLY)
	if err != nil {
		return nil, false, err
	}
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
	x, err := s.read(f)
	return x, quiet, err
}

// unlinkVerified removes name if it still is x's inode with x's content;
// otherwise what is there is kept.
func (s *swapper) unlinkVerified(name string, x *file) {
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
	return appendTo(s.dir, s.name, b)
}

// keep moves the file at name (in the target's directory) into the
// archive directory, never deleting it, journals where it went and
// returns that path. Every call keeps: a keep that fails is an error in
// the log and the journal, and the file stays where it is.
func (s *swapper) keep(name, why string) string {
	return s.w.keepJournaled(s.dir, name, s.rec, why)
}

// keepJournaled is keep for any directory of a rewrite.
func (w *Rewriter) keepJournaled(dir *confine.Dir, name string, rec *state.Record, why string) string {
	kr := &state.Record{Store: rec.Store, Root: rec.Root, Rule: RuleKept, Target: rec.Target, Outcome: state.Done, Reason: why}
	if data, _, err := dir.ReadFile(name); err == nil {
		kr.BeforeSHA, kr.BeforeSize = Hash(data), int64(len(data))
	}
	rel, err := keepFile(w, dir, name, rec)
	if err != nil {
		w.Log.Error("could not move a file memwatch must keep; it stays where it is", "root", rec.Root, "path", dir.Rel(name), "why", why, "err", err)
		kr.Outcome, kr.Archive = state.Failed, dir.Rel(name)
		kr.Reason = fmt.Sprintf("%s; could not be moved into the archive directory (%v), so it stays at %s", why, err, dir.Rel(name))
	} else {
		kr.Archive = rel
		w.Log.Warn("kept a copy found during a rewrite", "root", rec.Root, "path", rec.Target, "kept", rel, "why", why)
	}
	if err := w.journal(context.Background(), kr, true); err != nil {
		w.Log.Error("journal a kept file", "err", err, "kept", kr.Archive)
	}
	return kr.Archive
}

// RuleKept journals a file memwatch found and moved into the archive
// directory instead of deleting it (memwatch log --kept lists them).
const RuleKept = control.RuleKept

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
// is put an agent's version back atomically: that version is merged into
// the live file instead (its additions), and an agent rename in the
// instant between the link and the rename replaces a file that has no
// second name.
func (s *swapper) renameSwap(ctx context.Context) ([]byte, error) {
	hold, err := s.freeName("d")
	if err != nil {
		s.dropOurs()
		return nil, err
	}
	if err := s.dir.Link(s.name, s.dir, hold); err != nil {
		s.dropOurs()
		return nil, fmt.Errorf("swap %s: %w", s.rec.Target, err)
	}
	if err := s.dir.Replace(s.tmp, s.name); err != nil {
		_ = s.dir.Unlink(hold)
		s.dropOurs()
		return nil, fmt.Errorf("rename into %s: %w", s.rec.Target, err)
	}
	x, _, err := s.settle(ctx, hold)
	if err != nil {
		return s.newData, nil
	}
	defer x.close()
	switch {
	case bytes.Equal(x.data, s.snap.data):
		s.unlinkVerified(hold, x)
		return s.newData, s.dir.Sync()
	case bytes.HasPrefix(x.data, s.snap.data):
		tail := x.data[len(s.snap.data):]
		if err := s.appendToTarget(tail); err == nil {
			s.keep(hold, "the pre-image of "+s.rec.Target+" with bytes an agent wrote during the swap (also appended to it)")
			return append(append([]byte{}, s.newData...), tail...), s.dir.Sync()
		}
	}
	s.mergeAndKeep(ctx, hold, x.data, s.snap.data, "an agent wrote "+s.rec.Target+" during the swap; its version")
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
