package watcher

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"sync"
	"syscall"

	"github.com/memwatch/memwatch/confine"
	"github.com/memwatch/memwatch/state"
)

// fpMax is how many leading bytes identify a log besides its inode: enough
// to tell a reused inode from the original file.
const fpMax = 256

// Cursor is how far a JSONL log has been read: only complete lines count.
type Cursor struct {
	Dev    uint64 `json:"dev"`
	Ino    uint64 `json:"ino"`
	FP     string `json:"fp"`     // sha256 of the first FPLen bytes
	FPLen  int    `json:"fp_len"` // grows up to fpMax as the file grows
	Offset int64  `json:"offset"` // just after the last complete line
	Lines  int64  `json:"lines"`  // complete lines before Offset
}

// Reset says why a cursor started again from the beginning.
type Reset string

// Reasons a cursor starts over.
const (
	NoReset   Reset = ""
	Fresh     Reset = "new"
	Truncated Reset = "truncated"
	Replaced  Reset = "replaced"
)

// readBufSize is large so counting runs at memory speed (bytes.Count is vectorised).
const readBufSize = 1 << 20

// DefaultMaxLine is the longest line handed on whole.
const DefaultMaxLine = 1 << 20

// CutMarker ends a line longer than the limit, after its first bytes.
const CutMarker = "…[memwatch: line cut; %d bytes in all]"

// Advance reads rel from cur to its last complete line. fn, when not nil,
// gets every new complete line (without its newline) and its 1-based number;
// an error from fn stops the read and returns the cursor before that line.
// A line longer than maxLine (0: DefaultMaxLine) is counted whole, but fn
// gets only its first maxLine bytes and CutMarker: memory stays bounded
// whatever an agent writes. A partial last line is left for a later call.
func Advance(root *confine.Root, rel string, cur Cursor, maxLine int, fn func(line []byte, n int64) error) (Cursor, Reset, error) {
	if maxLine <= 0 {
		maxLine = DefaultMaxLine
	}
	f, fi, err := root.OpenRead(rel)
	if err != nil {
		return cur, NoReset, err
	}
	defer f.Close()
	var dev, ino uint64
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		dev, ino = uint64(st.Dev), uint64(st.Ino)
	}
	reset := NoReset
	fpLen := min(int(fi.Size()), fpMax)
	head := make([]byte, fpLen)
	if _, err := io.ReadFull(f, head); err != nil {
		return cur, NoReset, err
	}
	switch {
	case cur == (Cursor{}):
		reset = Fresh
	case cur.Dev != dev || cur.Ino != ino:
		reset = Replaced
	case fi.Size() < cur.Offset:
		reset = Truncated
	case cur.FPLen > fpLen || fingerprint(head[:cur.FPLen]) != cur.FP:
		reset = Replaced // same inode, different content: reused inode or rewritten in place
	}
	if reset != NoReset {
		cur = Cursor{}
	}
	cur.Dev, cur.Ino = dev, ino
	if cur.FPLen < fpLen {
		cur.FPLen, cur.FP = fpLen, fingerprint(head)
	}
	if _, err := f.Seek(cur.Offset, io.SeekStart); err != nil {
		return cur, reset, err
	}
	buf := make([]byte, readBufSize)
	var carry []byte   // the start of a line that spans buffers, at most maxLine bytes
	var carryLen int64 // that line's length so far, cut or not
	for {
		n, rerr := f.Read(buf)
		chunk := buf[:n]
		if fn == nil {
			// Fast path: count only; a line's bytes are never kept.
			if i := bytes.LastIndexByte(chunk, '\n'); i >= 0 {
				cur.Lines += int64(bytes.Count(chunk[:i+1], []byte{'\n'}))
				cur.Offset += carryLen + int64(i+1)
				carryLen = int64(len(chunk) - i - 1)
			} else {
				carryLen += int64(len(chunk))
			}
		} else {
			for len(chunk) > 0 {
				i := bytes.IndexByte(chunk, '\n')
				if i >= 0 && carryLen == 0 && i <= maxLine {
					// The common case: a whole line in the buffer, no copy.
					if err := fn(chunk[:i], cur.Lines+1); err != nil {
						return cur, reset, err
					}
					cur.Lines++
					cur.Offset += int64(i + 1)
					chunk = chunk[i+1:]
					continue
				}
				part := chunk
				if i >= 0 {
					part = chunk[:i]
				}
				if room := maxLine - len(carry); room > 0 {
					carry = append(carry, part[:min(room, len(part))]...)
				}
				carryLen += int64(len(part))
				if i < 0 {
					break
				}
				line := carry
				if carryLen > int64(maxLine) {
					line = append(carry[:maxLine:maxLine], fmt.Sprintf(CutMarker, carryLen)...)
				}
				if err := fn(line, cur.Lines+1); err != nil {
					return cur, reset, err
				}
				cur.Lines++
				cur.Offset += carryLen + 1
				carry, carryLen = carry[:0], 0
				chunk = chunk[i+1:]
			}
		}
		if rerr == io.EOF {
			return cur, reset, nil
		}
		if rerr != nil {
			return cur, reset, rerr
		}
	}
}

