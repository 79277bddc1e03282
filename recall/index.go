package recall

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math/bits"
	"os"
	"path/filepath"
	"slices"
	"syscall"

	"github.com/cespare/xxhash/v2"

	"github.com/memwatch/memwatch/confine"
)

// The index of one file is a list of blocks of whole lines, about 64 KiB
// each, with a Bloom filter of the trigrams of their text (one hash,
// 32,768 bits: about 1 bit in 5 is set in a full block, so a query of
// three trigrams reads roughly 1 block in 100 that cannot match). A small
// block stores its set bits as a list instead. Only complete blocks are
// written, appended to the index file: the lines after the last one are
// read directly by every search, so the index is exact however fresh.
//
// File format (little endian): a 64-byte header (magic, version, the
// file's device and inode, bytes and lines covered, a hash of the last 256
// bytes covered, block count), then the blocks: offset, size, first line,
// lines, a form byte and the filter. The header is rewritten after blocks
// are appended; a reader trusts only the blocks the header counts.

const (
	blockTarget = 64 << 10
	bloomBits   = 32768
	bloomWords  = bloomBits / 64
	// sparseMax: a block with fewer set bits stores their positions.
	sparseMax  = bloomBits / 16 / 2
	headerSize = 64
	magic      = "MWRIDX01"
)

// block is one indexed run of lines.
type block struct {
	off, size    int64
	first, lines int64
	bloom        []uint64 // nil when sparse
	sparse       []uint16 // sorted set positions
}

func bitOf(g uint32) uint16 { return uint16((g * 2654435761) >> 17) }

// mayHold reports whether the block's text may hold every trigram.
func (b *block) mayHold(grams []uint32) bool {
	for _, g := range grams {
		p := bitOf(g)
		if b.bloom != nil {
			if b.bloom[p/64]&(1<<(p%64)) == 0 {
				return false
			}
		} else if _, ok := slices.BinarySearch(b.sparse, p); !ok {
			return false
		}
	}
	return true
}

// fileIndex is what an index file says of one file.
type fileIndex struct {
	dev, ino   uint64
	end, lines int64
	tailSum    uint64
	blocks     []block
}

// indexPath is where the index of rel in root is kept, under dir.
func indexPath(dir, root, rel string) string {
	return filepath.Join(dir, fmt.Sprintf("%016x.idx", xxhash.Sum64String(root+"\x00"+filepath.Clean(rel))))
}

// tailSum hashes the last 256 bytes before end: a file rewritten in place
// shows there.
func tailSum(f *os.File, end int64) (uint64, error) {
	from := max(0, end-256)
	buf := make([]byte, end-from)
	if _, err := f.ReadAt(buf, from); err != nil && !errors.Is(err, io.EOF) {
		return 0, err
	}
	return xxhash.Sum64(buf), nil
}

// readIndex loads an index file.
func readIndex(path string) (*fileIndex, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	r := bufio.NewReaderSize(f, 1<<16)
	var h [headerSize]byte
	if _, err := io.ReadFull(r, h[:]); err != nil {
		return nil, err
	}
	if string(h[:8]) != magic {
		return nil, errors.New("not a memwatch index")
	}
	le := binary.LittleEndian
	idx := &fileIndex{dev: le.Uint64(h[8:]), ino: le.Uint64(h[16:]), end: int64(le.Uint64(h[24:])), lines: int64(le.Uint64(h[32:])), tailSum: le.Uint64(h[40:])}
	n := int(le.Uint32(h[48:]))
	if n < 0 || n > 1<<24 {
		return nil, errors.New("corrupt index")
	}
	idx.blocks = make([]block, 0, n)
	var bh [29]byte
	for range n {
		if _, err := io.ReadFull(r, bh[:]); err != nil {
			return nil, fmt.Errorf("corrupt index: %w", err)
		}
		b := block{off: int64(le.Uint64(bh[0:])), size: int64(le.Uint32(bh[8:])), first: int64(le.Uint64(bh[12:])), lines: int64(le.Uint32(bh[20:]))}
		form, count := bh[24], int(le.Uint32(bh[25:]))
		switch form {
		case 0:
			b.bloom = make([]uint64, bloomWords)
			if err := binary.Read(r, le, b.bloom); err != nil {
				return nil, fmt.Errorf("corrupt index: %w", err)
			}
		case 1:
			if count > sparseMax*2 {
				return nil, errors.New("corrupt index")
			}
			b.sparse = make([]uint16, count)
			if err := binary.Read(r, le, b.sparse); err != nil {
				return nil, fmt.Errorf("corrupt index: %w", err)
			}
		default:
			return nil, errors.New("corrupt index")
		}
		idx.blocks = append(idx.blocks, b)
	}
	return idx, nil
}

