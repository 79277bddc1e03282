// Package watcher notices every change agents make under the store roots,
// with no help from the agents: recursive fsnotify watches on directories
// (so write-to-temp-and-rename saves are seen), roots discovered from globs
// as they appear, changes coalesced per path until they settle, a rescan after
// a kernel queue overflow and polling where inotify watches ran out.
package watcher

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/fsnotify/fsnotify"

	"github.com/memwatch/memwatch/confine"
	"github.com/memwatch/memwatch/control"
	"github.com/memwatch/memwatch/jobs"
	"github.com/memwatch/memwatch/policy"
)

// Store is what the watcher needs to know of a store.
type Store struct {
	Name   string
	Globs  []string
	Settle time.Duration
	// FileRoots is true when each root is a file (a database) rather than a directory.
	FileRoots bool
	// Owner, when set, is who the watcher walks and watches the roots as
	// (a store's user:); nil: each root directory's owner.
	Owner *confine.Identity
	// MaxWatches bounds the inotify watches of the store's roots; 0 means
	// AutoMaxWatches. A root that would go past it is polled instead,
	// so one agent's tree cannot take the host's watches.
	MaxWatches int
}

// MinMaxWatches is the least watch bound AutoMaxWatches gives.
const MinMaxWatches = 8192

// Change is handed on when changes under a root have settled.
type Change struct {
	Store  string
	Root   string
	Paths  []string    // settled paths; empty for a whole-root scan
	Reason jobs.Reason // change, scan, new-root, rescan, many changes, poll
}

// Config configures a Watcher.
type Config struct {
	Stores []Store
	Handle func(Change) // called from the watcher goroutine; must not block for long
	// Refuse is told, once per path and reason, of a glob match that is not
	// used as a root (a symlink, or a path resolving outside the glob's
	// directory); called from the watcher goroutine.
	Refuse func(store, path string, err error)
	// Touched is told of every change under a root as it happens, before
	// any settling (session logs are captured at once); called from the
	// watcher goroutine, it must not block.
	Touched      func(store, root, path string)
	PollInterval time.Duration
	// MaxWaitFactor bounds the wait under constant writes to factor x settle.
	MaxWaitFactor int
	// BufferedEvents sizes fsnotify's event channel.
	BufferedEvents uint
	// SyncDir, when set, is a directory of memwatch's own (not under any
	// root) where Sync writes its markers; the watcher empties and
	// watches it.
	SyncDir string
}

// IgnoreDir is memwatch's own directory inside roots (default archives); its
// changes are not agent changes.
const IgnoreDir = ".memwatch"

// Watcher watches the roots of every store.
type Watcher struct {
	cfg   Config
	log   *slog.Logger
	fsw   *fsnotify.Watcher
	msgs  chan func()
	ready chan struct{}
	done  chan struct{}

	// Owned by the Run goroutine.
	stores   map[string]*Store
	roots    map[string]*rootState // root path -> state
	watched  map[string]string     // watched directory -> root ("" for glob ancestors)
	ancestor map[string][]string   // glob-ancestor directory -> store names
	pending  map[string]*pend
	whole    map[string]*pend  // roots flooded past maxPending, by root
	armed    time.Time         // when the timer fires (zero: stopped)
	refused  map[string]string // store NUL refused path -> reason, reported once
	timer    *time.Timer
	enospc   bool
	count    map[string]int  // store -> watches of its roots
	capped   map[string]bool // stores whose bound was reported
	// defaultWatches is the bound of stores that set none (AutoMaxWatches).
	defaultWatches int
	paused         chan struct{} // tests only: the loop waits on it
	// add is fsw.Add; tests replace it to simulate running out of watches.
	add func(string) error
	// walks are the walks of polled roots under way (walkPolled): off the
	// loop, so a root of tens of thousands of directories does not hold up
	// every other root's events; Run waits for them before it returns.
	walks sync.WaitGroup
	// seq numbers what the loop sees happen under roots (rootState.changed);
	// the loop's.
	seq uint64
	// syncs are the Sync calls waiting for their marker, by its name;
	// syncOK says SyncDir is watched.
	syncMu   sync.Mutex
	syncs    map[string]chan Marks
	syncFree []string // markers whose last event came through (takeSlot)
	syncN    atomic.Uint64
	syncOK   atomic.Bool
}

