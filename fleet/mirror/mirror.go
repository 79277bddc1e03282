// Package mirror keeps, on a central node, a copy of each host's memory as
// files, indexed as the daemon indexes an agent's files, so that a search
// over every host reads only what can match (the hosts' replicated
// databases hold the same text, but a search of them reads every line).
//
// A host's copy lives beside its restored state, in <host>/copy/: one
// directory per root the host captured memory in (named by a hash of the
// root's key), holding
//
//	log/<log>       the messages of each of its logs: each generation's
//	                lines after the last's, each message on its own line
//	                number there (the lines between left blank), so a
//	                result's line maps to the host's generation and line
//	                (Root.Recite); one file per log, however often the
//	                agent rewrote it;
//	mem/<file>      the newest version of each of its memory files;
//
// and index/, their recall index, and manifest.json, what was copied up
// to where. Log copies only grow: each update appends what the host's
// spool captured since, then indexes what was appended (an event's cost
// follows what is new, not what is there). The copy is memwatch's own
// (0700, root's on a service); every write goes through an os.Root on it,
// and every name in it comes from a host and is checked to stay inside.
package mirror

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	"github.com/cespare/xxhash/v2"

	"github.com/memwatch/memwatch/confine"
	"github.com/memwatch/memwatch/fleet/hostname"
	"github.com/memwatch/memwatch/recall"
	"github.com/memwatch/memwatch/spool"
	"github.com/memwatch/memwatch/versions"
)

// Dir is a host's copy, in the host's directory.
const Dir = "copy"

const (
	manifestName = "manifest.json"
	indexName    = "index"
	memDir       = "mem"
	logDir       = "log"
	// batch is how many lines one query of the host's spool returns.
	batch = 10_000
	// maxGap is the most blank lines a copy writes before a message (the
	// host's lines before it that are not messages, or pruned): a line
	// further on is not copied, so one row cannot make a file huge.
	maxGap = 1 << 24
	// maxRel bounds a name a host gives a file.
	maxRel = 1024
	// maxLine bounds a line copied (a host cuts its lines at its stores'
	// max_line, 1 MiB unless set higher); maxFile a memory file.
	maxLine = 16 << 20
	maxFile = confine.DefaultMaxFileSize
)

// manifest is what a copy holds, saved in manifest.json after each update.
type manifest struct {
	Roots map[string]*rootCopy `json:"roots"` // by the root's key on the host
}

// rootCopy is the copy of one root of the host.
type rootCopy struct {
	Dir   string                 `json:"dir"`  // under copy/
	Path  string                 `json:"path"` // the root's path on the host
	UID   int                    `json:"uid"`  // its owner there
	Logs  map[int64]*logCopy     `json:"logs,omitempty"`
	Files map[string]*fileCopy   `json:"files,omitempty"`
	root  *confine.Root          // the directory, opened (for the index)
	dirty map[string]recall.Kind // files written by this update, to index
}

// logCopy is the copy of one log, by its id in the host's spool.
type logCopy struct {
	Path  string    `json:"path"`  // relative to the root
	First int64     `json:"first"` // when the host's spool first saw it (unix ns): another log with its id is not it
	Seq   int64     `json:"seq"`   // the last sequence number copied
	Lines int64     `json:"lines"` // lines of the copy
	Size  int64     `json:"size"`  // its bytes
	Gens  []genCopy `json:"gens,omitempty"`
}

// genCopy is where a generation of the log starts in its copy.
type genCopy struct {
	Gen   int64 `json:"gen"`
	Start int64 `json:"start"` // the copy's line holding its line 1
	Lines int64 `json:"lines"` // its last line copied
}

// fileCopy is a memory file's copy: the version it is and its size.
type fileCopy struct {
	N    int64 `json:"n"`
	Size int64 `json:"size"`
}

// Copy is the copy of one host's memory. One goroutine updates it (the
// fleet's copier); searches read what it wrote (Roots).
type Copy struct {
	host    string
	hostDir string // the host's restored state
	dir     string // hostDir/copy
	log     *slog.Logger
	out     *os.Root // on dir: every write goes through it
	m       manifest
}