// current reports whether the index still describes the open file: the
// same inode, at least as long, and the same bytes before its end.
func (idx *fileIndex) current(f *os.File, fi fs.FileInfo) bool {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok || uint64(st.Dev) != idx.dev || uint64(st.Ino) != idx.ino || fi.Size() < idx.end {
		return false
	}
	sum, err := tailSum(f, idx.end)
	return err == nil && sum == idx.tailSum
}

// index returns the index of a file when there is a current one.
func (s *searcher) index(f file) *fileIndex {
	if s.o.Index == "" {
		return nil
	}
	idx, err := readIndex(indexPath(s.o.Index, f.root.Root.Path(), f.rel))
	if err != nil {
		return nil
	}
	fh, fi, err := f.root.Root.OpenRead(f.rel)
	if err != nil {
		return nil
	}
	defer fh.Close()
	if !idx.current(fh, fi) {
		return nil
	}
	s.stats.Indexed++
	s.stats.Blocks += len(idx.blocks)
	return idx
}

// builder collects the trigrams of one block.
type builder struct {
	bloom []uint64
	set   int
}

func (b *builder) add(text []byte) {
	t := text
	if !isASCII(t) {
		t = bytes.ToLower(t)
	}
	for i := 0; i+3 <= len(t); i++ {
		a, c, d := t[i], t[i+1], t[i+2]
		if a >= 'A' && a <= 'Z' {
			a += 32
		}
		if c >= 'A' && c <= 'Z' {
			c += 32
		}
		if d >= 'A' && d <= 'Z' {
			d += 32
		}
		p := bitOf(gram(a, c, d))
		w, m := p/64, uint64(1)<<(p%64)
		if b.bloom[w]&m == 0 {
			b.bloom[w] |= m
			b.set++
		}
	}
}

// encode writes a block.
func (b *builder) encode(w io.Writer, off, size, first, lines int64) error {
	le := binary.LittleEndian
	var bh [29]byte
	le.PutUint64(bh[0:], uint64(off))
	le.PutUint32(bh[8:], uint32(size))
	le.PutUint64(bh[12:], uint64(first))
	le.PutUint32(bh[20:], uint32(lines))
	if b.set <= sparseMax {
		bh[24] = 1
		le.PutUint32(bh[25:], uint32(b.set))
		sparse := make([]uint16, 0, b.set)
		for wi, word := range b.bloom {
			for word != 0 {
				tz := bits.TrailingZeros64(word)
				sparse = append(sparse, uint16(wi*64+tz))
				word &= word - 1
			}
		}
		if _, err := w.Write(bh[:]); err != nil {
			return err
		}
		return binary.Write(w, le, sparse)
	}
	le.PutUint32(bh[25:], uint32(bloomWords))
	if _, err := w.Write(bh[:]); err != nil {
		return err
	}
	return binary.Write(w, le, b.bloom)
}

// IndexOptions tune IndexFile.
type IndexOptions struct {
	MaxLine   int   // as the search's MaxLine (0: 1 MiB)
	BlockSize int64 // bytes per block (0: 64 KiB); tests use small ones
}

