package answer

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"sort"
	"strings"
	"syscall"

	"github.com/cespare/xxhash/v2"

	"github.com/memwatch/memwatch/confine"
	"github.com/memwatch/memwatch/control"
	"github.com/memwatch/memwatch/recall"
	"github.com/memwatch/memwatch/secrets"
	"github.com/memwatch/memwatch/spool"
)

// Where an agent's memory holds credentials (memwatch secrets, and the
// daemon's tally for status): each found where it is, its value never
// kept.

// maxSecretLine bounds a line read for credentials.
const maxSecretLine = 4 << 20

// SecretList gathers findings: with a Max, the newest Max of them, those
// let go counted in More (a root of a million credentials costs twice Max
// findings of memory, not a million).
type SecretList struct {
	Max   int // 0: no bound
	Found []control.SecretFinding
	More  int
}

func (l *SecretList) add(f control.SecretFinding) {
	l.Found = append(l.Found, f)
	if l.Max > 0 && len(l.Found) >= 2*l.Max {
		l.trim()
	}
}

func (l *SecretList) trim() {
	sortSecrets(l.Found)
	if l.Max > 0 && len(l.Found) > l.Max {
		l.More += len(l.Found) - l.Max
		l.Found = l.Found[:l.Max]
	}
}

// Sorted returns the findings kept, newest first.
func (l *SecretList) Sorted() []control.SecretFinding {
	l.trim()
	return l.Found
}

// SecretsInRoot reads a root's searchable files (srcs) and, with sp, the
// spool's lines of its logs gone from their files, for credentials, into
// out; a file or a log's held lines tally says hold none as they are now
// are not read (tally may be nil).
func SecretsInRoot(ctx context.Context, d *secrets.Detector, root *confine.Root, srcs []recall.Source, sp *spool.Spool, tally *SavedTally, out *SecretList) {
	for _, m := range SearchableFiles(root, srcs) {
		if tally != nil {
			fi := m.Info
			if fi == nil || !fi.Mode().IsRegular() {
				fi, _ = root.Stat(m.Rel)
			}
			if tally.NoneIn(root.Path(), m.Rel, fi) {
				continue
			}
		}
		SecretsInFile(ctx, d, root, m.Rel, out)
	}
	if sp != nil {
		held := HeldFunc(sp.HeldLines)
		if tally != nil {
			held = tally.heldUnvouched(sp)
		}
		SecretsHeld(ctx, d, root, held, out)
	}
}

// sortSecrets orders findings newest first, then by place (root, file,
// line, citation): the same order however the spool's lines were read (a
// whole root's, or a log's at a time).
func sortSecrets(fs []control.SecretFinding) {
	sort.Slice(fs, func(i, j int) bool {
		a, b := fs[i], fs[j]
		if !a.Since.Equal(b.Since) {
			return a.Since.After(b.Since)
		}
		if a.Root != b.Root || a.File != b.File {
			return a.Root < b.Root || a.Root == b.Root && a.File < b.File
		}
		if a.Line != b.Line {
			return a.Line < b.Line
		}
		return a.Cite < b.Cite || a.Cite == b.Cite && a.Kind < b.Kind
	})
}