// Stats is what an update copied.
type Stats struct {
	Lines   int64 // messages appended
	Files   int   // memory files written or removed
	Indexed int64 // bytes indexed
	Skipped int64 // lines not copied: a name or a line number out of bounds
}

// New opens (making it) the copy of the host whose state is restored in
// hostDir. A file of the copy shorter than the manifest says is copied
// again from its start; one longer (killed between a write and the
// manifest's) is cut back to it.
func New(host, hostDir string, logger *slog.Logger) (*Copy, error) {
	dir := filepath.Join(hostDir, Dir)
	if err := os.MkdirAll(filepath.Join(dir, indexName), 0o700); err != nil {
		return nil, fmt.Errorf("make the copy of host %s: %w", host, err)
	}
	r, err := os.OpenRoot(dir)
	if err != nil {
		return nil, fmt.Errorf("open the copy of host %s: %w", host, err)
	}
	c := &Copy{host: host, hostDir: hostDir, dir: dir, log: logger, out: r, m: manifest{Roots: map[string]*rootCopy{}}}
	if data, err := r.ReadFile(manifestName); err == nil {
		if err := json.Unmarshal(data, &c.m); err != nil || c.m.Roots == nil {
			logger.Warn("a host's copy has an unreadable manifest; copied again", "host", host, "err", err)
			c.m = manifest{Roots: map[string]*rootCopy{}}
		}
	}
	for key, rc := range c.m.Roots {
		if !validDir(rc.Dir) {
			delete(c.m.Roots, key)
			continue
		}
		for id, lc := range rc.Logs {
			// Shorter than the manifest says: lost (a power loss); copied
			// again. Longer (killed between a write and the manifest's):
			// cut back when next appended to (appendLog).
			if fi, err := r.Stat(filepath.Join(rc.Dir, logRel(lc.Path))); lc.Size > 0 && (err != nil || fi.Size() < lc.Size) {
				c.resetLog(rc, id)
			}
		}
		for rel, fc := range rc.Files {
			if fi, err := r.Stat(filepath.Join(rc.Dir, memDir, rel)); err != nil || fi.Size() != fc.Size {
				fc.N = 0 // written again
			}
		}
	}
	return c, nil
}

// Close closes the copy's directories.
func (c *Copy) Close() error {
	for _, rc := range c.m.Roots {
		if rc.root != nil {
			rc.root.Close()
			rc.root = nil
		}
	}
	return c.out.Close()
}

// Update copies what the host's restored spool and versions hold that the
// copy does not, and indexes it.
func (c *Copy) Update(ctx context.Context) (Stats, error) {
	var st Stats
	var errs []error
	if _, err := os.Stat(filepath.Join(c.hostDir, spool.FileName)); err == nil {
		if err := c.updateLogs(ctx, &st); err != nil {
			errs = append(errs, err)
		}
	}
	if _, err := os.Stat(filepath.Join(c.hostDir, versions.FileName)); err == nil {
		if err := c.updateFiles(ctx, &st); err != nil {
			errs = append(errs, err)
		}
	}
	for _, rc := range c.m.Roots {
		for rel, kind := range rc.dirty {
			root, err := c.open(rc)
			if err == nil {
				var n int64
				n, err = recall.IndexFile(filepath.Join(c.dir, indexName), root, rel, kind, recall.IndexOptions{})
				st.Indexed += n
			}
			if err != nil && !errors.Is(err, fs.ErrNotExist) {
				errs = append(errs, fmt.Errorf("index %s: %w", rel, err))
			}
		}
		rc.dirty = nil
		if rc.root != nil {
			// Open only while updated: a host may have many roots.
			rc.root.Close()
			rc.root = nil
		}
	}
	if err := c.save(); err != nil {
		errs = append(errs, err)
	}
	return st, errors.Join(errs...)
}