func fingerprint(b []byte) string {
	h := sha256.Sum256(b)
	return hex.EncodeToString(h[:8])
}

// Cursors keeps tail cursors in memory and persists them in the state store.
// Methods are safe for concurrent use (jobs of different roots use them).
type Cursors struct {
	db    *state.DB
	mu    sync.Mutex
	cur   map[string]Cursor
	dirty map[string]bool
}

const cursorNS = "cursor"

// LoadCursors reads every persisted cursor.
func LoadCursors(ctx context.Context, db *state.DB) (*Cursors, error) {
	raw, err := db.Scan(ctx, cursorNS)
	if err != nil {
		return nil, err
	}
	c := &Cursors{db: db, cur: map[string]Cursor{}, dirty: map[string]bool{}}
	for k, v := range raw {
		var cur Cursor
		if err := json.Unmarshal(v, &cur); err != nil {
			continue // a damaged cursor only means a recount
		}
		c.cur[k] = cur
	}
	return c, nil
}

// Get returns the cursor of path. A log renamed to path keeps the cursor it
// had under its old name, if that old name no longer exists.
func (c *Cursors) Get(path string) Cursor {
	c.mu.Lock()
	defer c.mu.Unlock()
	if cur, ok := c.cur[path]; ok {
		return cur
	}
	fi, err := os.Lstat(path)
	if err != nil {
		return Cursor{}
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return Cursor{}
	}
	for old, cur := range c.cur {
		if cur.Dev != uint64(st.Dev) || cur.Ino != uint64(st.Ino) {
			continue
		}
		if _, err := os.Lstat(old); errors.Is(err, fs.ErrNotExist) {
			delete(c.cur, old)
			c.dirty[old] = true
			c.cur[path] = cur
			c.dirty[path] = true
			return cur
		}
	}
	return Cursor{}
}

// Set records a cursor; Flush persists it.
func (c *Cursors) Set(path string, cur Cursor) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if old, ok := c.cur[path]; ok && old == cur {
		return
	}
	c.cur[path] = cur
	c.dirty[path] = true
}

// Delete forgets a cursor.
func (c *Cursors) Delete(path string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.cur, path)
	c.dirty[path] = true
}

// Flush writes changed cursors in one transaction.
func (c *Cursors) Flush(ctx context.Context) error {
	c.mu.Lock()
	batch := make(map[string][]byte, len(c.dirty))
	for p := range c.dirty {
		if cur, ok := c.cur[p]; ok {
			b, _ := json.Marshal(cur)
			batch[p] = b
		} else {
			batch[p] = nil
		}
	}
	c.dirty = map[string]bool{}
	c.mu.Unlock()
	if err := c.db.PutMany(ctx, cursorNS, batch); err != nil {
		c.mu.Lock()
		for p := range batch {
			c.dirty[p] = true
		}
		c.mu.Unlock()
		return fmt.Errorf("flush cursors: %w", err)
	}
	return nil
}

// Lag is how many bytes of the tailed logs are not yet read: the sum over
// cursors of the file's size past the cursor's offset.
func (c *Cursors) Lag() int64 {
	c.mu.Lock()
	paths := make(map[string]int64, len(c.cur))
	for p, cur := range c.cur {
		paths[p] = cur.Offset
	}
	c.mu.Unlock()
	var lag int64
	for p, off := range paths {
		if fi, err := os.Lstat(p); err == nil && fi.Mode().IsRegular() && fi.Size() > off {
			lag += fi.Size() - off
		}
	}
	return lag
}