type rootState struct {
	store   string
	id      confine.ID // the directory discovery found (see confine.GlobRoots)
	polled  bool
	snap    map[string]fileSig // poll fallback only
	walking bool               // a walk of it is under way
	// changed is the seq of the last event seen under the root (or of its
	// becoming a root, or of a rescan): what Sync's Marks say of it.
	changed uint64
}

type fileSig struct {
	size  int64
	mtime int64
}

type pend struct {
	root        string
	first, last time.Time
}

// New creates a watcher; Run starts it.
func New(cfg Config, log *slog.Logger) (*Watcher, error) {
	if cfg.PollInterval <= 0 {
		cfg.PollInterval = 30 * time.Second
	}
	if cfg.MaxWaitFactor <= 0 {
		cfg.MaxWaitFactor = 10
	}
	if cfg.BufferedEvents == 0 {
		cfg.BufferedEvents = 4096
	}
	fsw, err := fsnotify.NewBufferedWatcher(cfg.BufferedEvents)
	if err != nil {
		return nil, fmt.Errorf("create watcher: %w", err)
	}
	w := &Watcher{cfg: cfg, log: log, fsw: fsw, msgs: make(chan func(), 16), ready: make(chan struct{}), done: make(chan struct{}),
		stores: map[string]*Store{}, roots: map[string]*rootState{}, watched: map[string]string{}, ancestor: map[string][]string{},
		pending: map[string]*pend{}, whole: map[string]*pend{}, refused: map[string]string{}, count: map[string]int{}, capped: map[string]bool{}, defaultWatches: AutoMaxWatches(),
		syncs: map[string]chan Marks{}}
	w.add = fsw.Add
	for i := range cfg.Stores {
		s := cfg.Stores[i]
		w.stores[s.Name] = &s
	}
	return w, nil
}

// Ready is closed when every root has been scanned once and is watched.
func (w *Watcher) Ready() <-chan struct{} { return w.ready }

// Counts is what the watcher watches (the status answer's type).
type Counts = control.WatchCounts

// do runs f on the Run goroutine and waits for it.
func (w *Watcher) do(ctx context.Context, f func()) error {
	ch := make(chan struct{})
	select {
	case w.msgs <- func() { f(); close(ch) }:
	case <-w.done:
		return errors.New("watcher stopped")
	case <-ctx.Done():
		return ctx.Err()
	}
	// Once handed over, f runs soon and writes the caller's variables: wait
	// for it (or for the loop to end) rather than for ctx, or the caller
	// could read them while f writes.
	select {
	case <-ch:
		return nil
	case <-w.done:
		return errors.New("watcher stopped")
	}
}

// Counts returns the current counts.
func (w *Watcher) Counts(ctx context.Context) (Counts, error) {
	var c Counts
	err := w.do(ctx, func() {
		c = Counts{Stores: len(w.stores), Roots: len(w.roots), Watches: len(w.watched)}
		for _, r := range w.roots {
			if r.polled {
				c.Polled++
			}
		}
	})
	return c, err
}

// Roots returns the current roots of each store.
func (w *Watcher) Roots(ctx context.Context) (map[string][]string, error) {
	out := map[string][]string{}
	err := w.do(ctx, func() {
		for r, st := range w.roots {
			out[st.store] = append(out[st.store], r)
		}
		for _, rs := range out {
			sort.Strings(rs)
		}
	})
	return out, err
}

// RootIDs returns the current roots of each store with the identity
// discovery found (confine.GlobRoots), sorted by path.
func (w *Watcher) RootIDs(ctx context.Context) (map[string][]confine.ID, error) {
	out := map[string][]confine.ID{}
	err := w.do(ctx, func() {
		for _, st := range w.roots {
			out[st.store] = append(out[st.store], st.id)
		}
		for _, ids := range out {
			sort.Slice(ids, func(i, j int) bool { return ids[i].Path < ids[j].Path })
		}
	})
	return out, err
}