// IndexFile brings the index of rel (a file of root, searched as kind)
// up to date in dir: complete blocks of the lines written since are
// appended; a file rewritten other than by appending is indexed anew. It
// returns how many bytes it indexed.
func IndexFile(dir string, root *confine.Root, rel string, kind Kind, o IndexOptions) (int64, error) {
	maxLine := o.MaxLine
	if maxLine <= 0 {
		maxLine = 1 << 20
	}
	target := o.BlockSize
	if target <= 0 {
		target = blockTarget
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return 0, err
	}
	src, fi, err := root.OpenRead(rel)
	if err != nil {
		return 0, err
	}
	defer src.Close()
	path := indexPath(dir, root.Path(), rel)
	idx, err := readIndex(path)
	if err != nil || !idx.current(src, fi) {
		if fi.Size() < target {
			// Too small to index: every search reads it whole.
			if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
				return 0, err
			}
			return 0, nil
		}
		st := fi.Sys().(*syscall.Stat_t)
		idx = &fileIndex{dev: uint64(st.Dev), ino: uint64(st.Ino)}
		if err := writeNew(path, idx); err != nil {
			return 0, err
		}
	}
	if fi.Size()-idx.end < target {
		return 0, nil // the rest is read by every search
	}
	out, err := os.OpenFile(path, os.O_WRONLY, 0o600)
	if err != nil {
		return 0, err
	}
	defer out.Close()
	tail, err := out.Seek(0, io.SeekEnd)
	if err != nil {
		return 0, err
	}
	// Only the blocks the header counts are trusted: drop anything after them.
	if want := blocksEnd(idx); tail != want {
		if err := out.Truncate(want); err != nil {
			return 0, err
		}
		tail = want
	}
	w := bufio.NewWriterSize(out, 1<<16)
	if _, err := out.Seek(tail, io.SeekStart); err != nil {
		return 0, err
	}
	start := idx.end
	b := &builder{bloom: make([]uint64, bloomWords)}
	blockOff, line := idx.end, idx.lines
	var blockLines int64
	rd := bufio.NewReaderSize(io.NewSectionReader(src, idx.end, fi.Size()-idx.end), 1<<20)
	pos := idx.end
	for {
		raw, n, err := readLine(rd, maxLine)
		if err != nil {
			break // io.EOF, or a partial last line: left for later
		}
		pos += n
		line++
		blockLines++
		b.add(searchText(kind, raw))
		if pos-blockOff >= target {
			if err := b.encode(w, blockOff, pos-blockOff, line-blockLines+1, blockLines); err != nil {
				return 0, err
			}
			idx.blocks = append(idx.blocks, block{})
			idx.end, idx.lines = pos, line
			blockOff, blockLines = pos, 0
			b = &builder{bloom: make([]uint64, bloomWords)}
		}
	}
	if err := w.Flush(); err != nil {
		return 0, err
	}
	if idx.end == start {
		return 0, nil
	}
	if idx.tailSum, err = tailSum(src, idx.end); err != nil {
		return 0, err
	}
	if err := out.Sync(); err != nil {
		return 0, err
	}
	if _, err := out.WriteAt(header(idx), 0); err != nil {
		return 0, err
	}
	return idx.end - start, nil
}

// blocksEnd is where the counted blocks of an index end in its file.
func blocksEnd(idx *fileIndex) int64 {
	n := int64(headerSize)
	for _, b := range idx.blocks {
		n += 29
		if b.bloom != nil {
			n += bloomWords * 8
		} else {
			n += int64(len(b.sparse)) * 2
		}
	}
	return n
}

func header(idx *fileIndex) []byte {
	h := make([]byte, headerSize)
	le := binary.LittleEndian
	copy(h, magic)
	le.PutUint64(h[8:], idx.dev)
	le.PutUint64(h[16:], idx.ino)
	le.PutUint64(h[24:], uint64(idx.end))
	le.PutUint64(h[32:], uint64(idx.lines))
	le.PutUint64(h[40:], idx.tailSum)
	le.PutUint32(h[48:], uint32(len(idx.blocks)))
	return h
}

// writeNew replaces the index file with an empty one for idx.
func writeNew(path string, idx *fileIndex) error {
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, header(idx), 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// readLine reads one complete line (without its newline), keeping at most
// max bytes of it, and returns how many bytes it spanned with the newline.
// A partial last line is an io.ErrUnexpectedEOF.
func readLine(r *bufio.Reader, max int) ([]byte, int64, error) {
	var line []byte
	var n int64
	for {
		chunk, err := r.ReadSlice('\n')
		n += int64(len(chunk))
		if room := max - len(line); room > 0 {
			line = append(line, chunk[:min(room, len(chunk))]...)
		}
		switch {
		case err == nil:
			return bytes.TrimSuffix(line, []byte{'\n'}), n, nil
		case errors.Is(err, bufio.ErrBufferFull):
			continue
		case errors.Is(err, io.EOF) && n > 0:
			return nil, n, io.ErrUnexpectedEOF
		default:
			return nil, n, err
		}
	}
}