// updateLogs appends the messages the host's spool captured since the
// last update to the copy of each log.
func (c *Copy) updateLogs(ctx context.Context, st *Stats) error {
	sp, err := spool.OpenReadOnly(ctx, c.hostDir)
	if err != nil {
		return err
	}
	defer sp.Close()
	keys, err := sp.RootKeys(ctx)
	if err != nil {
		return err
	}
	return c.eachRoot(keys, func(rc *rootCopy, id confine.ID) error {
		logs, err := sp.Logs(ctx, id)
		if err != nil {
			return err
		}
		seen := map[int64]bool{}
		for _, lg := range logs {
			seen[lg.ID] = true
			lc := rc.Logs[lg.ID]
			if lc != nil && (lc.Path != lg.Path || lg.Seq < lc.Seq || lc.First != lg.First.UnixNano()) {
				// Another log took this id (the host's spool is new).
				c.resetLog(rc, lg.ID)
				lc = nil
			}
			if lc == nil {
				if !localRel(lg.Path) {
					st.Skipped++
					continue
				}
				lc = &logCopy{Path: lg.Path, First: lg.First.UnixNano()}
				rc.Logs[lg.ID] = lc
			}
			if lg.Seq == lc.Seq {
				continue
			}
			if err := c.appendLog(ctx, sp, rc, lg.ID, lc, st); err != nil {
				return err
			}
			lc.Seq = max(lc.Seq, lg.Seq)
		}
		for id := range rc.Logs {
			if !seen[id] {
				c.resetLog(rc, id) // the host dropped it
			}
		}
		return nil
	})
}

// appendLog appends a log's messages after lc.Seq to its copy.
func (c *Copy) appendLog(ctx context.Context, sp *spool.Spool, rc *rootCopy, id int64, lc *logCopy, st *Stats) error {
	rel := logRel(lc.Path)
	var f *os.File
	var w *bufio.Writer
	var werr error
	blank := bytes.Repeat([]byte{'\n'}, 4096)
	pad := func(n int64) {
		for n > 0 {
			k := min(n, int64(len(blank)))
			w.Write(blank[:k])
			n -= k
			lc.Size += k
			lc.Lines += k
		}
	}
	for ctx.Err() == nil && werr == nil {
		n := 0
		err := sp.CapturedSince(ctx, id, lc.Seq, batch, maxLine, func(l spool.CapturedLine) error {
			n++
			lc.Seq = l.Seq
			if l.Data == nil {
				st.Skipped++ // longer than any line a host keeps
				return nil
			}
			var g *genCopy
			if k := len(lc.Gens); k > 0 {
				g = &lc.Gens[k-1]
			}
			switch {
			case l.Gen < 1 || l.Line < 1 || g != nil && l.Gen < g.Gen:
				st.Skipped++ // not where a capture puts a line
				return nil
			case g == nil || l.Gen > g.Gen:
				// A new generation: its line 1 on the copy's next line.
				lc.Gens = append(lc.Gens, genCopy{Gen: l.Gen, Start: lc.Lines + 1})
				g = &lc.Gens[len(lc.Gens)-1]
			}
			gap := l.Line - 1 - g.Lines
			if gap < 0 || gap > maxGap {
				st.Skipped++ // copied already, or too far on
				return nil
			}
			if f == nil {
				p := filepath.Join(rc.Dir, rel)
				if werr = c.out.MkdirAll(filepath.Dir(p), 0o700); werr != nil {
					return werr
				}
				if f, werr = c.out.OpenFile(p, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600); werr != nil {
					return werr
				}
				// What is past the manifest's size was written after it
				// was saved (or by a copy of a log since dropped): cut.
				fi, err := f.Stat()
				if err == nil && fi.Size() < lc.Size {
					err = fmt.Errorf("%s is shorter than copied (%d bytes, not %d)", rel, fi.Size(), lc.Size)
				}
				if err == nil && fi.Size() > lc.Size {
					err = f.Truncate(lc.Size)
				}
				if err != nil {
					werr = err
					return werr
				}
				w = bufio.NewWriterSize(f, 256<<10)
				rc.dirty[rel] = recall.Log
			}
			pad(gap)
			data := l.Data
			if bytes.IndexByte(data, '\n') >= 0 {
				data = bytes.ReplaceAll(data, []byte{'\n'}, []byte{' '}) // one line, whatever the host sent
			}
			w.Write(data)
			w.WriteByte('\n')
			lc.Size += int64(len(data)) + 1
			lc.Lines++
			g.Lines = l.Line
			st.Lines++
			return nil
		})
		if err != nil && werr == nil {
			werr = err
		}
		if n < batch {
			break
		}
	}
	if f != nil {
		if err := w.Flush(); err != nil && werr == nil {
			werr = err
		}
		if err := f.Close(); err != nil && werr == nil {
			werr = err
		}
	}
	if werr != nil {
		// What was written is not what the manifest will say: copied
		// again from the start next time.
		c.resetLog(rc, id)
		return fmt.Errorf("copy log %s of host %s: %w", lc.Path, c.host, werr)
	}
	return ctx.Err()
}

