package recall

import (
	"io/fs"
	"sync"
	"syscall"
	"time"
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

	mu      sync.Mutex // guards what follows
	size    int64
	tick    uint64
	entries map[string]*keptIndex
}

type keptIndex struct {
	idx   *fileIndex
	ino   uint64
	size  int64
	ctime int64
	used  uint64
}

// NewIndexCache keeps at most maxBytes of indexes.
func NewIndexCache(maxBytes int64) *IndexCache {
	return &IndexCache{max: maxBytes, entries: map[string]*keptIndex{}}
}

// keepAbove is the smallest index kept: a smaller one is read in one
// pread (readIndex's scratch) for less than a lookup saves.
const keepAbove = smallIndex

// read returns the index at path with its blocks: the kept copy when the
// file is still the one it was read from, else read (and kept when large,
// settled and unchanged while it was read). scratch is readIndex's.
func (c *IndexCache) read(path string, scratch []byte) (*fileIndex, error) {
	if c == nil {
		return readIndex(path, true, false, scratch)
	}
	fd, err := syscall.Open(path, syscall.O_RDONLY|syscall.O_CLOEXEC, 0)
	if err != nil {
		return nil, &fs.PathError{Op: "open", Path: path, Err: err}
	}
	defer syscall.Close(fd)
	var before syscall.Stat_t
	if err := syscall.Fstat(fd, &before); err != nil {
		return nil, &fs.PathError{Op: "stat", Path: path, Err: err}
	}
	if before.Size <= keepAbove || before.Size > c.max {
		return readIndexFD(fd, path, true, false, scratch, true)
	}
	c.mu.Lock()
	if e := c.entries[path]; e != nil && e.ino == uint64(before.Ino) && e.size == before.Size && e.ctime == ctimeOf(&before) && e.ctime != 0 {
		c.tick++
		e.used = c.tick
		c.mu.Unlock()
		return e.idx, nil
	}
	c.mu.Unlock()
	idx, err := readIndexFD(fd, path, true, false, nil, false)
	if err != nil {
		return nil, err
	}
	var after syscall.Stat_t
	settled := settledCtime(&before, time.Now())
	if settled == 0 || syscall.Fstat(fd, &after) != nil || ctimeOf(&after) != settled || after.Size != before.Size || idx.data == nil {
		// Written lately, or while it was read: this search's alone.
		return idx, nil
	}
	idx.kept = true
	c.keep(path, &keptIndex{idx: idx, ino: uint64(before.Ino), size: before.Size, ctime: settled})
	return idx, nil
}

// keep adds e, dropping the least recently used entries beyond the bound.
func (c *IndexCache) keep(path string, e *keptIndex) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if old := c.entries[path]; old != nil {
		c.size -= old.size
	}
	c.tick++
	e.used = c.tick
	c.entries[path] = e
	c.size += e.size
	for c.size > c.max {
		var oldest string
		for p, x := range c.entries {
			if oldest == "" || x.used < c.entries[oldest].used {
				oldest = p
			}
		}
		c.size -= c.entries[oldest].size
		delete(c.entries, oldest)
	}
}
