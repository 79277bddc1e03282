package recall

import (
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"slices"
)

// syncfsAbove is how many files SyncIndexes syncs with one syncfs rather
// than a fsync each: a syncfs writes out every process's dirty data on
// the file system, a cost worth it for a catch-up's thousands of files,
// not for the few an agent's writes leave (an append's cost stays the
// one fsync of its index).
const syncfsAbove = 64

// An index file's header counts blocks written before it; a power cut
// must not keep the header and lose or tear those blocks, or a search
// would skip lines the lost filters would have shown. IndexFile orders
// them with a fsync of each file before its header, unless its cache
// defers the syncs (DeferSync): then the header says unsynced, readers
// other than this process check each block's filter against its hash
// (a torn block makes the index corrupt, read around and built anew),
// and SyncIndexes later makes every such file's blocks durable at once
// (one syncfs on Linux) and clears the mark. A catch-up of 10,000 small
// session directories spent over half its time in those fsyncs.

// DeferSync makes IndexFile, through this cache, write headers unsynced
// instead of syncing each file; the indexer runs SyncIndexes, on its own
// goroutine, before long.
func (c *IndexCache) DeferSync() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.deferSync = true
	if c.unsynced == nil {
		c.unsynced = map[string]bool{}
	}
}

func (c *IndexCache) defersSync() bool {
	if c == nil {
		return false
	}
	c.mu.RLock()
	defer c.mu.RUnlock()
	return c.deferSync
}

// markUnsynced notes an unsynced index this process wrote or checked
// whole: it trusts it, and SyncIndexes clears its mark.
func (c *IndexCache) markUnsynced(path string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.unsynced != nil {
		c.unsynced[path] = true
	}
}

// trusts reports whether this process wrote or checked the unsynced
// index at path (c nil: none).
func (c *IndexCache) trusts(path string) bool {
	if c == nil {
		return false
	}
	c.mu.RLock()
	defer c.mu.RUnlock()
	return c.unsynced[path]
}

// Unsynced is how many indexes wait for SyncIndexes.
func (c *IndexCache) Unsynced() int {
	if c == nil {
		return 0
	}
	c.mu.RLock()
	defer c.mu.RUnlock()
	return len(c.unsynced)
}

// SyncIndexes makes the blocks of the unsynced indexes this process
// wrote in dir durable, then clears their headers' mark. It runs on the
// indexer's goroutine (no IndexFile meanwhile). Every index it was given
// leaves the set, synced or not: one it could not sync or clear keeps
// its mark on disk and is checked whole when read again (a cost, never
// a hidden line), and a failing disk cannot grow the set or have every
// task sync it all again.
func (c *IndexCache) SyncIndexes(dir string) error {
	if c == nil {
		return nil
	}
	c.mu.Lock()
	paths := slices.Sorted(maps.Keys(c.unsynced))
	clear(c.unsynced)
	c.mu.Unlock()
	if len(paths) == 0 {
		return nil
	}
	sync := syncEach
	if len(paths) >= syncfsAbove {
		sync = func(paths []string) error { return syncFiles(dir, paths) }
	}
	if err := sync(paths); err != nil {
		return fmt.Errorf("sync the index (%d files stay marked unsynced): %w", len(paths), err)
	}
	var first error
	failed := 0
	for _, p := range paths {
		if err := c.clearUnsynced(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
			failed++
			if first == nil {
				first = err
			}
		}
		c.forget(p)
	}
	if first != nil {
		return fmt.Errorf("clear the unsynced mark of %d of %d index files: %w", failed, len(paths), first)
	}
	return nil
}

// clearUnsynced rewrites the header of the index at path without its
// unsynced mark (one write of one sector), unless it was written again
// since the sync: its new blocks wait for the next.
func (c *IndexCache) clearUnsynced(path string) error {
	defer c.lockWrite(path)()
	c.mu.RLock()
	again := c.unsynced[path]
	c.mu.RUnlock()
	if again {
		return nil
	}
	f, err := openIndexFile(path, os.O_RDWR, 0)
	if err != nil {
		return err
	}
	defer f.Close()
	idx, err := readHeader(f)
	if err != nil || !idx.unsynced {
		return err
	}
	idx.unsynced = false
	if _, err := f.WriteAt(header(idx), 0); err != nil {
		return err
	}
	return f.Close()
}

// syncEach fsyncs each file.
func syncEach(paths []string) error {
	for _, p := range paths {
		f, err := openIndexFile(p, os.O_RDONLY, 0)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return err
		}
		err = f.Sync()
		f.Close()
		if err != nil {
			return err
		}
	}
	return nil
}
