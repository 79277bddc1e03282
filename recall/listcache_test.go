package recall

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/memwatch/memwatch/confine"
)

// TestListingUsedWhileFresh: a root's listing is used again, unlisted,
// while Fresh gives the number it was listed at (a session written since
// is not seen: the watcher's number would have moved); when the number
// moves, or Fresh does not vouch for the root, it is listed again; the
// spool's generations are asked anew each time.
func TestListingUsedWhileFresh(t *testing.T) {
	dir := t.TempDir()
	write := func(name string) {
		t.Helper()
		if err := os.WriteFile(filepath.Join(dir, name), []byte(`{"role":"user","content":"the wombat deploy"}`+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("a.jsonl")
	root := openRoot(t, dir)
	cache := NewListingCache()
	token, fresh := uint64(7), true
	gen := int64(0)
	search := func() map[string]bool {
		t.Helper()
		q, _ := ParseQuery("wombat")
		o := Options{Roots: []Root{{Root: root, Sources: []Source{{Glob: "*.jsonl", Kind: Log, Label: "messages"}}}}, Limit: 10, Sort: SortNewest,
			Listings: cache, Fresh: func(Root) (uint64, bool) { return token, fresh },
			Generation: func(*confine.Root, string) int64 { return gen }}
		rs, _, err := Search(context.Background(), q, o)
		if err != nil {
			t.Fatal(err)
		}
		got := map[string]bool{}
		for _, r := range rs {
			got[r.Citation] = true
		}
		return got
	}
	if got := search(); !got["a.jsonl#L1"] || len(got) != 1 {
		t.Fatalf("first search: got %v, want a.jsonl#L1", got)
	}
	write("b.jsonl")
	if got := search(); got["b.jsonl#L1"] {
		t.Errorf("the same number: got %v, want the listing used again (a.jsonl alone)", got)
	}
	gen = 3
	if got := search(); !got["a.jsonl@3#L1"] {
		t.Errorf("a generation given since: got %v, want a.jsonl@3#L1", got)
	}
	gen = 0
	token++
	if got := search(); !got["b.jsonl#L1"] || !got["a.jsonl#L1"] {
		t.Errorf("the number moved: got %v, want both sessions", got)
	}
	write("c.jsonl")
	fresh = false
	if got := search(); !got["c.jsonl#L1"] {
		t.Errorf("not vouched for: got %v, want c.jsonl listed", got)
	}
}