// updateFiles writes the newest version of each memory file the host's
// versions hold, when the copy has another.
func (c *Copy) updateFiles(ctx context.Context, st *Stats) error {
	vs, err := versions.OpenReadOnly(ctx, c.hostDir)
	if err != nil {
		return err
	}
	defer vs.Close()
	keys, err := vs.Roots(ctx)
	if err != nil {
		return err
	}
	return c.eachRoot(keys, func(rc *rootCopy, id confine.ID) error {
		rels, err := vs.Files(ctx, id)
		if err != nil {
			return err
		}
		keep := map[string]bool{}
		for _, rel := range rels {
			if !localRel(rel) {
				continue
			}
			list, err := vs.List(ctx, id, rel)
			if err != nil {
				return err
			}
			if len(list) == 0 || list[len(list)-1].Deleted() {
				continue
			}
			keep[rel] = true
			last := list[len(list)-1]
			if last.Size > maxFile {
				st.Skipped++ // never read
				continue
			}
			if fc := rc.Files[rel]; fc != nil && fc.N == last.N {
				continue
			}
			_, data, err := vs.Get(ctx, id, rel, last.N)
			if err != nil {
				return err
			}
			if n := len(data); n > 0 && data[n-1] != '\n' {
				data = append(data, '\n') // its last line indexed too
			}
			if err := c.writeFile(filepath.Join(rc.Dir, memDir, rel), data); err != nil {
				return fmt.Errorf("copy %s of host %s: %w", rel, c.host, err)
			}
			rc.Files[rel] = &fileCopy{N: last.N, Size: int64(len(data))}
			rc.dirty[filepath.Join(memDir, rel)] = recall.Text
			st.Files++
		}
		for rel := range rc.Files {
			if !keep[rel] {
				c.remove(rc, filepath.Join(memDir, rel))
				delete(rc.Files, rel)
				st.Files++
			}
		}
		return nil
	})
}

// writeFile replaces a file of the copy whole.
func (c *Copy) writeFile(rel string, data []byte) error {
	if err := c.out.MkdirAll(filepath.Dir(rel), 0o700); err != nil {
		return err
	}
	tmp := rel + confine.TempMarker + "copy"
	if err := c.out.WriteFile(tmp, data, 0o600); err != nil {
		return err
	}
	if err := c.out.Rename(tmp, rel); err != nil {
		c.out.Remove(tmp)
		return err
	}
	return nil
}

// eachRoot calls fn with the copy of each root a host's database names
// (by key), made if new; a key that names no absolute path is left out.
func (c *Copy) eachRoot(keys []string, fn func(rc *rootCopy, id confine.ID) error) error {
	for _, key := range keys {
		id, ok := confine.ParseKey(key)
		if !ok || !filepath.IsAbs(id.Path) {
			continue
		}
		if err := fn(c.rootOf(key, id), id); err != nil {
			return err
		}
	}
	return nil
}