// SetStores replaces the stores (policy reload). Roots of stores whose globs
// did not change are kept as they are; new roots are scanned.
func (w *Watcher) SetStores(ctx context.Context, stores []Store) error {
	return w.do(ctx, func() {
		next := map[string]*Store{}
		for i := range stores {
			s := stores[i]
			next[s.Name] = &s
		}
		for name, old := range w.stores {
			if n, ok := next[name]; !ok || !sameGlobs(old, n) {
				for r, st := range w.roots {
					if st.store == name {
						w.dropRoot(r)
					}
				}
			}
		}
		w.stores = next
		w.ancestor = map[string][]string{}
		for _, s := range w.stores {
			w.discover(s, jobs.ReasonScan)
		}
	})
}

func sameGlobs(a, b *Store) bool {
	return strings.Join(a.Globs, "\x00") == strings.Join(b.Globs, "\x00") && a.FileRoots == b.FileRoots
}

// Run watches until ctx ends, then closes the fsnotify watcher.
func (w *Watcher) Run(ctx context.Context) error {
	defer w.walks.Wait() // after done is closed: a walk stops at its next entry
	defer close(w.done)
	defer w.fsw.Close()
	w.timer = time.NewTimer(time.Hour)
	w.timer.Stop()
	for _, s := range w.stores {
		w.discover(s, jobs.ReasonScan)
	}
	w.watchSyncDir()
	close(w.ready)
	poll := time.NewTicker(w.cfg.PollInterval)
	defer poll.Stop()
	for {
		if w.paused != nil {
			select {
			case <-w.paused:
				w.paused = nil
			case <-ctx.Done():
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return nil
		case f := <-w.msgs:
			f()
		case ev, ok := <-w.fsw.Events:
			if !ok {
				return errors.New("fsnotify closed its event channel")
			}
			w.event(ev)
		case err, ok := <-w.fsw.Errors:
			if !ok {
				return errors.New("fsnotify closed its error channel")
			}
			w.watchError(err)
		case <-w.timer.C:
			w.flush(time.Now())
		case <-poll.C:
			w.pollRoots()
		}
	}
}

// globParts splits a glob into its static directory prefix and its parts.
func globParts(g string) (static string, parts []string) {
	return policy.StaticDir(g), strings.Split(filepath.Clean(g), string(filepath.Separator))
}

// discover globs a store's roots, adds new ones, drops vanished ones and
// watches the directories between the static prefix and the roots, so new
// roots are noticed without a restart.
func (w *Watcher) discover(s *Store, reason jobs.Reason) {
	found := map[string]confine.ID{}
	refusedNow := map[string]bool{}
	for _, g := range s.Globs {
		static, parts := globParts(g)
		// Watch the deepest existing ancestor of the static prefix, then each
		// level of partial matches below it.
		anc := static
		for {
			if fi, err := os.Stat(anc); err == nil && fi.IsDir() {
				break
			}
			parent := filepath.Dir(anc)
			if parent == anc {
				break
			}
			anc = parent
		}
		w.watchAncestor(anc, s.Name, true)
		nStatic := len(strings.Split(strings.Trim(static, string(filepath.Separator)), string(filepath.Separator)))
		for k := nStatic + 1; k < len(parts); k++ {
			// The levels between the glob's fixed part and its roots, as
			// discovery reaches them: real directories, never where a
			// symbolic link leads.
			prefix := string(filepath.Separator) + filepath.Join(parts[:k]...)
			ms, _ := confine.GlobRoots(prefix, false)
			for _, m := range ms {
				w.watchAncestor(m.Path, s.Name, false)
			}
		}
		ms, refused := confine.GlobRoots(g, s.FileRoots)
		for _, rf := range refused {
			refusedNow[rf.Path] = true
			w.refuse(s.Name, rf.Path, fmt.Errorf("%s: %w", rf.Path, rf.Err))
		}
		for _, m := range ms {
			if s.Owner != nil {
				m.UID = s.Owner.UID // the user memwatch acts as there
			}
			found[m.Path] = m
		}
	}
	for key := range w.refused {
		if store, path, _ := strings.Cut(key, "\x00"); store == s.Name && !refusedNow[path] {
			delete(w.refused, key) // not there any more: said again if it comes back
		}
	}
	for r, st := range w.roots {
		if st.store != s.Name {
			continue
		}
		id, ok := found[r]
		switch {
		case !ok:
			w.log.Info("root removed", "store", s.Name, "root", r)
			w.dropRoot(r)
		case !id.SameDir(st.id):
			// Another directory took the path: a new root, which gets
			// nothing memwatch captured from the old one.
			w.log.Info("root replaced by another directory; it is a new root", "store", s.Name, "root", r,
				"was", fmt.Sprintf("%d:%d", st.id.Dev, st.id.Ino), "now", fmt.Sprintf("%d:%d", id.Dev, id.Ino))
			w.dropRoot(r)
		}
	}
	for r, id := range found {
		if st, ok := w.roots[r]; ok {
			if st.store != s.Name {
				w.log.Warn("root matches two stores; keeping the first", "root", r, "store", st.store, "ignored_store", s.Name)
			}
			continue
		}
		w.addRoot(s, id, reason)
	}
}

// refuse reports a refused root once per reason.
func (w *Watcher) refuse(store, path string, err error) {
	key := store + "\x00" + path
	if w.refused[key] == err.Error() {
		return
	}
	w.refused[key] = err.Error()
	if w.cfg.Refuse != nil {
		w.cfg.Refuse(store, path, err)
	} else {
		w.log.Warn("store root refused", "store", store, "root", path, "err", err)
	}
}

// watchAncestor watches a directory above roots. The static directory of a
// glob is the administrator's (trusted, symlinks followed); the levels
// below it may be agents' and are watched only as real directories.
func (w *Watcher) watchAncestor(dir, store string, trusted bool) {
	for _, n := range w.ancestor[dir] {
		if n == store {
			return
		}
	}
	w.ancestor[dir] = append(w.ancestor[dir], store)
	if _, ok := w.watched[dir]; !ok {
		add := w.addDir
		if trusted {
			add = w.add
		}
		if err := add(dir); err != nil {
			w.addFailed(dir, err)
			return
		}
		w.setWatched(dir, "")
	}
}

// errSwapped means a directory became something else (a symlink) while a
// watch was added: the watch is dropped, so memwatch never watches where a
// symlink leads.
var errSwapped = errors.New("directory replaced while being watched")

// addDir watches the directory p itself, never what a symlink there leads
// to: inotify follows symlinks, so p is checked before and after.
func (w *Watcher) addDir(p string) error {
	if fi, err := os.Lstat(p); err != nil {
		return err
	} else if !fi.IsDir() {
		return errSwapped
	}
	if err := w.add(p); err != nil {
		return err
	}
	if fi, err := os.Lstat(p); err != nil || !fi.IsDir() {
		_ = w.fsw.Remove(p)
		return errSwapped
	}
	return nil
}

// setWatched records a watch of dir for root ("" for a glob ancestor).
func (w *Watcher) setWatched(dir, root string) {
	w.watched[dir] = root
	if st, ok := w.roots[root]; ok {
		w.count[st.store]++
	}
}

// unwatch removes the watch of dir.
func (w *Watcher) unwatch(dir string) {
	root, ok := w.watched[dir]
	if !ok {
		return
	}
	_ = w.fsw.Remove(dir)
	delete(w.watched, dir)
	if st, ok := w.roots[root]; ok {
		w.count[st.store]--
	}
}

// fellBack logs a root polled instead of watched: a warning of its own,
// unless the store's watch bound is the cause (said once, for them all).
func (w *Watcher) fellBack(store, root string) {
	if w.capped[store] {
		w.log.Debug("root falls back to polling: the store is at max_watches", "store", store, "root", root, "interval", w.cfg.PollInterval)
		return
	}
	w.log.Warn("root falls back to polling", "store", store, "root", root, "interval", w.cfg.PollInterval)
}

// maxWatches is a store's watch bound.
func (w *Watcher) maxWatches(store string) int {
	if s, ok := w.stores[store]; ok && s.MaxWatches > 0 {
		return s.MaxWatches
	}
	return w.defaultWatches
}

// AutoMaxWatches is the watch bound of a store whose policy sets none: a
// quarter of the watches the kernel allows each user
// (fs.inotify.max_user_watches), so one store cannot take them all, and
// at least MinMaxWatches.
func AutoMaxWatches() int {
	b, err := os.ReadFile("/proc/sys/fs/inotify/max_user_watches")
	if err != nil {
		return MinMaxWatches
	}
	n, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		return MinMaxWatches
	}
	return max(MinMaxWatches, n/4)
}

