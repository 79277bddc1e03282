package recall

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

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

// TestIndexRejectsSideBySide: over many indexed logs (more than a window
// of the prefilter), a word in a few of them, a word in none, a word in
// every one with a limit and a log written since its index are answered
// as the scan answers them, with every rejected log counted as indexed.
func TestIndexRejectsSideBySide(t *testing.T) {
	dir, idxDir := t.TempDir(), t.TempDir()
	const n = 300
	for i := range n {
		var b strings.Builder
		for j := range 40 {
			word := "common"
			if i%97 == 5 && j == 20 {
				word = "narwhal"
			}
			fmt.Fprintf(&b, `{"role":"user","content":"line %d of session %d about the %s deploy"}`+"\n", j, i, word)
		}
		p := filepath.Join(dir, fmt.Sprintf("s%03d.jsonl", i))
		os.WriteFile(p, []byte(b.String()), 0o644)
		at := time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC).Add(time.Duration(i) * time.Minute)
		os.Chtimes(p, at, at)
	}
	// An index trusts a file unopened once its change time has settled
	// (settledCtime: 50 ms past it).
	time.Sleep(100 * time.Millisecond)
	root := openRoot(t, dir)
	cache := NewIndexCache(32 << 20)
	cache.TrustWrites(idxDir)
	for i := range n {
		if _, err := IndexFile(idxDir, root, fmt.Sprintf("s%03d.jsonl", i), Log, IndexOptions{Cache: cache}); err != nil {
			t.Fatal(err)
		}
	}
	// Written since: its index no longer covers it all.
	f, _ := os.OpenFile(filepath.Join(dir, "s010.jsonl"), os.O_WRONLY|os.O_APPEND, 0)
	fmt.Fprintln(f, `{"role":"user","content":"a narwhal written since"}`)
	f.Close()
	srcs := []Source{{Glob: "*.jsonl", Kind: Log, Label: "messages"}}
	for _, tc := range []struct {
		query string
		limit int
	}{{"narwhal", 10}, {"walrus", 10}, {"common", 5}, {"narwhal written", 3}} {
		q, _ := ParseQuery(tc.query)
		indexed, st, err := Search(context.Background(), q, Options{Roots: []Root{{Root: root, Sources: srcs}}, Limit: tc.limit, Sort: SortNewest, Index: idxDir, Indexes: cache})
		if err != nil {
			t.Fatal(err)
		}
		scanned, _, err := Search(context.Background(), q, Options{Roots: []Root{{Root: root, Sources: srcs}}, Limit: tc.limit, Sort: SortNewest})
		if err != nil {
			t.Fatal(err)
		}
		if got, want := cites(indexed), cites(scanned); got != want {
			t.Errorf("%q: the index answers\n%s\nthe scan\n%s", tc.query, got, want)
		}
		if tc.query == "walrus" && (st.Indexed != n || st.Files != n) {
			t.Errorf("%q: %d of %d files indexed, want all %d", tc.query, st.Indexed, st.Files, n)
		}
	}
}

func cites(rs []Result) string {
	var b strings.Builder
	for _, r := range rs {
		b.WriteString(r.Citation + " " + r.Text + "\n")
	}
	return b.String()
}

// TestListingCacheBounded: past its bound a cache keeps no more listings
// until the ones it holds expire; a listing kept again replaces its own.
func TestListingCacheBounded(t *testing.T) {
	c := NewListingCache()
	c.max = 10
	l := func(n int) rootFiles {
		var r rootFiles
		for i := range n {
			r.files = append(r.files, file{rel: fmt.Sprintf("f%d", i)})
			r.srcOf = append(r.srcOf, 0)
		}
		return r
	}
	now := time.Now()
	c.put("a", 1, now, "", l(6))
	c.put("a", 2, now, "", l(6)) // replaces its own
	if _, ok := c.get("a", 2); !ok || c.files != 6 {
		t.Fatalf("a listing kept again: %d files held, want 6", c.files)
	}
	c.put("b", 1, now, "", l(6))
	if _, ok := c.get("b", 1); ok || c.files != 6 {
		t.Errorf("past the bound: b kept, %d files held", c.files)
	}
	c.entries["a"] = listedRoot{token: 2, at: now.Add(-2 * listingTTL), files: c.entries["a"].files}
	if _, ok := c.get("a", 2); ok {
		t.Error("an expired listing used")
	}
	c.put("b", 1, now, "", l(6))
	if _, ok := c.get("b", 1); !ok || c.files != 6 {
		t.Errorf("once a expired: b not kept (%d files held)", c.files)
	}
}