// rootOf is the copy of the root with this key, made if new.
func (c *Copy) rootOf(key string, id confine.ID) *rootCopy {
	rc := c.m.Roots[key]
	if rc == nil {
		rc = &rootCopy{Dir: fmt.Sprintf("%016x", xxhash.Sum64String(key)), Path: id.Path, UID: id.UID}
		c.m.Roots[key] = rc
	}
	if rc.Logs == nil {
		rc.Logs = map[int64]*logCopy{}
	}
	if rc.Files == nil {
		rc.Files = map[string]*fileCopy{}
	}
	if rc.dirty == nil {
		rc.dirty = map[string]recall.Kind{}
	}
	return rc
}

// open is the root's directory, opened.
func (c *Copy) open(rc *rootCopy) (*confine.Root, error) {
	if rc.root != nil {
		return rc.root, nil
	}
	r, err := confine.Open(filepath.Join(c.dir, rc.Dir), confine.Options{})
	if err != nil {
		return nil, err
	}
	rc.root = r
	return r, nil
}

// resetLog removes the copy of a log (its files and their index).
func (c *Copy) resetLog(rc *rootCopy, id int64) {
	lc := rc.Logs[id]
	if lc == nil {
		return
	}
	c.remove(rc, logRel(lc.Path))
	delete(rc.Logs, id)
}

// remove removes a file of a root's copy and its index.
func (c *Copy) remove(rc *rootCopy, rel string) {
	c.out.Remove(filepath.Join(rc.Dir, rel))
	delete(rc.dirty, rel)
	if r, err := c.open(rc); err == nil {
		recall.DropIndex(filepath.Join(c.dir, indexName), r, rel)
	}
}

// save writes the manifest.
func (c *Copy) save() error {
	data, err := json.Marshal(&c.m)
	if err != nil {
		return err
	}
	if err := c.writeFile(manifestName, data); err != nil {
		return fmt.Errorf("save the copy of host %s: %w", c.host, err)
	}
	return nil
}

// logRel is where log path is copied, in its root's copy.
func logRel(path string) string { return filepath.Join(logDir, path) }

// localRel reports whether a name a host gave a file stays inside the
// directory it is joined to.
func localRel(rel string) bool {
	return rel != "" && len(rel) <= maxRel && filepath.IsLocal(rel) && !strings.ContainsRune(rel, 0) && !confine.IsTemp(rel)
}

// validDir reports a root copy's directory name as New makes them.
func validDir(d string) bool {
	if len(d) != 16 {
		return false
	}
	_, err := strconv.ParseUint(d, 16, 64)
	return err == nil
}

// Roots returns the roots of a host's copy to search that want accepts
// (by their owner's uid on the host; nil: all), as its manifest says now,
// each cited as the host has it (HOST:/path/on/host#L5); done closes
// them. A host with no copy yet has none.
func Roots(hostDir, host string, want func(uid int) bool) (roots []recall.Root, done func(), err error) {
	dir := filepath.Join(hostDir, Dir)
	data, err := os.ReadFile(filepath.Join(dir, manifestName))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, func() {}, nil
	}
	if err != nil {
		return nil, func() {}, fmt.Errorf("read the copy of host %s: %w", host, err)
	}
	var m manifest
	if err := json.Unmarshal(data, &m); err != nil {
		return nil, func() {}, fmt.Errorf("read the copy of host %s: %w", host, err)
	}
	var opened []*confine.Root
	done = func() {
		for _, r := range opened {
			r.Close()
		}
	}
	var rcs []*rootCopy
	for _, rc := range m.Roots {
		if validDir(rc.Dir) && (want == nil || want(rc.UID)) {
			rcs = append(rcs, rc)
		}
	}
	sort.Slice(rcs, func(i, j int) bool { return rcs[i].Path < rcs[j].Path })
	if len(rcs) > MaxRoots {
		err = fmt.Errorf("host %s has %d roots; searched the first %d (by path)", host, len(rcs), MaxRoots)
		rcs = rcs[:MaxRoots]
	}
	for _, rc := range rcs {
		r, err := confine.Open(filepath.Join(dir, rc.Dir), confine.Options{})
		if err != nil {
			continue // not copied yet
		}
		opened = append(opened, r)
		root := recall.Root{Root: r, Name: filepath.Base(rc.Path), Host: host, Shown: rc.Path, Index: filepath.Join(dir, indexName),
			Sources: []recall.Source{{Kind: recall.Text, Label: "memory", Strip: memDir + "/"}, {Kind: recall.Log, Label: "messages", Strip: logDir + "/"}},
			Listed:  []recall.Listed{}}
		for rel := range rc.Files {
			root.Listed = append(root.Listed, recall.Listed{Rel: filepath.Join(memDir, rel), Source: 0})
		}
		gens := map[string][]genCopy{} // by the log's path as cited
		for _, lc := range rc.Logs {
			if lc.Lines > 0 {
				root.Listed = append(root.Listed, recall.Listed{Rel: logRel(lc.Path), Source: 1, Gen: 1})
				gens[filepath.ToSlash(lc.Path)] = lc.Gens
			}
		}
		sort.Slice(root.Listed, func(i, j int) bool { return root.Listed[i].Rel < root.Listed[j].Rel })
		prefix := host + ":" + strings.TrimSuffix(filepath.ToSlash(rc.Path), "/") + "/"
		root.Recite = func(cite string) (string, int64, bool) { return recite(prefix, gens, cite) }
		roots = append(roots, root)
	}
	return roots, done, err
}