// poll makes root polled, without watches of its own: it could not be
// watched whole (no watches left, or the store's bound).
func (w *Watcher) poll(root string, st *rootState) {
	for d, r := range w.watched {
		if r == root {
			w.unwatch(d)
		}
	}
	st.polled = true
	// The first walk is taken here, on the loop, once per root: what
	// changes after it is noticed at the next poll. The poll's own walks,
	// every PollInterval, go off the loop (walkPolled).
	var owner *confine.Identity
	if s, ok := w.stores[st.store]; ok {
		owner = s.Owner
	}
	st.snap = snapshotTree(root, owner, w.done)
}

// walkPolled walks a polled root's tree on a goroutine of its own and
// hands the snapshot to done on the loop, unless the root was removed
// or replaced meanwhile. One walk of a root at a time.
func (w *Watcher) walkPolled(root string, st *rootState, done func(map[string]fileSig)) {
	if st.walking {
		return
	}
	st.walking = true
	var owner *confine.Identity
	if s, ok := w.stores[st.store]; ok {
		owner = s.Owner
	}
	w.walks.Add(1)
	go func() {
		defer w.walks.Done()
		cur := snapshotTree(root, owner, w.done)
		select {
		case w.msgs <- func() {
			st.walking = false
			if w.roots[root] == st && st.polled {
				done(cur)
			}
		}:
		case <-w.done:
		}
	}()
}

