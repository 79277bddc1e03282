package daemon

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/memwatch/memwatch/confine"
	"github.com/memwatch/memwatch/recall"
)

// TestDiskListsIndexOnlyAfterWrites: the index's bytes are measured again
// only once the indexer wrote through the cache since (an idle daemon
// lists none of its thousands of files), and then at most every diskEvery.
func TestDiskListsIndexOnlyAfterWrites(t *testing.T) {
	state, logs := t.TempDir(), t.TempDir()
	idx := filepath.Join(state, IndexDir)
	if err := os.MkdirAll(idx, 0o700); err != nil {
		t.Fatal(err)
	}
	d := &Daemon{cfg: Config{StateDir: state}, indexes: trustedIndexCache(idx)}
	if got := d.disk().Index; got != 0 {
		t.Fatalf("empty index: %d bytes, want 0", got)
	}
	// A file the cache did not hear of: not listed again.
	if err := os.WriteFile(filepath.Join(idx, "stray"), make([]byte, 1000), 0o600); err != nil {
		t.Fatal(err)
	}
	if got := d.disk().Index; got != 0 {
		t.Errorf("nothing indexed since: %d bytes, want the 0 measured", got)
	}
	// The indexer writes: measured again once diskEvery has passed.
	if err := os.WriteFile(filepath.Join(logs, "a.md"), []byte("a line of memory\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	root, err := confine.Open(logs, confine.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer root.Close()
	if _, err := recall.IndexFile(idx, root, "a.md", recall.Text, recall.IndexOptions{Cache: d.indexes}); err != nil {
		t.Fatal(err)
	}
	if got := d.disk().Index; got != 0 {
		t.Errorf("indexed within diskEvery of the last measure: %d bytes, want the 0 measured", got)
	}
	d.diskAt = d.diskAt.Add(-diskEvery - time.Second)
	ents, _ := os.ReadDir(idx)
	var want int64
	for _, e := range ents {
		fi, _ := e.Info()
		want += fi.Size()
	}
	if got := d.disk().Index; got != want || want <= 1000 {
		t.Errorf("after the indexer wrote: %d bytes, want %d (> 1000)", got, want)
	}
}
