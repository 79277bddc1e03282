package recall

import (
	"context"
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// waitSettled waits until path's change time is old enough that a later
// write must change it.
func waitSettled(t *testing.T, path string) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		var st syscall.Stat_t
		if err := syscall.Stat(path, &st); err != nil {
			t.Fatal(err)
		}
		if settledCtime(&st, time.Now()) != 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: change time never settled", path)
		}
	}
}

// TestIndexCacheFollowsTheIndex: a kept index answers as a fresh read
// does, is used again while its file is unchanged, and is read anew once
// the indexer has rewritten the file in place (a grown note); the cache
// keeps no more than its bound.
func TestIndexCacheFollowsTheIndex(t *testing.T) {
	// Trusted, the cache is the daemon's: told by the indexer what it
	// wrote, it uses a kept copy without a stat.
	for _, trusted := range []bool{false, true} {
		t.Run(fmt.Sprint("trusted=", trusted), func(t *testing.T) { testIndexCacheFollowsTheIndex(t, trusted) })
	}
}

func testIndexCacheFollowsTheIndex(t *testing.T, trusted bool) {
	dir := t.TempDir()
	rel := "working-memory/detail/n.md"
	note := filepath.Join(dir, rel)
	os.MkdirAll(filepath.Dir(note), 0o755)
	var b strings.Builder
	for i := range 6000 {
		fmt.Fprintf(&b, "line %05d of the notes about the deploy to cluster %d\n", i, i%97)
	}
	if err := os.WriteFile(note, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	waitSettled(t, note)
	root := openRoot(t, dir)
	idxDir := filepath.Join(dir, "idx")
	cache := NewIndexCache(1 << 20)
	var told *IndexCache
	if trusted {
		cache.TrustWrites(idxDir)
		told = cache
	}
	build := func() {
		t.Helper()
		if _, err := IndexFile(idxDir, root, rel, Text, IndexOptions{BlockSize: 1024, Cache: told}); err != nil {
			t.Fatal(err)
		}
	}
	build()
	path := indexPath(idxDir, root.Path(), rel)
	if _, err := os.Stat(path); err != nil {
		t.Fatalf("no index: %v", err)
	}
	waitSettled(t, path)
	search := func(word string, c *IndexCache) []Result {
		t.Helper()
		q, _ := ParseQuery(word)
		rs, _, err := Search(context.Background(), q, Options{Roots: []Root{{Root: root, Sources: sessionSources}}, Limit: 10, Index: idxDir, Indexes: c})
		if err != nil {
			t.Fatal(err)
		}
		return rs
	}
	if got, want := len(search("01234", cache)), len(search("01234", nil)); got != want || got != 1 {
		t.Errorf("a word the note holds: %d results with the cache, %d without; want 1", got, want)
	}
	first := cache.entries[path]
	if first == nil {
		t.Fatal("the settled index was not kept")
	}
	search("cluster", cache)
	if cache.entries[path] != first {
		t.Error("an unchanged index was read again")
	}

	// The note grows; the indexer rewrites its last block and header in place.
	f, err := os.OpenFile(note, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 500 {
		fmt.Fprintf(f, "zebrafinch %d said later\n", i)
	}
	f.Close()
	waitSettled(t, note)
	build()
	idx, err := cache.read(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	fi, _ := os.Stat(note)
	if idx.end != fi.Size() {
		t.Errorf("after the index was rewritten: the cache gives an index to byte %d, want %d (the new one)", idx.end, fi.Size())
	}
	if rs := search("zebrafinch", cache); len(rs) != 10 {
		t.Errorf("the grown note: %d results, want 10", len(rs))
	}

	// A header that claims more than the file holds is refused before
	// anything that size is allocated.
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	binary.LittleEndian.PutUint64(data[52:], 1<<40)
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := NewIndexCache(1<<20).read(path, nil); err == nil {
		t.Error("an index whose header claims 1 TiB of blocks was read")
	}

	// A bound smaller than the index keeps nothing.
	small := NewIndexCache(1024)
	search("01234", small)
	if len(small.entries) != 0 || small.size != 0 {
		t.Errorf("a cache of 1 KiB keeps %d entries (%d bytes)", len(small.entries), small.size)
	}
}

// TestIndexCacheDropsLeastRecentlyUsed: past its bound the cache drops
// the indexes used longest ago, down to three quarters of the bound.
func TestIndexCacheDropsLeastRecentlyUsed(t *testing.T) {
	c := NewIndexCache(300)
	for _, p := range []string{"a", "b", "c"} {
		c.keep(p, &keptIndex{idx: &fileIndex{}, size: 100}, 0)
	}
	c.entries["a"].used.Store(c.tick.Add(1)) // a used since b and c were kept
	c.keep("d", &keptIndex{idx: &fileIndex{}, size: 100}, 0)
	_, b := c.entries["b"]
	_, cc := c.entries["c"]
	if b || cc || len(c.entries) != 2 || c.size != 200 {
		t.Errorf("after a fourth: %d entries of %d bytes, b kept %v, c kept %v; want a and d (200), b and c dropped", len(c.entries), c.size, b, cc)
	}
	c.keep("a", &keptIndex{idx: &fileIndex{}, size: 200}, 0)
	if c.size > 300 {
		t.Errorf("replacing an entry: %d bytes kept, over the bound 300", c.size)
	}
}

// TestTrustedKeptByName: an index of the trusted directory is found by
// its name's hash as by its path, and no longer once it is forgotten,
// replaced or dropped; one elsewhere is not trusted.
func TestTrustedKeptByName(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "index")
	c := NewIndexCache(300)
	c.TrustWrites(dir)
	a, b := indexPath(dir, "/r", "a.jsonl"), indexPath(dir, "/r", "b.jsonl")
	if h, ok := nameHash(a); !ok || h == 0 {
		t.Fatalf("nameHash(%s) = %x, %v", a, h, ok)
	}
	for _, p := range []string{"", "a.idx", "/x/0123456789abcdeg.idx", "/x/0123456789abcdef.id", "/x/123456789abcdef.idx"} {
		if _, ok := nameHash(p); ok {
			t.Errorf("nameHash(%q) is a hash", p)
		}
	}
	first := &keptIndex{idx: &fileIndex{}, size: 100}
	c.keep(a, first, 0)
	if got := c.trustedKept(dir, a); got != first.idx {
		t.Errorf("trustedKept of a kept index: %p, want %p", got, first.idx)
	}
	if got := c.trustedKept(dir, b); got != nil {
		t.Errorf("trustedKept of an index never kept: %p", got)
	}
	second := &keptIndex{idx: &fileIndex{}, size: 100}
	c.keep(a, second, 0)
	if got := c.trustedKept(dir, a); got != second.idx {
		t.Errorf("trustedKept after the index was kept again: %p, want the second %p", got, second.idx)
	}
	c.forget(a)
	if got := c.trustedKept(dir, a); got != nil || len(c.named) != 0 {
		t.Errorf("trustedKept of a forgotten index: %p (%d named)", got, len(c.named))
	}
	// Dropped past the bound: its name goes with it.
	for i := range 5 {
		c.keep(indexPath(dir, "/r", fmt.Sprint(i)), &keptIndex{idx: &fileIndex{}, size: 100}, 0)
	}
	if len(c.named) != len(c.entries) {
		t.Errorf("%d named of %d entries kept", len(c.named), len(c.entries))
	}
	// An index of another directory is checked by a stat, never trusted.
	other := indexPath(t.TempDir(), "/r", "a.jsonl")
	c.keep(other, &keptIndex{idx: &fileIndex{}, size: 10}, 0)
	if got := c.trustedKept(filepath.Dir(other), other); got != nil {
		t.Errorf("trustedKept of an index outside the trusted directory: %p", got)
	}
}

// TestKeptSegmentsWhileIndexing: the daemon's cache keeps term segments
// mapped between searches while the indexer appends, merges and removes
// them: searches running meanwhile read only live mappings (a mapping is
// unmapped when the last search holding it lets go), the cache keeps no
// segment whose file is gone, and the answers are the scan's.
func TestKeptSegmentsWhileIndexing(t *testing.T) {
	dir := t.TempDir()
	root := openRoot(t, dir)
	idx := filepath.Join(t.TempDir(), "index")
	cache := NewIndexCache(1 << 20)
	cache.TrustWrites(idx)
	srcs := []Source{{Glob: "*.jsonl", Kind: Log, Label: "messages"}}
	names := []string{"a.jsonl", "b.jsonl", "c.jsonl"}
	write := func(pass int) {
		for i, n := range names {
			appendMessages(t, filepath.Join(dir, n), pass, 30+10*i)
		}
	}
	q, _ := ParseQuery("why does the deploy of service 3 wait")
	o := Options{Roots: []Root{{Root: root, Sources: srcs}}, Limit: 10, Index: idx, Indexes: cache}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				if _, _, err := Search(context.Background(), q, o); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	for pass := range 40 {
		write(pass)
		for _, n := range names {
			if _, err := IndexFile(idx, root, n, Log, IndexOptions{Cache: cache}); err != nil {
				t.Fatal(err)
			}
		}
	}
	close(stop)
	wg.Wait()
	fast, st, err := Search(context.Background(), q, o)
	if err != nil || st.Indexed != len(names) {
		t.Fatalf("%d files by the index, %v; want %d", st.Indexed, err, len(names))
	}
	oScan := o
	oScan.Index, oScan.Indexes = "", nil
	scan, _, _ := Search(context.Background(), q, oScan)
	if i, diff := firstDiff(scan, fast); diff {
		t.Errorf("the kept segments rank differently from the scan at %d", i)
	}
	cache.mu.Lock()
	defer cache.mu.Unlock()
	if len(cache.segs) == 0 {
		t.Error("no segment kept")
	}
	for p, k := range cache.segs {
		if _, err := os.Stat(p); err != nil {
			t.Errorf("kept %s, whose file is gone", filepath.Base(p))
		}
		if k.refs != 0 {
			t.Errorf("%s: held by %d searches after all ended", filepath.Base(p), k.refs)
		}
	}
}