func (w *Watcher) addRoot(s *Store, id confine.ID, reason jobs.Reason) {
	root := id.Path
	w.seq++ // a root that comes back is not the one a search listed
	st := &rootState{store: s.Name, id: id, changed: w.seq}
	w.roots[root] = st
	if s.FileRoots {
		dir := filepath.Dir(root)
		if _, ok := w.watched[dir]; !ok {
			if err := w.addDir(dir); err != nil {
				w.addFailed(dir, err)
				st.polled = true
			} else {
				w.setWatched(dir, root)
			}
		}
	} else if !w.watchTree(root, root, nil) {
		w.poll(root, st)
		w.fellBack(s.Name, root)
	}
	if reason == jobs.ReasonScan {
		w.log.Debug("root added", "store", s.Name, "root", root)
	} else {
		w.log.Info("new root", "store", s.Name, "root", root)
	}
	w.emit(Change{Store: s.Name, Root: root, Reason: reason})
}

func (w *Watcher) dropRoot(root string) {
	for d, r := range w.watched {
		if r == root {
			w.unwatch(d)
		}
	}
	delete(w.roots, root)
	delete(w.whole, root)
	for p, pd := range w.pending {
		if pd.root == root {
			delete(w.pending, p)
		}
	}
}

// watchTree adds watches for dir and every directory below it; found files
// are appended to files when it is not nil. It returns false if a watch
// could not be added, or the store's bound would be passed (the root then
// needs polling). It walks as the root's owner: a directory the owner
// cannot search is not watched, nor anything below it.
func (w *Watcher) watchTree(root, dir string, files *[]string) bool {
	ok := true
	st := w.roots[root]
	var owner *confine.Identity
	if st != nil {
		owner = w.stores[st.store].Owner
	}
	err := confine.AsOwnerOf(root, owner, func() error {
		return walk(dir, func(p string, d fs.DirEntry, err error) error {
			if err != nil {
				if d != nil && d.IsDir() && p != dir {
					return filepath.SkipDir // vanished meanwhile, or not the owner's to search
				}
				return nil
			}
			if !d.IsDir() {
				if files != nil && !ignored(root, p) {
					*files = append(*files, p)
				}
				return nil
			}
			if p != root && d.Name() == IgnoreDir {
				return filepath.SkipDir
			}
			if _, seen := w.watched[p]; seen {
				return nil
			}
			if st != nil && w.count[st.store] >= w.maxWatches(st.store) {
				if !w.capped[st.store] {
					w.capped[st.store] = true
					w.log.Warn("store reached its bound of inotify watches (max_watches); roots beyond it are polled instead", "store", st.store,
						"max_watches", w.maxWatches(st.store), "root", root, "poll_interval", w.cfg.PollInterval)
				}
				ok = false
				return filepath.SkipAll
			}
			if err := w.addDir(p); err != nil {
				switch {
				case errors.Is(err, fs.ErrNotExist), errors.Is(err, errSwapped):
				case errors.Is(err, fs.ErrPermission):
					return filepath.SkipDir // the owner may not read it: neither does memwatch
				default:
					w.addFailed(p, err)
					ok = false
					return filepath.SkipAll
				}
				return nil
			}
			w.setWatched(p, root)
			return nil
		})
	})
	return ok && err == nil
}

