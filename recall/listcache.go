package recall

import (
	"strings"
	"sync"
	"time"
)

// ListingCache keeps what a search listed of each root (its files and
// their lstat) for the next search, which uses it unlisted while nothing
// changed there: Options.Fresh says so (the daemon's watcher, which sees
// every change under the roots it watches, after a Sync). On a home of
// 1,700 sessions in 40 projects the listing was most of a rare word's
// search: a directory read and an lstat per session.
type ListingCache struct {
	mu      sync.Mutex
	entries map[string]listedRoot
	files   int // in all entries
}

type listedRoot struct {
	token uint64 // Fresh's number when it was listed
	at    time.Time
	files []file // without their root (rebound to the search's)
}

const (
	// maxListedFiles bounds the files a cache holds (about 200 bytes
	// each); past it the cache starts again.
	maxListedFiles = 1 << 18
	// listingTTL bounds how long a listing is trusted even with no change
	// seen: a file written through a hard link elsewhere, or a bind mount,
	// changes where no watch sees.
	listingTTL = time.Minute
)

// NewListingCache returns an empty cache.
func NewListingCache() *ListingCache { return &ListingCache{entries: map[string]listedRoot{}} }

// listingKey names what a root's listing depends on: the directory
// opened (its device and inode), where under it, the sources and labels.
func listingKey(r Root, labels []string) string {
	var b strings.Builder
	b.WriteString(r.Root.ID().Key())
	b.WriteString("\x00" + r.Under + "\x00" + strings.Join(labels, "\x01"))
	for _, s := range r.Sources {
		b.WriteString("\x00" + s.Glob + "\x01" + s.Exclude + "\x01" + s.Label + "\x01")
		b.WriteByte(byte('0' + s.Kind))
	}
	return b.String()
}

// get returns the files listed under key when listed at token.
func (c *ListingCache) get(key string, token uint64) ([]file, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.entries[key]
	if !ok || e.token != token || time.Since(e.at) > listingTTL {
		return nil, false
	}
	return e.files, true
}

// put keeps files as listed at token under key.
func (c *ListingCache) put(key string, token uint64, at time.Time, files []file) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if old, ok := c.entries[key]; ok {
		c.files -= len(old.files)
	}
	if c.files+len(files) > maxListedFiles {
		c.entries, c.files = map[string]listedRoot{}, 0
	}
	kept := make([]file, len(files))
	for i, f := range files {
		f.root = Root{}
		kept[i] = f
	}
	c.entries[key] = listedRoot{token: token, at: at, files: kept}
	c.files += len(kept)
}

// cachedListRoot is listRoot through o.Listings when o.Fresh trusts the
// root: a listing made at the same number is used as it is, with the
// search's root and the spool's generations of now.
func cachedListRoot(o Options, r Root, want map[string]bool, stat statFunc) rootFiles {
	if o.Listings == nil || o.Fresh == nil || r.Listed != nil {
		return listRoot(o, r, want, stat)
	}
	token, ok := o.Fresh(r)
	if !ok {
		return listRoot(o, r, want, stat)
	}
	key := listingKey(r, o.Labels)
	if files, ok := o.Listings.get(key, token); ok {
		out := rootFiles{files: make([]file, len(files))}
		for i, f := range files {
			f.root = r
			if f.src.Kind == Log {
				f.gen = 1
				if o.Generation != nil {
					if g := o.Generation(r.Root, f.rel); g > 0 {
						f.gen = g
					}
				}
			}
			out.files[i] = f
		}
		return out
	}
	at := time.Now()
	l := listRoot(o, r, want, stat)
	if dir := r.index(o); dir != "" {
		for i := range l.files {
			f := &l.files[i]
			f.idxDir, f.idxPath = dir, indexPath(dir, r.Root.Path(), f.rel)
		}
	}
	if len(l.unread) == 0 && !l.statted {
		o.Listings.put(key, token, at, l.files)
	}
	return l
}
