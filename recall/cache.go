package recall

import (
	"io/fs"
	"path/filepath"
	"sort"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/cespare/xxhash/v2"

	"github.com/memwatch/memwatch/confine"
)

// IndexCache keeps the large indexes a daemon's searches read, parsed,
// between searches: a rare word over a 400 MiB log otherwise reads and
// lists its 8 MiB of block filters at each request, a third of the
// request's time. An entry is used while the index file is the one it
// was read from (inode, size, change time); the indexer rewrites the
// file in place (its last block, its header), which changes all three.
// Kept copies are on the heap, never mapped: a mapping of a file the
// indexer truncates faults. The copies are bounded in bytes, the least
// recently used dropped first. A nil cache reads each time (the CLI).
type IndexCache struct {
	max int64
	// trusted is the index directory whose every write goes through
	// IndexFile with this cache, which forgets what it wrote; a kept copy
	// of an index there is used without a stat (it is checked against its
	// log, as any index is, so a copy older than the file is never wrong,
	// only shorter). Other directories' (a central node's copies, indexed
	// by the fleet's mirror) are checked by a stat.
	trusted string

	// tick numbers uses, for the least recently used to go first; atomic
	// with each entry's used, so a search's workers look indexes up
	// side by side under mu's read lock (a home's 1,700 look-ups a rare
	// word, one lock each, spun on a mutex a tenth of the search).
	tick atomic.Uint64

	// writing serializes the writes of one index file (IndexFile, the
	// clearing of its unsynced mark): the indexer's goroutine and a
	// rule's capture (capture.Worker.CaptureLog) both index logs.
	writing [64]sync.Mutex

	mu      sync.RWMutex // guards what follows
	size    int64
	entries map[string]*keptIndex
	// named are entries' of the trusted directory by their name's hash
	// (indexPath's): a rare word looks up each of a home's thousands of
	// logs, and hashing and comparing their paths was a tenth of its
	// answer.
	named map[uint64]*keptIndex
	// segs are the term segments of the trusted directory kept mapped
	// between searches (a question over a home opened and mapped each
	// session's at every search, a third of its time), each with the
	// searches holding it: a mapping is unmapped only when none does.
	segs    map[string]*keptSegment
	segSize int64
	// forgets counts forget's calls: a copy read while the indexer wrote
	// (or removed) a file is not kept, as forget came before it was.
	forgets uint64
	// deferSync and unsynced: see DeferSync (unsynced.go).
	deferSync bool
	unsynced  map[string]bool
}

type keptSegment struct {
	seg  *segment
	refs int
	used uint64
	size int64
}

// Bounds of the kept segments: mappings (the kernel's default limit is
// 65,530 a process) and bytes mapped (file pages: those a search touched
// count in the daemon's RSS, about all of a small segment's, and are the
// kernel's to reclaim; a home of 1,700 sessions has 80 MiB of them).
const (
	maxKeptSegments    = 16 << 10
	maxKeptSegmentSize = 256 << 20
)

// segment returns the segment file at path, mapped: the kept mapping when
// the cache holds it, else opened (and kept when path is in the trusted
// directory). The caller closes it (a kept one is released).
func (c *IndexCache) segment(path string) (*segment, error) {
	if c == nil || c.trusted == "" || filepath.Dir(path) != c.trusted {
		return openSegment(path)
	}
	c.mu.Lock()
	if k := c.segs[path]; k != nil {
		k.refs++
		k.used = c.tick.Add(1)
		k.seg.uses.Add(1)
		c.mu.Unlock()
		return k.seg, nil
	}
	forgets := c.forgets
	c.mu.Unlock()
	seg, err := openSegment(path)
	if err != nil || !seg.mapped {
		return seg, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if k := c.segs[path]; k != nil || c.forgets != forgets {
		// Another search kept it meanwhile, or the indexer wrote since
		// (maybe this file, maybe removed): this mapping is this search's.
		return seg, nil
	}
	if c.segs == nil {
		c.segs = map[string]*keptSegment{}
	}
	seg.keptBy, seg.keptPath = c, path
	seg.uses.Store(1)
	k := &keptSegment{seg: seg, refs: 1, used: c.tick.Add(1), size: int64(len(seg.data))}
	c.segs[path] = k
	c.segSize += k.size
	c.trimSegments()
	return seg, nil
}

// release is a search's close of a kept segment.
func (c *IndexCache) release(s *segment) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if k := c.segs[s.keptPath]; k != nil && k.seg == s {
		k.refs--
		return
	}
	// Forgotten or dropped while held: the last holder unmaps it.
	s.refs--
	if s.refs <= 0 {
		s.unmap()
	}
}