func (w *Watcher) addFailed(dir string, err error) {
	if errors.Is(err, syscall.ENOSPC) {
		if !w.enospc {
			w.enospc = true
			w.log.Error("inotify watch limit reached; affected roots are polled instead. Raise it with: sysctl -w fs.inotify.max_user_watches=524288 (and persist it in /etc/sysctl.d/)", "dir", dir, "poll_interval", w.cfg.PollInterval)
		}
		return
	}
	w.log.Warn("cannot watch directory", "dir", dir, "err", err)
}

func ignored(root, p string) bool {
	if strings.Contains(filepath.Base(p), ".memwatch-tmp-") {
		return true
	}
	rel, err := filepath.Rel(root, p)
	return err == nil && (rel == IgnoreDir || strings.HasPrefix(rel, IgnoreDir+string(filepath.Separator)))
}

// rootOf finds the root containing p.
func (w *Watcher) rootOf(p string) (string, *rootState) {
	for q := p; ; {
		if st, ok := w.roots[q]; ok {
			return q, st
		}
		parent := filepath.Dir(q)
		if parent == q {
			return "", nil
		}
		q = parent
	}
}

func (w *Watcher) event(ev fsnotify.Event) {
	p := filepath.Clean(ev.Name)
	if w.cfg.SyncDir != "" && filepath.Dir(p) == w.cfg.SyncDir {
		if ev.Has(fsnotify.Create) || ev.Has(fsnotify.Chmod) { // made, or touched (takeSlot)
			w.synced(filepath.Base(p))
		}
		return
	}
	// Whatever it is (an attribute too: who may read a file), the root
	// changed: a search does not trust what it listed there before
	// (rootState.changed, set below once the root is known).
	w.seq++
	if ev.Op == fsnotify.Chmod || strings.HasSuffix(p, "-shm") {
		// Neither changes what a file holds. SQLite, opening a database
		// as root (memwatch reading an agent's), gives its -wal and -shm
		// the database's owner (an attribute event each time), and every
		// reader of a WAL database writes its -shm: taken for changes,
		// each read would cause the next, for ever.
		if _, st := w.rootOf(p); st != nil {
			st.changed = w.seq
		}
		return
	}
	dir := filepath.Dir(p)
	// A change in a glob-ancestor directory may add or remove roots.
	for _, d := range []string{dir, p} {
		for _, name := range w.ancestor[d] {
			if s, ok := w.stores[name]; ok && !ev.Has(fsnotify.Write) && !ev.Has(fsnotify.Chmod) {
				w.discover(s, jobs.ReasonNewRoot)
			}
		}
	}
	if ev.Has(fsnotify.Remove) || ev.Has(fsnotify.Rename) {
		if _, ok := w.watched[p]; ok {
			for d := range w.watched {
				if d == p || strings.HasPrefix(d, p+string(filepath.Separator)) {
					w.unwatch(d)
				}
			}
		}
	}
	root, st := w.rootOf(p)
	if st == nil {
		// A file root's events arrive for its directory's other files too.
		for _, suffix := range []string{"-wal", "-journal"} {
			if r, ok := w.roots[strings.TrimSuffix(p, suffix)]; ok && strings.HasSuffix(p, suffix) {
				w.touch(strings.TrimSuffix(p, suffix), r, strings.TrimSuffix(p, suffix))
			}
		}
		return
	}
	st.changed = w.seq // memwatch's own files too: archives are searched
	if ignored(root, p) {
		return
	}
	if ev.Has(fsnotify.Create) && !w.stores[st.store].FileRoots && !st.polled {
		if fi, err := os.Lstat(p); err == nil && fi.IsDir() {
			// Files can land before the watch exists: scan the new tree now.
			var files []string
			if !w.watchTree(root, p, &files) {
				w.poll(root, st)
				w.fellBack(st.store, root)
			}
			for _, f := range files {
				w.touch(root, st, f)
			}
		}
	}
	w.touch(root, st, p)
}