// HostsDir is where a central node keeps the hosts' state, under its
// state directory: a directory per host.
const HostsDir = "fleet"

// Hosts lists the hosts whose state is kept under stateDir, in name order.
func Hosts(stateDir string) []string {
	ents, _ := os.ReadDir(filepath.Join(stateDir, HostsDir))
	var out []string
	for _, e := range ents {
		if e.IsDir() && hostname.Valid(e.Name()) {
			out = append(out, e.Name())
		}
	}
	return out
}

// FleetRoots returns the roots of every host's copy under stateDir that
// want accepts (by host and owner's uid there; nil: all), hosts in name
// order; done closes them. A copy that cannot be read is left out, with
// why in errs.
func FleetRoots(stateDir string, want func(host string, uid int) bool) (roots []recall.Root, done func(), errs []error) {
	var dones []func()
	done = func() {
		for _, d := range dones {
			d()
		}
	}
	for _, h := range Hosts(stateDir) {
		if len(roots) >= MaxRoots {
			errs = append(errs, fmt.Errorf("searched the first %d roots of the hosts (in name order), not those of host %s and after: name one with --host", MaxRoots, h))
			break
		}
		var wantUID func(int) bool
		if want != nil {
			wantUID = func(uid int) bool { return want(h, uid) }
		}
		rs, d, err := Roots(filepath.Join(stateDir, HostsDir, h), h, wantUID)
		if err != nil {
			errs = append(errs, err)
		}
		roots = append(roots, rs...)
		dones = append(dones, d)
	}
	if len(roots) > MaxRoots {
		roots = roots[:MaxRoots] // the rest closed by done
	}
	return roots, done, errs
}

// MaxRoots bounds the roots of the hosts one search opens.
const MaxRoots = 1000

// recite turns the citation of a line of a log's copy (prefix + rel#L<n>,
// n the copy's line) into the host's: the generation holding that line,
// and its line there (rel@3#L5). ok is false for any other citation.
func recite(prefix string, gens map[string][]genCopy, cite string) (string, int64, bool) {
	rest, found := strings.CutPrefix(cite, prefix)
	if !found {
		return "", 0, false
	}
	i := strings.LastIndex(rest, "#L")
	if i < 0 {
		return "", 0, false
	}
	gs, ok := gens[rest[:i]]
	n, err := strconv.ParseInt(rest[i+2:], 10, 64)
	if !ok || err != nil || len(gs) == 0 {
		return "", 0, false
	}
	k := sort.Search(len(gs), func(k int) bool { return gs[k].Start > n }) - 1
	if k < 0 {
		return "", 0, false
	}
	line := n - gs[k].Start + 1
	at := ""
	if gs[k].Gen > 1 {
		at = "@" + strconv.FormatInt(gs[k].Gen, 10)
	}
	return fmt.Sprintf("%s%s%s#L%d", prefix, rest[:i], at, line), line, true
}
