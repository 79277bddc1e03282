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

// Advance reads path from cur to its last complete line. fn, when not nil,
// gets every new complete line (without its newline) and its 1-based number;
// an error from fn stops the read and returns the cursor before that line.
// A partial last line is left for a later call.
func Advance(root *confine.Root, rel string, cur Cursor, fn func(line []byte, n int64) error) (Cursor, Reset, error) {
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
	var carry []byte // bytes of a line that spans buffers
	for {
		n, rerr := f.Read(buf)
		chunk := buf[:n]
		if fn == nil {
			// Fast path: count only.
			if i := bytes.LastIndexByte(chunk, '\n'); i >= 0 {
				cur.Lines += int64(bytes.Count(chunk[:i+1], []byte{'\n'}))
				cur.Offset += int64(len(carry) + i + 1)
				carry = append(carry[:0], chunk[i+1:]...)
			} else {
				carry = append(carry, chunk...)
			}
		} else {
			for len(chunk) > 0 {
				i := bytes.IndexByte(chunk, '\n')
				if i < 0 {
					carry = append(carry, chunk...)
					break
				}
				line := chunk[:i]
				if len(carry) > 0 {
					line = append(carry, line...)
				}
				if err := fn(line, cur.Lines+1); err != nil {
					return cur, reset, err
				}
				cur.Lines++
				cur.Offset += int64(len(line) + 1)
				carry = carry[:0]
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