func (w *Watcher) touch(root string, st *rootState, p string) {
	if w.cfg.Touched != nil {
		w.cfg.Touched(st.store, root, p)
	}
	now := time.Now()
	pd, ok := w.pending[p]
	switch {
	case ok:
		pd.last = now
	case len(w.pending) >= maxPending:
		// A flood (an agent deleting a million files): past the bound the
		// root is handed on whole once it settles, not path by path.
		if pd, ok = w.whole[root]; ok {
			pd.last = now
		} else {
			if len(w.whole) == 0 {
				w.log.Info("more changes at once than memwatch follows one by one; the roots past the bound are looked at whole once they settle", "max", maxPending)
			}
			pd = &pend{root: root, first: now, last: now}
			w.whole[root] = pd
		}
	default:
		pd = &pend{root: root, first: now, last: now}
		w.pending[p] = pd
	}
	// The timer is for the earliest deadline: a new one earlier than the
	// one armed moves it; a later one waits for it (flush looks again).
	if d := w.deadline(pd); w.armed.IsZero() || d.Before(w.armed) {
		w.timer.Stop()
		w.timer.Reset(max(d.Sub(now), 0))
		w.armed = d
	}
}

// maxPending bounds the paths followed one by one until they settle.
const maxPending = 100_000

// arm sets the timer to the earliest deadline among pending paths.
func (w *Watcher) arm(now time.Time) {
	var next time.Time
	for _, m := range []map[string]*pend{w.pending, w.whole} {
		for _, pd := range m {
			d := w.deadline(pd)
			if next.IsZero() || d.Before(next) {
				next = d
			}
		}
	}
	w.armed = next
	if next.IsZero() {
		return
	}
	w.timer.Stop()
	w.timer.Reset(max(next.Sub(now), 0))
}

func (w *Watcher) deadline(pd *pend) time.Time {
	settle := 500 * time.Millisecond
	if st, ok := w.roots[pd.root]; ok {
		if s, ok := w.stores[st.store]; ok {
			settle = s.Settle
		}
	}
	quiet := pd.last.Add(settle)
	maxWait := pd.first.Add(time.Duration(w.cfg.MaxWaitFactor) * settle)
	if maxWait.Before(quiet) {
		return maxWait
	}
	return quiet
}