// SearchableFiles lists a root's files recall searches (not databases,
// not compressed archives), once each, with what the listing read of each
// (Info nil: stat it).
func SearchableFiles(root *confine.Root, srcs []recall.Source) []confine.Matched {
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

// HeldFunc reads a root's held lines (spool.Spool.HeldLines, or one
// tally's spool.Gens.HeldLines).
type HeldFunc func(ctx context.Context, root *confine.Root, fn func(spool.HeldLine) error) error

// SecretsHeld reads a root's held lines for credentials, each cited at
// its version of the log (PATH@GEN#L).
func SecretsHeld(ctx context.Context, d *secrets.Detector, root *confine.Root, held HeldFunc, out *SecretList) {
	var buf []byte
	held(ctx, root, func(h spool.HeldLine) error {
		for _, f := range d.FindLine(h.Data, &buf) {
			cite := fmt.Sprintf("%s/%s@%d#L%d", root.Path(), h.Path, h.Gen, h.Line)
			out.add(control.SecretFinding{Kind: f.Rule, Root: root.Path(), File: h.Path, Line: h.Line, Cite: cite, Since: h.Time})
		}
		return ctx.Err()
	})
}

// SecretsInFile reads one file line by line for credentials.
func SecretsInFile(ctx context.Context, d *secrets.Detector, root *confine.Root, rel string, out *SecretList) {
	f, fi, err := root.OpenRead(rel)
	if err != nil {
		return
	}
	defer f.Close()
	// A buffer the file's size, up to 64 KiB: a home of ten thousand
	// small sessions allocates little.
	rd := bufio.NewReaderSize(f, int(min(64<<10, max(4096, fi.Size()+1))))
	var no int64
	var buf, read []byte
	for ctx.Err() == nil {
		line, _, _, err := readLine(rd, maxSecretLine, &buf)
		if len(line) > 0 {
			no++
			for _, fd := range d.FindLine(line, &read) {
				out.add(control.SecretFinding{Kind: fd.Rule, Root: root.Path(), File: rel, Line: no, Cite: fmt.Sprintf("%s/%s#L%d", root.Path(), rel, no), Live: true, Since: fi.ModTime()})
			}
		}
		if err != nil {
			break
		}
	}
}

// FileCount is a count of one file's credentials by kind, and where it
// stopped: the next count of the file reads only what was appended (an
// agent's session grows by lines; reading it whole at every hourly count
// cost as much as the file's size).
type FileCount struct {
	Dev, Ino uint64
	// End is where the last complete line read ends; Sum is a hash of
	// the (up to) 256 bytes before it, which a file rewritten since
	// shows there.
	End int64
	Sum uint64
	// Kinds counts the credentials of the lines before End; Partial
	// those of what follows it, a line not ended yet (counted again
	// with what completes it).
	Kinds   map[string]int
	Partial map[string]int
}

// CountSecretsInFile counts the credentials of a file by kind. When the
// file is prev's, grown (its device and inode, at least prev.End bytes,
// the same bytes before prev.End), only what follows prev.End is read;
// read is how many bytes were.
func CountSecretsInFile(ctx context.Context, d *secrets.Detector, root *confine.Root, rel string, prev FileCount) (c FileCount, read int64, err error) {
	f, fi, err := root.OpenRead(rel)
	if err != nil {
		return FileCount{}, 0, err
	}
	defer f.Close()
	c = FileCount{Kinds: map[string]int{}}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		c.Dev, c.Ino = uint64(st.Dev), uint64(st.Ino)
	}
	if prev.Ino != 0 && prev.Dev == c.Dev && prev.Ino == c.Ino && prev.End > 0 && fi.Size() >= prev.End {
		if sum, err := sumBefore(f, prev.End); err == nil && sum == prev.Sum {
			c.End = prev.End
			maps.Copy(c.Kinds, prev.Kinds)
		}
	}
	if _, err := f.Seek(c.End, io.SeekStart); err != nil {
		return FileCount{}, 0, fmt.Errorf("count the credentials of %s: %w", rel, err)
	}
	rd := bufio.NewReaderSize(f, int(min(64<<10, max(4096, fi.Size()-c.End+1))))
	var buf, scratch []byte
	for ctx.Err() == nil {
		line, n, complete, err := readLine(rd, maxSecretLine, &buf)
		read += n
		if complete {
			c.End += n
		}
		for _, fd := range d.FindLine(line, &scratch) {
			into := c.Kinds
			if !complete {
				// Most files end in a newline: no map a file for this.
				if c.Partial == nil {
					c.Partial = map[string]int{}
				}
				into = c.Partial
			}
			into[fd.Rule]++
		}
		if err != nil {
			break
		}
	}
	if err := ctx.Err(); err != nil {
		return FileCount{}, read, err
	}
	if c.Sum, err = sumBefore(f, c.End); err != nil {
		return FileCount{}, read, fmt.Errorf("count the credentials of %s: %w", rel, err)
	}
	return c, read, nil
}

// sumBefore hashes the (up to) 256 bytes of f before end.
func sumBefore(f *os.File, end int64) (uint64, error) {
	var b [256]byte
	from := max(0, end-int64(len(b)))
	n, err := f.ReadAt(b[:end-from], from)
	if err != nil && !(errors.Is(err, io.EOF) && int64(n) == end-from) {
		return 0, err
	}
	return xxhash.Sum64(b[:n]), nil
}

// readLine reads a line, its first max bytes kept (the rest skipped),
// and says how many bytes of the file it took and whether it ended in a
// newline. The line is read into the reader's buffer when it fits (valid
// until the next read), else into *buf, reused from line to line.
func readLine(rd *bufio.Reader, max int, buf *[]byte) (line []byte, n int64, complete bool, err error) {
	chunk, err := rd.ReadSlice('\n')
	n = int64(len(chunk))
	if !errors.Is(err, bufio.ErrBufferFull) {
		return chunk[:min(len(chunk), max)], n, err == nil, err
	}
	line = append((*buf)[:0], chunk[:min(len(chunk), max)]...)
	defer func() { *buf = line[:0] }()
	for {
		chunk, err = rd.ReadSlice('\n')
		n += int64(len(chunk))
		if len(line) < max {
			line = append(line, chunk[:min(len(chunk), max-len(line))]...)
		}
		if errors.Is(err, bufio.ErrBufferFull) {
			continue
		}
		return line, n, err == nil, err
	}
}
