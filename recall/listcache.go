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
	max     int // maxListedFiles (tests make it smaller)
}

type listedRoot struct {
	token  uint64 // Fresh's number when it was listed
	at     time.Time
	idxDir string // the index directory idxPath is in ("" for none)
	files  []listedFile
}

// listedFile is what a listing says of a file, without its root or
// source (the search's own, by index, when used again).
type listedFile struct {
	rel                string
	src                int
	mtime, size, ctime int64
	dev, ino           uint64
	readable           bool
	idxPath            string
}

const (
	// maxListedFiles bounds the files a cache holds (about 200 bytes
	// each: 26 MiB at most); past it, a listing is not kept until others
	// expire.
	maxListedFiles = 1 << 17
	// listingTTL bounds how long a listing is trusted even with no change
	// seen: a file written through a hard link elsewhere, or a bind mount,
	// changes where no watch sees.
	listingTTL = time.Minute
)

// NewListingCache returns an empty cache.
func NewListingCache() *ListingCache {
	return &ListingCache{entries: map[string]listedRoot{}, max: maxListedFiles}
}

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

// get returns the listing kept under key when listed at token.
func (c *ListingCache) get(key string, token uint64) (listedRoot, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.entries[key]
	if !ok || e.token != token || time.Since(e.at) > listingTTL {
		return listedRoot{}, false
	}
	return e, true
}

// put keeps l's files as listed at token under key, unless the cache is
// full of listings still fresh.
func (c *ListingCache) put(key string, token uint64, at time.Time, idxDir string, l rootFiles) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if old, ok := c.entries[key]; ok {
		c.files -= len(old.files)
		delete(c.entries, key)
	}
	if c.files+len(l.files) > c.max {
		for k, e := range c.entries {
			if time.Since(e.at) > listingTTL {
				c.files -= len(e.files)
				delete(c.entries, k)
			}
		}
		if c.files+len(l.files) > c.max {
			return
		}
	}
	e := listedRoot{token: token, at: at, idxDir: idxDir, files: make([]listedFile, len(l.files))}
	for i, f := range l.files {
		e.files[i] = listedFile{rel: f.rel, src: l.srcOf[i], mtime: f.mtime, size: f.size, ctime: f.ctime, dev: f.dev, ino: f.ino, readable: f.readable, idxPath: f.idxPath}
	}
	c.entries[key] = e
	c.files += len(e.files)
}

// cachedListRoot lists a root keptRootFiles had no listing of, and keeps
// the listing in o.Listings when o.Fresh trusts the root: a later search
// takes it as it is while the root's number does not move.
func cachedListRoot(o Options, r Root, want map[string]bool, stat statFunc) rootFiles {
	if o.Listings == nil || o.Fresh == nil || r.Listed != nil {
		return listRoot(o, r, want, stat)
	}
	token, ok := o.Fresh(r)
	if !ok {
		return listRoot(o, r, want, stat)
	}
	key := listingKey(r, o.Labels)
	at := time.Now()
	l := listRoot(o, r, want, stat)
	dir := r.index(o)
	if dir != "" {
		for i := range l.files {
			f := &l.files[i]
			f.idxDir, f.idxPath = dir, indexPath(dir, r.Root.Path(), f.rel)
		}
	}
	if len(l.unread) == 0 && !l.statted {
		o.Listings.put(key, token, at, dir, l)
	}
	return l
}

// keptRootFiles is the listing kept of r when it is still good (made at
// the number o.Fresh gives now), with the search's root and the spool's
// generations of now: no system call, so a search takes it without
// handing the root to a worker.
func keptRootFiles(o Options, r Root) (rootFiles, bool) {
	if o.Listings == nil || o.Fresh == nil || r.Listed != nil {
		return rootFiles{}, false
	}
	token, ok := o.Fresh(r)
	if !ok {
		return rootFiles{}, false
	}
	e, ok := o.Listings.get(listingKey(r, o.Labels), token)
	if !ok {
		return rootFiles{}, false
	}
	out := rootFiles{files: make([]file, len(e.files))}
	rp := &r
	for i, lf := range e.files {
		f := file{root: rp, rel: lf.rel, src: &rp.Sources[lf.src], mtime: lf.mtime, size: lf.size, gen: 1,
			dev: lf.dev, ino: lf.ino, ctime: lf.ctime, readable: lf.readable, idxDir: e.idxDir, idxPath: lf.idxPath}
		if f.src.Kind == Log && o.Generation != nil {
			if g := o.Generation(r.Root, f.rel); g > 0 {
				f.gen = g
			}
		}
		out.files[i] = f
	}
	return out, true
}