// flush hands on every path whose deadline passed, grouped by root.
func (w *Watcher) flush(now time.Time) {
	byRoot := map[string][]string{}
	for p, pd := range w.pending {
		if !w.deadline(pd).After(now) {
			byRoot[pd.root] = append(byRoot[pd.root], p)
			delete(w.pending, p)
		}
	}
	for root, paths := range byRoot {
		st, ok := w.roots[root]
		if !ok {
			continue
		}
		sort.Strings(paths)
		w.emit(Change{Store: st.store, Root: root, Paths: paths, Reason: jobs.ReasonChange})
	}
	for root, pd := range w.whole {
		if !w.deadline(pd).After(now) {
			delete(w.whole, root)
			if st, ok := w.roots[root]; ok {
				w.emit(Change{Store: st.store, Root: root, Reason: jobs.ReasonMany})
			}
		}
	}
	w.arm(now)
}

func (w *Watcher) emit(c Change) {
	if w.cfg.Handle != nil {
		w.cfg.Handle(c)
	}
}

func (w *Watcher) watchError(err error) {
	if errors.Is(err, fsnotify.ErrEventOverflow) {
		w.log.Warn("kernel event queue overflowed; rescanning every root. Raise it with: sysctl -w fs.inotify.max_queued_events=65536", "roots", len(w.roots))
		w.rescan()
		// Events were lost, Sync's markers among them: what a waiting
		// Sync would be told is not known.
		w.syncMu.Lock()
		for name, ch := range w.syncs {
			ch <- Marks{}
			delete(w.syncs, name)
		}
		w.syncMu.Unlock()
		return
	}
	w.log.Warn("watch error", "err", err)
}

// rescan re-walks every root (adding watches that are missing) and hands on
// a whole-root change, so nothing lost in an overflow goes unnoticed.
func (w *Watcher) rescan() {
	for _, s := range w.stores {
		w.discover(s, jobs.ReasonNewRoot)
	}
	for root, st := range w.roots {
		w.seq++
		st.changed = w.seq
		if !w.stores[st.store].FileRoots && !st.polled {
			// Drop watches of directories that are gone, then add new ones.
			for d, r := range w.watched {
				if r == root {
					if _, err := os.Stat(d); err != nil {
						w.unwatch(d)
					}
				}
			}
			if !w.watchTree(root, root, nil) {
				w.poll(root, st)
			}
		}
		w.emit(Change{Store: st.store, Root: root, Reason: jobs.ReasonRescan})
	}
}

// snapshotTree lists a polled root's files, walked as its owner; it
// stops early once stop is closed.
func snapshotTree(root string, owner *confine.Identity, stop <-chan struct{}) map[string]fileSig {
	snap := map[string]fileSig{}
	_ = confine.AsOwnerOf(root, owner, func() error {
		return walk(root, func(p string, d fs.DirEntry, err error) error {
			select {
			case <-stop:
				return filepath.SkipAll
			default:
			}
			if err != nil {
				return nil
			}
			if d.IsDir() && p != root && d.Name() == IgnoreDir {
				return filepath.SkipDir
			}
			if fi, err := d.Info(); err == nil && !d.IsDir() {
				snap[p] = fileSig{size: fi.Size(), mtime: fi.ModTime().UnixNano()}
			}
			return nil
		})
	})
	return snap
}

// pollRoots compares polled roots with their last snapshot.
func (w *Watcher) pollRoots() {
	for root, st := range w.roots {
		if !st.polled {
			continue
		}
		if w.stores[st.store].FileRoots {
			w.emit(Change{Store: st.store, Root: root, Reason: jobs.ReasonPoll})
			continue
		}
		w.walkPolled(root, st, func(cur map[string]fileSig) {
			var changed []string
			for p, sig := range cur {
				if old, ok := st.snap[p]; !ok || old != sig {
					changed = append(changed, p)
				}
			}
			for p := range st.snap {
				if _, ok := cur[p]; !ok {
					changed = append(changed, p)
				}
			}
			st.snap = cur
			if len(changed) > 0 {
				sort.Strings(changed)
				w.emit(Change{Store: st.store, Root: root, Paths: changed, Reason: jobs.ReasonPoll})
			}
		})
	}
}