// dropSegment removes a kept segment (c.mu held): unmapped now, or by
// the last search holding it.
func (c *IndexCache) dropSegment(path string) {
	k := c.segs[path]
	if k == nil {
		return
	}
	delete(c.segs, path)
	c.segSize -= k.size
	if k.refs == 0 {
		k.seg.unmap()
		return
	}
	k.seg.refs = k.refs // counted down by release
}

// trimSegments drops the least recently used segments no search holds,
// down to three quarters of the bounds (c.mu held).
func (c *IndexCache) trimSegments() {
	if len(c.segs) <= maxKeptSegments && c.segSize <= maxKeptSegmentSize {
		return
	}
	byUse := make([]string, 0, len(c.segs))
	for p, k := range c.segs {
		if k.refs == 0 {
			byUse = append(byUse, p)
		}
	}
	sort.Slice(byUse, func(i, j int) bool { return c.segs[byUse[i]].used < c.segs[byUse[j]].used })
	for _, p := range byUse {
		if len(c.segs) <= maxKeptSegments/4*3 && c.segSize <= maxKeptSegmentSize/4*3 {
			break
		}
		c.dropSegment(p)
	}
}

type keptIndex struct {
	idx   *fileIndex
	ino   uint64
	size  int64
	ctime int64
	used  atomic.Uint64
}

// NewIndexCache keeps at most maxBytes of indexes.
func NewIndexCache(maxBytes int64) *IndexCache {
	return &IndexCache{max: maxBytes, entries: map[string]*keptIndex{}}
}

// trustedKept returns the kept index at path, in dir, when dir is the
// directory whose every change the cache hears of (as read does, in one
// look-up: a search asks this for each of a home's thousands of logs);
// nil when it must be read.
func (c *IndexCache) trustedKept(dir, path string) *fileIndex {
	if c == nil || c.trusted == "" || dir != c.trusted {
		return nil
	}
	h, ok := nameHash(path)
	if !ok {
		return nil
	}
	c.mu.RLock()
	defer c.mu.RUnlock()
	e := c.named[h]
	if e == nil {
		return nil
	}
	e.used.Store(c.tick.Add(1))
	return e.idx
}

// nameHash is the hash an index's name holds (indexPath's sixteen hex
// digits before .idx).
func nameHash(path string) (uint64, bool) {
	const hexLen, ext = 16, ".idx"
	if len(path) < hexLen+len(ext)+1 || path[len(path)-len(ext):] != ext || path[len(path)-len(ext)-hexLen-1] != filepath.Separator {
		return 0, false
	}
	var h uint64
	for _, c := range []byte(path[len(path)-len(ext)-hexLen : len(path)-len(ext)]) {
		switch {
		case c >= '0' && c <= '9':
			h = h<<4 | uint64(c-'0')
		case c >= 'a' && c <= 'f':
			h = h<<4 | uint64(c-'a'+10)
		default:
			return 0, false
		}
	}
	return h, true
}

// drop removes the entry at path (c.mu held).
func (c *IndexCache) drop(path string) {
	e := c.entries[path]
	if e == nil {
		return
	}
	c.size -= e.size
	delete(c.entries, path)
	if h, ok := nameHash(path); ok && c.named[h] == e {
		delete(c.named, h)
	}
}

