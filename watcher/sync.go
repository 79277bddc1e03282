package watcher

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"time"
)

// Sync lets a search trust what it listed of a root before, unlisted, as
// long as nothing happened there since: the watcher sees every change
// agents make under watched roots, but a change reaches it through the
// kernel's queue, a moment after the write returned. Sync writes a marker
// into SyncDir, watched by the same inotify instance, whose queue is in
// order: once the loop meets the marker it has taken in every change made
// before Sync was called, and Marks says what it had seen of each root.

// Marks is what the watcher had seen of each root when a Sync came
// through.
type Marks struct {
	changed map[string]uint64 // root -> rootState.changed; nil: trust nothing
}

// Changed returns a number that moves whenever something changes under
// root (a file written, created, removed, renamed, its mode or owner
// changed; the root rescanned), and false for a root whose changes the
// watcher may not see (polled, a file root, no root of its own): list it.
func (m Marks) Changed(root string) (uint64, bool) {
	n, ok := m.changed[root]
	return n, ok
}

// syncWait bounds how long a Sync waits for its marker (a queue that
// overflowed lost it; the loop busy walking a large new tree): a search
// that gets no marks lists every root, as it would without them.
const syncWait = 250 * time.Millisecond

var (
	errNoSync   = errors.New("watcher: no sync directory is watched")
	errNotReady = errors.New("watcher: not ready")
)

// Sync waits until every change made under the roots before it was called
// has come through, and returns what the watcher saw.
func (w *Watcher) Sync(ctx context.Context) (Marks, error) {
	// Before the first scan is done (a tree of a million files takes a
	// while) there is nothing to trust, and a search does not wait.
	select {
	case <-w.ready:
	default:
		return Marks{}, errNotReady
	}
	if !w.syncOK.Load() {
		return Marks{}, errNoSync
	}
	name, reused := w.takeSlot()
	ch := make(chan Marks, 1)
	w.syncMu.Lock()
	w.syncs[name] = ch
	w.syncMu.Unlock()
	p := filepath.Join(w.cfg.SyncDir, name)
	keep := false // the slot goes back to the pool
	defer func() {
		w.syncMu.Lock()
		delete(w.syncs, name)
		if keep {
			w.syncFree = append(w.syncFree, name)
		}
		w.syncMu.Unlock()
		if !keep {
			os.Remove(p)
		}
	}()
	if reused {
		now := time.Now()
		if err := os.Chtimes(p, now, now); err != nil {
			return Marks{}, err
		}
	} else {
		f, err := os.OpenFile(p, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
		if err != nil {
			return Marks{}, err
		}
		f.Close()
	}
	t := time.NewTimer(syncWait)
	defer t.Stop()
	select {
	case m := <-ch:
		keep = m.changed != nil // not the answer to an overflow
		return m, nil
	case <-ctx.Done():
		return Marks{}, ctx.Err()
	case <-w.done:
		return Marks{}, errors.New("watcher stopped")
	case <-t.C:
		return Marks{}, errors.New("watcher: sync marker not seen in time")
	}
}

// takeSlot returns a marker for a Sync: a file of SyncDir a Sync made
// before (reused: touched, its times set, for an attribute event), else a
// new name (the file is made, for a create event). Making and removing a
// file at each search cost three system calls, and on ext4 after many
// deletions up to a millisecond of the kernel's to find an inode. A slot
// goes back to the pool only once its event came through: one event a
// touch, read before the slot is touched again, so none is merged with a
// later one or left over. A slot whose Sync timed out, was cancelled or
// was answered by an overflow is removed and its name never used again:
// a late event of it wakes nobody.
func (w *Watcher) takeSlot() (name string, reused bool) {
	w.syncMu.Lock()
	defer w.syncMu.Unlock()
	if n := len(w.syncFree); n > 0 {
		name = w.syncFree[n-1]
		w.syncFree = w.syncFree[:n-1]
		return name, true
	}
	return strconv.FormatUint(w.syncN.Add(1), 10), false
}

// watchSyncDir empties SyncDir (markers a stopped daemon left) and
// watches it; on the loop, before ready.
func (w *Watcher) watchSyncDir() {
	dir := w.cfg.SyncDir
	if dir == "" {
		return
	}
	os.RemoveAll(dir)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		w.log.Warn("cannot make the watcher's sync directory; searches list every root", "dir", dir, "err", err)
		return
	}
	if err := w.add(dir); err != nil {
		w.log.Warn("cannot watch the watcher's sync directory; searches list every root", "dir", dir, "err", err)
		return
	}
	w.syncOK.Store(true)
}

// synced answers the Sync whose marker the loop met.
func (w *Watcher) synced(name string) {
	w.syncMu.Lock()
	ch, ok := w.syncs[name]
	delete(w.syncs, name)
	w.syncMu.Unlock()
	if !ok {
		return
	}
	m := Marks{changed: make(map[string]uint64, len(w.roots))}
	for root, st := range w.roots {
		if s := w.stores[st.store]; s != nil && !s.FileRoots && !st.polled {
			m.changed[root] = st.changed
		}
	}
	ch <- m
}
