package daemon

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/memwatch/memwatch/confine"
	"github.com/memwatch/memwatch/control"
	"github.com/memwatch/memwatch/recall"
	"github.com/memwatch/memwatch/secrets"
	"github.com/memwatch/memwatch/spool"
)

// SecretFinding is one credential where an agent's memory holds it (its
// value never kept).
type SecretFinding = control.SecretFinding

// maxSecretLine bounds a line read for credentials.
const maxSecretLine = 4 << 20

// SecretsInRoot reads a root's searchable files (srcs) and, with sp, the
// spool's lines of its logs gone from their files, for credentials.
func SecretsInRoot(ctx context.Context, d *secrets.Detector, root *confine.Root, srcs []recall.Source, sp *spool.Spool) []SecretFinding {
	var out []SecretFinding
	for _, m := range searchableFiles(root, srcs) {
		out = append(out, SecretsInFile(ctx, d, root, m.Rel)...)
	}
	if sp != nil {
		out = append(out, secretsHeld(ctx, d, root, sp.SearchHeld)...)
	}
	return out
}

// searchableFiles lists a root's files recall searches (not databases,
// not compressed archives), once each, with what the listing read of each
// (Info nil: stat it).
func searchableFiles(root *confine.Root, srcs []recall.Source) []confine.Matched {
	seen := map[string]bool{}
	var out []confine.Matched
	listing := root.Listing()
	for _, src := range srcs {
		if src.Kind == recall.Records {
			continue
		}
		files, err := listing.GlobExcept(src.Glob, src.Exclude)
		if err != nil {
			continue
		}
		for _, m := range files {
			if seen[m.Rel] || strings.HasSuffix(m.Rel, ".gz") {
				continue
			}
			seen[m.Rel] = true
			out = append(out, m)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Rel < out[j].Rel })
	return out
}

// heldFunc reads a root's held lines (spool.Spool.SearchHeld, or one
// search's or tally's spool.Gens.Held).
type heldFunc func(ctx context.Context, root *confine.Root, fn func(rel string, gen, line int64, raw []byte) error) error

func secretsHeld(ctx context.Context, d *secrets.Detector, root *confine.Root, held heldFunc) []SecretFinding {
	var out []SecretFinding
	held(ctx, root, func(rel string, gen, line int64, raw []byte) error {
		for _, f := range d.FindBytes(raw) {
			cite := fmt.Sprintf("%s/%s@%d#L%d", root.Path(), rel, gen, line)
			out = append(out, SecretFinding{Kind: f.Rule, Root: root.Path(), File: rel, Line: line, Cite: cite})
		}
		return ctx.Err()
	})
	return out
}

// SecretsInFile reads one file line by line for credentials.
func SecretsInFile(ctx context.Context, d *secrets.Detector, root *confine.Root, rel string) []SecretFinding {
	f, fi, err := root.OpenRead(rel)
	if err != nil {
		return nil
	}
	defer f.Close()
	var out []SecretFinding
	// A buffer the file's size, up to 64 KiB: a home of ten thousand
	// small sessions allocates little.
	rd := bufio.NewReaderSize(f, int(min(64<<10, max(4096, fi.Size()+1))))
	var no int64
	var buf []byte
	for ctx.Err() == nil {
		line, err := readBounded(rd, maxSecretLine, &buf)
		if len(line) > 0 {
			no++
			for _, fd := range d.FindBytes(line) {
				out = append(out, SecretFinding{Kind: fd.Rule, Root: root.Path(), File: rel, Line: no, Cite: fmt.Sprintf("%s/%s#L%d", root.Path(), rel, no), Live: true, Since: fi.ModTime()})
			}
		}
		if err != nil {
			break
		}
	}
	return out
}

// readBounded reads a line, its first max bytes kept (the rest skipped).
// The line is read into the reader's buffer when it fits (valid until the
// next read), else into *buf, reused from line to line.
func readBounded(rd *bufio.Reader, max int, buf *[]byte) ([]byte, error) {
	chunk, err := rd.ReadSlice('\n')
	if !errors.Is(err, bufio.ErrBufferFull) {
		return chunk[:min(len(chunk), max)], err
	}
	line := append((*buf)[:0], chunk[:min(len(chunk), max)]...)
	defer func() { *buf = line[:0] }()
	for {
		chunk, err := rd.ReadSlice('\n')
		if len(line) < max {
			line = append(line, chunk[:min(len(chunk), max-len(line))]...)
		}
		if errors.Is(err, bufio.ErrBufferFull) {
			continue
		}
		if err == io.EOF && len(line) > 0 {
			return line, nil
		}
		return line, err
	}
}