// read returns the index at path with its blocks: the kept copy when the
// file is still the one it was read from (one stat by path, no open),
// else read (and kept when settled and unchanged while it was read).
// scratch is readIndex's. Small indexes are kept too: a home of a
// thousand ordinary sessions has a thousand of them (6 MiB), and opening
// each at every search was most of a rare word's time.
func (c *IndexCache) read(path string, scratch []byte) (*fileIndex, error) {
	if c == nil {
		return readIndex(path, true, false, scratch, nil)
	}
	if idx := c.trustedKept(filepath.Dir(path), path); idx != nil {
		return idx, nil
	}
	var st syscall.Stat_t
	if syscall.Stat(path, &st) == nil {
		c.mu.RLock()
		if e := c.entries[path]; e != nil && e.ino == uint64(st.Ino) && e.size == st.Size && e.ctime == confine.ChangeTime(&st) && e.ctime != 0 {
			e.used.Store(c.tick.Add(1))
			c.mu.RUnlock()
			return e.idx, nil
		}
		c.mu.RUnlock()
	}
	c.mu.Lock()
	forgets := c.forgets
	c.mu.Unlock()
	fd, err := syscall.Open(path, syscall.O_RDONLY|syscall.O_CLOEXEC, 0)
	if err != nil {
		return nil, &fs.PathError{Op: "open", Path: path, Err: err}
	}
	defer syscall.Close(fd)
	var before syscall.Stat_t
	if err := syscall.Fstat(fd, &before); err != nil {
		return nil, &fs.PathError{Op: "stat", Path: path, Err: err}
	}
	if before.Size > c.max {
		return readIndexFD(fd, path, true, false, scratch, true, c)
	}
	idx, err := readIndexFD(fd, path, true, false, nil, false, c)
	if err != nil {
		return nil, err
	}
	var after syscall.Stat_t
	settled := settledCtime(&before, time.Now())
	if settled == 0 || syscall.Fstat(fd, &after) != nil || confine.ChangeTime(&after) != settled || after.Size != before.Size || idx.data == nil {
		// Written lately, or while it was read: this search's alone.
		return idx, nil
	}
	// Not kept when the indexer wrote meanwhile: this search's alone.
	c.keep(path, &keptIndex{idx: idx, ino: uint64(before.Ino), size: before.Size, ctime: settled}, forgets)
	return idx, nil
}

// TrustWrites says every write of the indexes in dir goes through
// IndexFile with c (IndexOptions.Cache): the daemon's own index
// directory, which it alone writes. A search then uses a kept copy of
// one of them without a stat.
func (c *IndexCache) TrustWrites(dir string) { c.trusted = filepath.Clean(dir) }

// forget drops the kept copy of the index or term segment at path
// (written or removed since).
func (c *IndexCache) forget(path string) {
	if c == nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.forgets++
	c.drop(path)
	c.dropSegment(path)
}

// Writes counts the indexer's writes through the cache (each IndexFile,
// each term segment written or removed): while it stays the same, the
// index directory holds the same bytes.
func (c *IndexCache) Writes() uint64 {
	if c == nil {
		return 0
	}
	c.mu.RLock()
	defer c.mu.RUnlock()
	return c.forgets
}

// has reports whether an index of path is kept (maybe of an earlier
// version of the file: read tells).
func (c *IndexCache) has(path string) bool {
	if c == nil {
		return false
	}
	c.mu.RLock()
	defer c.mu.RUnlock()
	return c.entries[path] != nil
}

// keep adds e, dropping the least recently used entries beyond the
// bound, unless forget was called since forgets was read (it reports
// whether it kept e).
func (c *IndexCache) keep(path string, e *keptIndex, forgets uint64) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.forgets != forgets {
		return false
	}
	e.idx.kept = true
	c.drop(path)
	e.used.Store(c.tick.Add(1))
	c.entries[path] = e
	c.size += e.size
	if h, ok := nameHash(path); ok && filepath.Dir(path) == c.trusted && c.trusted != "" {
		if c.named == nil {
			c.named = map[uint64]*keptIndex{}
		}
		c.named[h] = e
	}
	if c.size <= c.max {
		return true
	}
	// The least recently used go, down to three quarters of the bound at
	// once: a search over a million files must not scan the cache at each
	// index it keeps.
	byUse := make([]string, 0, len(c.entries))
	for p := range c.entries {
		byUse = append(byUse, p)
	}
	sort.Slice(byUse, func(i, j int) bool { return c.entries[byUse[i]].used.Load() < c.entries[byUse[j]].used.Load() })
	for _, p := range byUse {
		if c.size <= c.max/4*3 {
			break
		}
		c.drop(p)
	}
	return true
}

// lockWrite takes the lock of the index file at path's writes and returns
// its release.
func (c *IndexCache) lockWrite(path string) func() {
	if c == nil {
		return func() {}
	}
	m := &c.writing[xxhash.Sum64String(path)%uint64(len(c.writing))]
	m.Lock()
	return m.Unlock
}
