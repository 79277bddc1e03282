package recall

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
)

// TestUnsyncedIndex: an index written while its cache defers syncs says
// so in its header; a reader of another process checks it whole, so a
// block a power cut lost (its filter zeroed) makes the index corrupt and
// the search reads the file, finding every line; SyncIndexes clears the
// mark. Without deferring, the header is written after a fsync, unmarked.
func TestUnsyncedIndex(t *testing.T) {
	dir := t.TempDir()
	note := writeNote(t, dir)
	root := openRoot(t, dir)
	idxDir := filepath.Join(dir, "idx")
	rel := "working-memory/detail/n.md"
	path := indexPath(idxDir, root.Path(), rel)
	header := func() *fileIndex {
		t.Helper()
		f, err := os.Open(path)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		idx, err := readHeader(f)
		if err != nil {
			t.Fatal(err)
		}
		return idx
	}
	search := func(word string) int {
		t.Helper()
		q, _ := ParseQuery(word)
		rs, _, err := Search(context.Background(), q, Options{Roots: []Root{{Root: root, Sources: sessionSources}}, Limit: 10, Index: idxDir})
		if err != nil {
			t.Fatal(err)
		}
		return len(rs)
	}

	c := NewIndexCache(1 << 20)
	c.DeferSync()
	if _, err := IndexFile(idxDir, root, rel, Text, IndexOptions{BlockSize: 1024, Cache: c}); err != nil {
		t.Fatal(err)
	}
	if idx := header(); !idx.unsynced || idx.count < 2 {
		t.Fatalf("deferred: unsynced %v, %d blocks; want marked, several blocks", idx.unsynced, idx.count)
	}
	if !c.trusts(path) || c.Unsynced() != 1 {
		t.Errorf("the writer's cache trusts it: %v, %d unsynced", c.trusts(path), c.Unsynced())
	}
	if _, err := readIndex(path, false, false, nil, nil); err != nil {
		t.Errorf("another process reads the whole index, intact: %v", err)
	}
	if got := search("0123"); got != 1 {
		t.Errorf("through the unsynced index: %d results, want 1", got)
	}

	// A power cut kept the header, not the first block's filter.
	data, _ := os.ReadFile(path)
	torn := append([]byte(nil), data...)
	for i := headerSize + blockHeader; i < headerSize+blockHeader+32 && i < len(torn); i++ {
		torn[i] = 0
	}
	os.WriteFile(path, torn, 0o600)
	if _, err := readIndex(path, false, false, nil, nil); err == nil {
		t.Error("a torn unsynced index read as sound by another process")
	}
	if got := search("0003"); got != 1 {
		t.Errorf("a line of the torn block: %d results, want 1", got)
	}

	os.WriteFile(path, data, 0o600)
	if err := c.SyncIndexes(idxDir); err != nil {
		t.Fatal(err)
	}
	if idx := header(); idx.unsynced || c.Unsynced() != 0 {
		t.Errorf("after SyncIndexes: unsynced %v, %d waiting; want neither", idx.unsynced, c.Unsynced())
	}
	if got := search("0123"); got != 1 {
		t.Errorf("after SyncIndexes: %d results, want 1", got)
	}

	// Appended to with no deferring (another indexer): synced, unmarked.
	c2 := NewIndexCache(1 << 20)
	c2.DeferSync()
	os.Remove(path)
	if _, err := IndexFile(idxDir, root, rel, Text, IndexOptions{BlockSize: 1024, Cache: c2}); err != nil {
		t.Fatal(err)
	}
	f, _ := os.OpenFile(note, os.O_APPEND|os.O_WRONLY, 0)
	fmt.Fprintf(f, "line 0400 the zebrafinch\n")
	f.Close()
	if _, err := IndexFile(idxDir, root, rel, Text, IndexOptions{BlockSize: 1024}); err != nil {
		t.Fatal(err)
	}
	if idx := header(); idx.unsynced {
		t.Error("an index synced by its writer still marked unsynced")
	}
	if got := search("zebrafinch"); got != 1 {
		t.Errorf("the appended line: %d results, want 1", got)
	}
}

// TestSyncIndexesMany: past syncfsAbove files, SyncIndexes syncs them in
// one go and clears every mark.
func TestSyncIndexesMany(t *testing.T) {
	dir := t.TempDir()
	os.MkdirAll(filepath.Join(dir, "notes"), 0o755)
	n := syncfsAbove + 6
	for i := range n {
		os.WriteFile(filepath.Join(dir, "notes", fmt.Sprintf("%03d.md", i)), []byte(fmt.Sprintf("note %d about the deploy\n", i)), 0o644)
	}
	root := openRoot(t, dir)
	idxDir := filepath.Join(dir, "idx")
	c := NewIndexCache(1 << 20)
	c.DeferSync()
	for i := range n {
		if _, err := IndexFile(idxDir, root, fmt.Sprintf("notes/%03d.md", i), Text, IndexOptions{Cache: c}); err != nil {
			t.Fatal(err)
		}
	}
	if got := c.Unsynced(); got != n {
		t.Fatalf("%d indexes wait for a sync, want %d", got, n)
	}
	if err := c.SyncIndexes(idxDir); err != nil {
		t.Fatal(err)
	}
	for i := range n {
		f, err := os.Open(indexPath(idxDir, root.Path(), fmt.Sprintf("notes/%03d.md", i)))
		if err != nil {
			t.Fatal(err)
		}
		idx, err := readHeader(f)
		f.Close()
		if err != nil || idx.unsynced {
			t.Errorf("note %d after SyncIndexes: unsynced %v, %v", i, idx != nil && idx.unsynced, err)
		}
	}
	if got := c.Unsynced(); got != 0 {
		t.Errorf("%d still wait", got)
	}
}

// TestSyncIndexesFailing: an index whose mark cannot be cleared leaves
// the set anyway (its mark stays on disk, so it is checked whole when
// read), and the next call has nothing to do.
func TestSyncIndexesFailing(t *testing.T) {
	dir := t.TempDir()
	writeNote(t, dir)
	root := openRoot(t, dir)
	idxDir := filepath.Join(dir, "idx")
	rel := "working-memory/detail/n.md"
	c := NewIndexCache(1 << 20)
	c.DeferSync()
	if _, err := IndexFile(idxDir, root, rel, Text, IndexOptions{BlockSize: 1024, Cache: c}); err != nil {
		t.Fatal(err)
	}
	// A directory where the index file was: it can be neither synced
	// as a file nor rewritten.
	path := indexPath(idxDir, root.Path(), rel)
	c.markUnsynced(path + ".gone")
	os.Remove(path)
	os.Mkdir(path, 0o700)
	if err := c.SyncIndexes(idxDir); err == nil {
		t.Error("SyncIndexes of an index it cannot rewrite: no error")
	}
	if n := c.Unsynced(); n != 0 {
		t.Errorf("%d indexes still wait after a failed sync, want 0", n)
	}
	if err := c.SyncIndexes(idxDir); err != nil {
		t.Errorf("the next SyncIndexes: %v, want nothing to do", err)
	}
}