// secretTally is what the daemon knows of the credentials in the agents'
// memory, for status and the overview page, so a person knows to rotate
// (memwatch secrets lists them). A pass once the catch-up is done and
// hourly reads each root's searchable files again only when one's size or
// time changed, and its held lines only when the spool's logs of the
// root changed: idle, a pass reads next to nothing.
type secretTally struct {
	mu    sync.Mutex             // guards the maps and at
	files map[string]fileSecrets // by root, then path
	held  map[string]heldSecrets // by root
	at    time.Time
}

type fileSecrets struct {
	size  int64
	mtime time.Time
	kinds map[string]int
}

type heldSecrets struct {
	stamp string // the root's logs as the spool knew them (Logs)
	kinds map[string]int
}

func newSecretTally() *secretTally {
	return &secretTally{files: map[string]fileSecrets{}, held: map[string]heldSecrets{}}
}

// pass counts again what changed in the policy's roots.
func (d *Daemon) tallySecrets(ctx context.Context) {
	t := d.secrets
	det := secrets.Default()
	start, cpuStart := time.Now(), cpuSeconds()
	var read int
	var bytes int64
	seen := map[string]bool{}
	// One query says which roots hold anything beyond their live files:
	// the others are asked nothing more of the spool.
	gens := d.spool.Gens(ctx)
	for _, s := range d.Policy().Stores {
		srcs, ok := SearchSources(s)
		if !ok {
			continue
		}
		for _, id := range s.RootIDs() {
			if ctx.Err() != nil {
				return
			}
			root, err := d.openRoot(s, id.Path)
			if err != nil {
				continue
			}
			for _, m := range searchableFiles(root, srcs) {
				rel := m.Rel
				key := root.Path() + "\x00" + rel
				seen[key] = true
				fi := m.Info
				if fi == nil || !fi.Mode().IsRegular() {
					if fi, err = root.Stat(rel); err != nil {
						continue
					}
				}
				t.mu.Lock()
				old, ok := t.files[key]
				t.mu.Unlock()
				if ok && old.size == fi.Size() && old.mtime.Equal(fi.ModTime()) {
					continue
				}
				read++
				bytes += fi.Size()
				fs := fileSecrets{size: fi.Size(), mtime: fi.ModTime(), kinds: map[string]int{}}
				for _, f := range SecretsInFile(ctx, det, root, rel) {
					fs.kinds[f.Kind]++
				}
				t.mu.Lock()
				t.files[key] = fs
				t.mu.Unlock()
			}
			if !gens.Holds(root.ID()) {
				t.mu.Lock()
				delete(t.held, root.Path())
				t.mu.Unlock()
			} else if stamp := d.heldStamp(ctx, root); stamp != "" {
				t.mu.Lock()
				old := t.held[root.Path()]
				t.mu.Unlock()
				if old.stamp != stamp {
					hs := heldSecrets{stamp: stamp, kinds: map[string]int{}}
					for _, f := range secretsHeld(ctx, det, root, gens.Held) {
						hs.kinds[f.Kind]++
					}
					t.mu.Lock()
					t.held[root.Path()] = hs
					t.mu.Unlock()
				}
			}
			root.Close()
		}
	}
	t.mu.Lock()
	for k := range t.files {
		if !seen[k] {
			delete(t.files, k)
		}
	}
	t.at = time.Now()
	t.mu.Unlock()
	// Said at info when it read something: what finding credentials
	// costs beside the catch-up (make bench compares the two).
	log := d.log.Debug
	if read > 0 {
		log = d.log.Info
	}
	log("counted the credentials in the agents' memory", "files_read", read, "bytes", bytes,
		"took", time.Since(start).Round(time.Millisecond).String(), "cpu_seconds", fmt.Sprintf("%.2f", cpuSeconds()-cpuStart))
}

// heldStamp sums up a root's logs in the spool (their ids, sequence
// numbers and whether they are gone): it changes when its held lines may.
func (d *Daemon) heldStamp(ctx context.Context, root *confine.Root) string {
	logs, err := d.spool.Logs(ctx, root.ID())
	if err != nil {
		return ""
	}
	var b strings.Builder
	for _, l := range logs {
		fmt.Fprintf(&b, "%d:%d:%d:%t;", l.ID, l.Seq, l.Gen, l.Missing)
	}
	return b.String()
}

// status sums the counts of the roots reach says the caller may see.
func (t *secretTally) status(reach func(root string) bool) *control.SecretsStatus {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.at.IsZero() {
		return nil
	}
	st := &control.SecretsStatus{Kinds: map[string]int{}, At: t.at}
	for key, fs := range t.files {
		root, _, _ := strings.Cut(key, "\x00")
		if !reach(root) {
			continue
		}
		for k, n := range fs.kinds {
			st.Kinds[k] += n
			st.Found += n
		}
	}
	for root, hs := range t.held {
		if !reach(root) {
			continue
		}
		for k, n := range hs.kinds {
			st.Kinds[k] += n
			st.Found += n
		}
	}
	return st
}
