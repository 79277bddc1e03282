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
	"sort"
	"sync"
	"syscall"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/cespare/xxhash/v2"

	"github.com/memwatch/memwatch/confine"
	"github.com/memwatch/memwatch/recall/analysis"
	"github.com/memwatch/memwatch/session"
)

// The index of one file is a list of blocks of whole lines, about 128 KiB
// each, with a Bloom filter of the trigrams of their text (one hash,
// 32,768 bits: about 1 bit in 4 is set in a full block of a home's
// sessions, so a query of three trigrams reads roughly 1 block in 70 that
// cannot match, and a rare word of eight almost none). A small block
// stores its set bits as a list instead. Blocks of 64 KiB had filters a
// sixteenth of the logs' size, and a search checked twice as many. Only
// complete blocks are written, appended to the index file: the lines
// after the last one are read directly by every search, so the index is
// exact however fresh.
//
// File format (little endian): an 80-byte header (magic, version, the
// file's device and inode, bytes and lines covered, a hash of the last 256
// bytes covered, block count, where the blocks end, the size of a last
// partial block, the file's change time when it was read, 8 bytes
// reserved), then the blocks: offset, size, first line,
// lines, a form byte and the filter. The header is rewritten after blocks
// are appended; a reader trusts only the blocks the header counts.

const (
	blockTarget = 128 << 10
	bloomBits   = 32768
	bloomWords  = bloomBits / 64
	// sparseMax: a block with fewer set bits stores their positions.
	sparseMax  = bloomBits / 16 / 2
	headerSize = 80
	magic      = "MWRIDX03"
)

// block is one indexed run of lines. Its filter is a view of the read or mapped
// index file.
type block struct {
	off, size    int64
	first, lines int64
	bloom        []byte // bloomBits bits, little endian; nil when sparse
	sparse       []byte // sorted little-endian uint16 set positions
}

func bitOf(g uint32) uint16 { return uint16((g * 2654435761) >> 17) }

// mayHold reports whether the block's text may hold every trigram.
func (b *block) mayHold(grams []uint32) bool {
	for _, g := range grams {
		p := bitOf(g)
		if b.bloom != nil {
			if b.bloom[p>>3]&(1<<(p&7)) == 0 {
				return false
			}
		} else if !sparseHas(b.sparse, p) {
			return false
		}
	}
	return true
}

// sparseHas reports whether the sorted positions s hold p. The positions
// are hashes, spread evenly over the filter: each probe guesses where p
// would be from the values around it (interpolation), a few probes where
// a binary search takes ten.
func sparseHas(s []byte, p uint16) bool {
	le := binary.LittleEndian
	lo, hi := 0, len(s)/2-1
	if hi < 0 {
		return false
	}
	vlo, vhi := int(le.Uint16(s[0:])), int(le.Uint16(s[2*hi:]))
	x := int(p)
	for lo <= hi && x >= vlo && x <= vhi {
		if vhi == vlo {
			return vlo == x
		}
		m := lo + (x-vlo)*(hi-lo)/(vhi-vlo)
		v := int(le.Uint16(s[2*m:]))
		switch {
		case v == x:
			return true
		case v < x:
			lo = m + 1
			if lo <= hi {
				vlo = int(le.Uint16(s[2*lo:]))
			}
		default:
			hi = m - 1
			if hi >= lo {
				vhi = int(le.Uint16(s[2*hi:]))
			}
		}
	}
	return false
}

// fileIndex is what an index file says of one file.
type fileIndex struct {
	dev, ino   uint64
	end, lines int64
	tailSum    uint64
	count      int   // blocks
	blocksEnd  int64 // where the counted blocks end in the index file
	blocks     []block
	data       []byte // the index file, when blocks were loaded
	mapped     bool   // data is mapped (a large index), not read
	kept       bool   // an IndexCache holds it: shared, read-only, never closed
	// partial is the encoded size of the last block when it holds the
	// lines after the last full block (the next pass replaces it): a
	// note that stopped growing is covered to its end.
	partial int64
	// ctime is the file's change time (ns) when it was read, or 0 when it
	// was too recent to vouch for the content (settledCtime). A file
	// whose change time is still this one is unchanged since: a search
	// that finds no block able to match does not even open it.
	ctime int64
	// unsynced: the header was written with no fsync of the blocks it
	// counts before it (IndexCache.DeferSync). A power cut may have kept
	// the header and lost or torn those blocks, so a reader checks every
	// block's filter against its hash (each block's header holds one)
	// unless this process wrote or checked it (IndexCache.trusts); a
	// torn block is a corrupt index, read around, never a hidden line.
	// SyncIndexes makes the blocks durable and clears it.
	unsynced bool
}

// unsyncedBit marks an unsynced header, in its block count's high bit
// (a count is at most 1<<26).
const unsyncedBit = 1 << 31

// settledCtime is the change time of a file statted at now, when it is
// old enough that a later write must change it: 0 otherwise. Change times
// move in ticks (of the kernel's coarse clock, or whole seconds on some
// file systems), so a write in the tick of the stat could leave it as it
// was.
func settledCtime(st *syscall.Stat_t, now time.Time) int64 {
	c := confine.ChangeTime(st)
	margin := int64(50 * time.Millisecond)
	if c%1e9 == 0 {
		margin = int64(2 * time.Second) // whole seconds: a coarse file system
	}
	if c <= 0 || now.UnixNano()-c < margin {
		return 0
	}
	return c
}

// mapAbove is the index size from which it is mapped rather than read: a
// small one (a notes file's, a few blocks) costs less to read in one pread
// than to map and unmap, which flushes the TLBs of every thread.
const mapAbove = 1 << 20

// close unmaps the index file.
func (idx *fileIndex) close() {
	if idx != nil && !idx.kept && idx.data != nil {
		if idx.mapped {
			syscall.Munmap(idx.data)
		}
		idx.data, idx.mapped, idx.blocks = nil, false, nil
	}
}

// indexPath is where the index of rel in root is kept, under dir.
func indexPath(dir, root, rel string) string {
	// Built by hand: a search names the index of every file it covers.
	b := make([]byte, 0, len(dir)+21)
	if dir != "" {
		b = append(b, filepath.Clean(dir)...)
		if b[len(b)-1] != filepath.Separator {
			b = append(b, filepath.Separator)
		}
	}
	h := xxhash.Sum64String(root + "\x00" + filepath.Clean(rel))
	for sh := 60; sh >= 0; sh -= 4 {
		b = append(b, "0123456789abcdef"[h>>sh&15])
	}
	return string(append(b, ".idx"...))
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

// readHeader reads what an index file's header says.
func readHeader(f *os.File) (*fileIndex, error) {
	var h [headerSize]byte
	if _, err := io.ReadFull(f, h[:]); err != nil {
		return nil, err
	}
	return decodeHeader(h[:])
}

// decodeHeader decodes a header of headerSize bytes.
func decodeHeader(h []byte) (*fileIndex, error) {
	if string(h[:8]) != magic {
		return nil, errors.New("not a memwatch index")
	}
	le := binary.LittleEndian
	count := le.Uint32(h[48:])
	idx := &fileIndex{dev: le.Uint64(h[8:]), ino: le.Uint64(h[16:]), end: int64(le.Uint64(h[24:])), lines: int64(le.Uint64(h[32:])),
		tailSum: le.Uint64(h[40:]), count: int(count &^ unsyncedBit), blocksEnd: int64(le.Uint64(h[52:])), partial: int64(le.Uint32(h[60:])),
		ctime: int64(le.Uint64(h[64:])), unsynced: count&unsyncedBit != 0}
	if idx.count < 0 || idx.count > 1<<26 || idx.blocksEnd < headerSize || idx.end < 0 || idx.lines < 0 {
		return nil, errors.New("corrupt index")
	}
	return idx, nil
}

// readIndex reads an index file's header, and with blocks maps the file
// and lists its blocks (close unmaps it); verify checks every filter too
// (the daemon does, once per run: searches trust the structure). A search
// reads hundreds of notes' small indexes: each is read with one pread into
// a buffer, through the bare system calls (an *os.File registers with the
// poller and sets a finalizer, most of the cost of a 5 KiB index). scratch,
// when given, is that buffer (smallIndex bytes, reused while the index is
// not closed).
func readIndex(path string, blocks, verify bool, scratch []byte, c *IndexCache) (*fileIndex, error) {
	fd, err := syscall.Open(path, syscall.O_RDONLY|syscall.O_CLOEXEC, 0)
	if err != nil {
		return nil, &fs.PathError{Op: "open", Path: path, Err: err}
	}
	defer syscall.Close(fd)
	return readIndexFD(fd, path, blocks, verify, scratch, true, c)
}

// readIndexFD is readIndex on an open index file; mapOK lets it map a
// large one (a copy the daemon keeps is read instead: a mapping of a file
// the indexer truncates would fault). An unsynced index that c (nil:
// none) does not trust is read and checked whole, whatever was asked.
func readIndexFD(fd int, path string, blocks, verify bool, scratch []byte, mapOK bool, c *IndexCache) (*fileIndex, error) {
	first := headerSize
	if blocks {
		first = smallIndex
	}
	buf := scratch
	if len(buf) < first {
		buf = make([]byte, first)
	}
	n, err := pread(fd, buf[:first], 0)
	if err != nil {
		return nil, fmt.Errorf("read index: %w", err)
	}
	if n < headerSize {
		return nil, errors.New("not a memwatch index")
	}
	idx, err := decodeHeader(buf[:headerSize])
	if err == nil && idx.unsynced && !c.trusts(path) {
		blocks, verify = true, true
	}
	if err != nil || !blocks || idx.count == 0 {
		return idx, err
	}
	if int64(idx.count) > (idx.blocksEnd-headerSize)/blockHeader {
		return nil, errors.New("corrupt index: shorter than its header says")
	}
	// readAll reads the blocks into memory (what the first pread did not).
	readAll := func() error {
		idx.data = make([]byte, idx.blocksEnd)
		copy(idx.data, buf[:n])
		m, err := pread(fd, idx.data[n:], int64(n))
		if err != nil {
			return fmt.Errorf("read index: %w", err)
		}
		if n+m < len(idx.data) {
			return errors.New("corrupt index: shorter than its header says")
		}
		return nil
	}
	switch {
	case idx.blocksEnd <= int64(n):
		idx.data = buf[:idx.blocksEnd]
	case idx.blocksEnd < mapAbove:
		if err := readAll(); err != nil {
			return nil, err
		}
	default:
		// A large index: its header's size is checked against the file's
		// before anything that size is mapped or allocated.
		var st syscall.Stat_t
		if err := syscall.Fstat(fd, &st); err != nil {
			return nil, &fs.PathError{Op: "stat", Path: path, Err: err}
		}
		if st.Size < idx.blocksEnd {
			return nil, errors.New("corrupt index: shorter than its header says")
		}
		if !mapOK {
			if err := readAll(); err != nil {
				return nil, err
			}
			break
		}
		data, err := syscall.Mmap(fd, 0, int(idx.blocksEnd), syscall.PROT_READ, mmapFlags)
		if err != nil {
			return nil, fmt.Errorf("map index: %w", err)
		}
		idx.data, idx.mapped = data, true
	}
	if err := idx.parse(verify); err != nil {
		idx.close()
		return nil, err
	}
	return idx, nil
}

// smallIndex is what readIndex reads first: all of a notes file's index
// (a 140 KiB note's is 5 KiB).
const smallIndex = 16 << 10

// pread reads into b from off until b is full or the file ends.
func pread(fd int, b []byte, off int64) (int, error) {
	n := 0
	for n < len(b) {
		m, err := syscall.Pread(fd, b[n:], off+int64(n))
		if err == syscall.EINTR {
			continue
		}
		if err != nil {
			return n, err
		}
		if m == 0 {
			break
		}
		n += m
	}
	return n, nil
}

// parse lists the blocks of the index file's data, checking every bound, and
// with verify every filter's hash.
func (idx *fileIndex) parse(verify bool) error {
	le := binary.LittleEndian
	data := idx.data
	idx.blocks = make([]block, 0, idx.count)
	at := int64(headerSize)
	var end int64
	for range idx.count {
		if int64(len(data))-at < blockHeader {
			return errors.New("corrupt index")
		}
		bh := data[at : at+blockHeader]
		b := block{off: int64(le.Uint64(bh[0:])), size: int64(le.Uint32(bh[8:])), first: int64(le.Uint64(bh[12:])), lines: int64(le.Uint32(bh[20:]))}
		form, count := bh[24], int64(le.Uint32(bh[25:]))
		at += blockHeader
		var n int64
		switch form {
		case 0:
			n = bloomBits / 8
		case 1:
			if count > sparseMax {
				return errors.New("corrupt index")
			}
			n = 2 * count
		default:
			return errors.New("corrupt index")
		}
		if int64(len(data))-at < n || b.off != end || b.size <= 0 || b.first < 1 {
			return errors.New("corrupt index")
		}
		filter := data[at : at+n : at+n]
		if verify && xxhash.Sum64(filter) != le.Uint64(bh[29:]) {
			return errors.New("corrupt index: a filter does not match its hash")
		}
		if form == 0 {
			b.bloom = filter
		} else {
			b.sparse = filter
		}
		at += n
		end = b.off + b.size
		idx.blocks = append(idx.blocks, b)
	}
	if end != idx.end || at != idx.blocksEnd {
		return errors.New("corrupt index")
	}
	return nil
}

// Covered reports how many bytes of rel (in the root at rootPath) the
// index in dir covers; every search reads the rest directly.
func Covered(dir, rootPath, rel string) int64 {
	f, err := openIndexFile(indexPath(dir, rootPath, rel), os.O_RDONLY, 0)
	if err != nil {
		return 0
	}
	defer f.Close()
	idx, err := readHeader(f)
	if err != nil {
		return 0
	}
	return idx.end
}

// current reports whether the index still describes the open file: the
// same inode, at least as long, and either the change time it was indexed
// at (nothing written since) or the same bytes before its end. A file
// written since but no longer was rewritten in place: not current, though
// its last bytes may be the same.
func (idx *fileIndex) current(f *os.File, fi fs.FileInfo) bool {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok || uint64(st.Dev) != idx.dev || uint64(st.Ino) != idx.ino || fi.Size() < idx.end {
		return false
	}
	if idx.ctime != 0 {
		if confine.ChangeTime(st) == idx.ctime {
			return true
		}
		if fi.Size() == idx.end {
			return false
		}
	}
	sum, err := tailSum(f, idx.end)
	return err == nil && sum == idx.tailSum
}

// index returns the index of f, as listed, when there is one for that
// very file (device, inode) no longer than it; unchanged says the file's
// change time is the one it was indexed at. Whether it still describes
// the file once opened is for current to say.
func (s *searcher) index(f file) (idx *fileIndex, unchanged bool) {
	dir := f.root.index(s.o)
	if dir == "" || f.gz() {
		return nil, false
	}
	path := f.indexIn(dir)
	idx = s.o.Indexes.trustedKept(dir, path)
	if idx == nil {
		var ok bool
		if idx, ok = s.readIndex(dir, path); !ok {
			return nil, false
		}
	}
	if idx.dev != f.dev || idx.ino != f.ino || f.size < idx.end {
		idx.close()
		return nil, false
	}
	return idx, idx.ctime != 0 && idx.ctime == f.ctime
}

// readIndex reads the index at path in dir, or from the cache after a
// stat; false when there is none.
func (s *searcher) readIndex(dir, path string) (*fileIndex, bool) {
	// An index the daemon keeps needs no listing (read checks it by a
	// stat); else one listing of the directory instead of a failed open
	// per file never indexed.
	if !s.o.Indexes.has(path) {
		if s.indexes[dir] == nil {
			if s.indexes == nil {
				s.indexes = map[string]map[string]bool{}
			}
			s.indexes[dir] = map[string]bool{}
			ents, _ := os.ReadDir(dir)
			for _, e := range ents {
				s.indexes[dir][e.Name()] = true
			}
		}
		if !s.indexes[dir][filepath.Base(path)] {
			return nil, false
		}
	}
	if s.idxBuf == nil {
		s.idxBuf = make([]byte, smallIndex)
	}
	idx, err := s.o.Indexes.read(path, s.idxBuf)
	return idx, err == nil
}

// usable is idx when it still describes the opened file (counted in the
// search's figures), else nil (closed).
func (s *searcher) usable(idx *fileIndex, fh *os.File, fi fs.FileInfo) *fileIndex {
	if idx == nil {
		return nil
	}
	if !idx.current(fh, fi) {
		idx.close()
		return nil
	}
	s.counted(idx)
	return idx
}

// counted adds a used index to the search's figures.
func (s *searcher) counted(idx *fileIndex) {
	s.stats.Indexed++
	s.stats.Blocks += len(idx.blocks)
}

// mayHoldAny reports whether any block may hold every trigram.
func (idx *fileIndex) mayHoldAny(grams []uint32) bool {
	for i := range idx.blocks {
		if idx.blocks[i].mayHold(grams) {
			return true
		}
	}
	return false
}

// builder collects the trigrams of one block.
type builder struct {
	bloom *[bloomWords]uint64
	set   int // the bits set, counted by encode
}

func newBuilder() *builder { return &builder{bloom: new([bloomWords]uint64)} }

// lowerASCII maps each byte to its ASCII lower case.
var lowerASCII = func() (t [256]byte) {
	for i := range t {
		t[i] = byte(i)
		if i >= 'A' && i <= 'Z' {
			t[i] += 32
		}
	}
	return t
}()

// add sets the bits of text's trigrams, lowercased as bytes.ToLower
// lowercases (query.Gram, bitOf): a rolling gram, one table lookup an
// ASCII byte, a rune lowercased in place (bytes.ToLower copied a text
// with one arrow of Claude Code's Read rune by rune: most of the trigram
// pass, a tenth of a home's catch-up).
func (b *builder) add(text []byte) {
	bloom := b.bloom
	var g uint32
	n := 0 // the bytes rolled into g, up to 3
	for i := 0; i < len(text); {
		if c := text[i]; c < utf8.RuneSelf {
			// The loop of most bytes: written out, not through a closure.
			g = (g<<8 | uint32(lowerASCII[c])) & 0xffffff
			i++
			if n < 2 {
				n++
				continue
			}
			p := bitOf(g)
			bloom[p/64%bloomWords] |= 1 << (p % 64)
			continue
		}
		r, w := utf8.DecodeRune(text[i:])
		lower := text[i : i+w] // a rune lowercase already: its own bytes
		if r == utf8.RuneError || !caseless(r) && unicode.ToLower(r) != r {
			var buf [utf8.UTFMax]byte
			lower = utf8.AppendRune(buf[:0], unicode.ToLower(r))
		}
		for _, c := range lower {
			g = (g<<8 | uint32(c)) & 0xffffff
			if n < 2 {
				n++
				continue
			}
			p := bitOf(g)
			bloom[p/64%bloomWords] |= 1 << (p % 64)
		}
		i += w
	}
}

// caseless reports runes of blocks without case (arrows, mathematical
// operators, technical symbols), told without the Unicode tables: Claude
// Code's "→" starts every line of every file it reads. TestCaseless checks
// the range against them.
func caseless(r rune) bool { return r >= 0x2190 && r < 0x2400 }

// blockHeader is the size of a block's header: offset, size, first line,
// lines, form, count and a hash of its filter.
const blockHeader = 37

// encode writes a block.
func (b *builder) encode(w io.Writer, off, size, first, lines int64) error {
	le := binary.LittleEndian
	var bh [blockHeader]byte
	le.PutUint64(bh[0:], uint64(off))
	le.PutUint32(bh[8:], uint32(size))
	le.PutUint64(bh[12:], uint64(first))
	le.PutUint32(bh[20:], uint32(lines))
	b.set = 0
	for _, w := range b.bloom {
		b.set += bits.OnesCount64(w)
	}
	var filter []byte
	if b.set <= sparseMax {
		bh[24] = 1
		le.PutUint32(bh[25:], uint32(b.set))
		filter = make([]byte, 0, 2*b.set)
		for wi, word := range b.bloom {
			for word != 0 {
				tz := bits.TrailingZeros64(word)
				filter = le.AppendUint16(filter, uint16(wi*64+tz))
				word &= word - 1
			}
		}
	} else {
		le.PutUint32(bh[25:], uint32(bloomWords))
		filter = make([]byte, 0, bloomBits/8)
		for _, word := range b.bloom {
			filter = le.AppendUint64(filter, word)
		}
	}
	le.PutUint64(bh[29:], xxhash.Sum64(filter))
	if _, err := w.Write(bh[:]); err != nil {
		return err
	}
	_, err := w.Write(filter)
	return err
}

// size is how many bytes encode writes for the block.
func (b *builder) size() int64 {
	if b.set <= sparseMax {
		return blockHeader + 2*int64(b.set)
	}
	return blockHeader + bloomBits/8
}

// IndexOptions tune IndexFile.
type IndexOptions struct {
	MaxLine   int   // as the search's MaxLine (0: 1 MiB)
	BlockSize int64 // bytes per block (0: 128 KiB); tests use small ones
	// SegPostings bounds the postings of a term segment built in one go
	// (0: maxSegPostings); tests use few.
	SegPostings int
	// Verify checks every block of an existing index first and starts it
	// anew when one is corrupt.
	Verify bool
	// Listing, when given, is the index directory's term segments as
	// listed once for many files (nil: listed for each).
	Listing *SegmentListing
	// Cache, when given, forgets its copy of the index written (see
	// IndexCache.TrustWrites).
	Cache *IndexCache
	// Analyzer, when given, analyzes the text (its stems cached across
	// files: a home's sessions share most of their words); nil: a new one.
	Analyzer *analysis.Analyzer
	// Lines, when given, is a capture's decode of the log's new lines
	// (LineMemo), used for those the file still holds as they were.
	Lines *LineMemo
}

// IndexFile brings the indexes of rel (a file of root, searched as kind)
// up to date in dir: complete blocks of the lines written since are
// appended to its trigram index, and its term segments (terms.go) cover
// every complete line; a file rewritten other than by appending is
// indexed anew. It returns how many bytes it indexed.
func IndexFile(dir string, root *confine.Root, rel string, kind Kind, o IndexOptions) (int64, error) {
	memo := &lineMemo{room: maxLineMemo}
	if o.Lines != nil && kind == Log {
		memo = &o.Lines.m
	}
	path := indexPath(dir, root.Path(), rel)
	defer o.Cache.lockWrite(path)()
	defer o.Cache.forget(path)
	n, err := indexBlocks(dir, root, rel, kind, o, memo)
	if err != nil {
		return n, err
	}
	t, err := indexTerms(dir, root, rel, kind, o, memo)
	return max(n, t), err
}

// maxLineMemo bounds the text a lineMemo keeps.
const maxLineMemo = 16 << 20

// lineMemo carries the lines one pass over a file decoded to the next, by
// offset: the trigram pass's to the term pass, a capture's to both
// (LineMemo), so a log's line is parsed once (decoding JSON was a third
// of indexing a home); past room bytes a pass decodes again. A line is
// taken only with the length and hash it was kept with: the file may have
// been rewritten between two passes, each of which opens it.
type lineMemo struct {
	lines []memoLine // by offset, increasing
	next  int        // the line after the last one found
	room  int
}

type memoLine struct {
	off int64
	n   int
	sum uint64 // xxhash of the line
	lt  lineText
}

// put keeps the line raw (its hash sum) at off, decoded as lt; lines are
// kept in increasing offsets (one before the last kept is not).
func (m *lineMemo) put(off int64, raw []byte, sum uint64, lt lineText) {
	if m == nil || m.room <= 0 {
		return
	}
	if len(lt.search) > m.room {
		m.room = 0
		return
	}
	if k := len(m.lines); k > 0 && m.lines[k-1].off >= off {
		return
	}
	m.room -= len(lt.search)
	m.lines = append(m.lines, memoLine{off: off, n: len(raw), sum: sum, lt: lt})
}

// get returns the line kept at off if it is raw, asked mostly in
// increasing offsets.
func (m *lineMemo) get(off int64, raw []byte) (lineText, bool) {
	if m == nil || len(m.lines) == 0 {
		return lineText{}, false
	}
	i := m.next
	if i >= len(m.lines) || m.lines[i].off != off {
		i = sort.Search(len(m.lines), func(k int) bool { return m.lines[k].off >= off })
		if i == len(m.lines) || m.lines[i].off != off {
			return lineText{}, false
		}
	}
	l := &m.lines[i]
	if l.n != len(raw) || l.sum != xxhash.Sum64(raw) {
		return lineText{}, false
	}
	m.next = i + 1
	return l.lt, true
}

// LineMemo is a capture's decode of a log's new lines, handed to the
// index built right after it (IndexOptions.Lines): a line parsed once,
// where the capture told messages by a parse of its own and the index
// decoded the line again. One LineMemo serves one IndexFile; not safe for
// concurrent use.
type LineMemo struct{ m lineMemo }

// NewLineMemo returns an empty memo.
func NewLineMemo() *LineMemo { return &LineMemo{m: lineMemo{room: maxLineMemo}} }

// Message decodes the whole log line at file offset off (sum its xxhash)
// as the index reads it, keeps it, and reports whether it is a
// conversation message, as session.IsMessage does. Past the memo's room
// it asks session.IsMessage alone.
func (l *LineMemo) Message(off int64, line []byte, sum uint64) bool {
	if l.m.room <= 0 {
		return session.IsMessage(line, false)
	}
	lt := decodeLineText(Log, line)
	l.m.put(off, line, sum, lt)
	return lt.msg
}

// lineText is a raw line as recall reads it: the text queries match
// (searchTextID), the message's id when the agent gives one, and the
// ranked search's document (search[doc:], none when doc < 0: metadata, a
// blank line) and time.
type lineText struct {
	search []byte
	id     string
	doc    int
	when   time.Time
	msg    bool // a conversation message (session.IsMessage)
}

func decodeLineText(k Kind, raw []byte) lineText {
	raw = trimCR(raw)
	if k == Text {
		doc := 0
		if len(bytes.TrimSpace(raw)) == 0 {
			doc = -1
		}
		return lineText{search: raw, doc: doc}
	}
	m := session.Decode(raw)
	role := m.Role
	switch {
	case m.Raw:
		role = "raw"
	case m.Meta:
		role = "meta"
	}
	search := make([]byte, 0, len(role)+2+len(m.Text)) // the text copied once
	search = append(append(append(search, role...), ": "...), m.Text...)
	lt := lineText{search: search, id: m.ID, doc: len(role) + 2, when: m.Time, msg: m.Role != "" && !m.Meta && !m.Raw}
	if m.Meta {
		lt.doc, lt.when = -1, time.Time{}
	}
	return lt
}

// indexBlocks brings the trigram index up to date.
func indexBlocks(dir string, root *confine.Root, rel string, kind Kind, o IndexOptions, memo *lineMemo) (int64, error) {
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
	now := time.Now() // before the stat: see settledCtime
	src, fi, err := root.OpenRead(rel)
	if err != nil {
		return 0, err
	}
	defer src.Close()
	ctime := settledCtime(fi.Sys().(*syscall.Stat_t), now)
	path := indexPath(dir, root.Path(), rel)
	idx, err := readIndex(path, o.Verify, o.Verify, nil, o.Cache)
	idx.close() // only the header is used from here
	if err == nil && idx.unsynced && o.Cache.defersSync() {
		o.Cache.markUnsynced(path) // checked whole (readIndexFD): SyncIndexes clears it
	}
	var out *os.File
	created := false
	if err != nil || !idx.current(src, fi) {
		// Every file gets an index, however small: a home is thousands of
		// ordinary sessions, and a search that read each whole would read
		// them all for a rare word.
		st := fi.Sys().(*syscall.Stat_t)
		idx = &fileIndex{dev: uint64(st.Dev), ino: uint64(st.Ino), blocksEnd: headerSize}
		if errors.Is(err, fs.ErrNotExist) && fi.Size() > 0 {
			// The first index of the file: made in place, its header
			// (zeros, no index to a reader) written last. A home's first
			// start makes thousands: one file each, not one renamed.
			// Failing, it is replaced as any other is.
			if f, err := openIndexFile(path, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600); err == nil {
				out, created = f, true
			}
		}
		if out == nil {
			if err := writeNew(path, idx); err != nil {
				return 0, err
			}
		}
	}
	if fi.Size() == idx.end {
		// Nothing new. A file indexed too soon after a write to vouch for
		// it by its change time can be now.
		if fi.Size() == idx.end && ctime != 0 && idx.ctime != ctime && idx.count > 0 {
			idx.ctime = ctime
			return 0, rewriteHeader(path, idx)
		}
		return 0, nil
	}
	if out == nil {
		if out, err = openIndexFile(path, os.O_RDWR, 0o600); err != nil {
			return 0, err
		}
	}
	defer out.Close()
	if idx.partial > 0 {
		// The last block covers what followed the last full one: it is
		// written again with what was added since.
		var bh [blockHeader]byte
		le := binary.LittleEndian
		_, rerr := out.ReadAt(bh[:], idx.blocksEnd-idx.partial)
		off, first := int64(le.Uint64(bh[0:])), int64(le.Uint64(bh[12:]))
		if rerr != nil || off > idx.end || first < 1 || idx.count < 1 || idx.blocksEnd-idx.partial < headerSize {
			// Corrupt (cut short, overwritten): indexed anew.
			st := fi.Sys().(*syscall.Stat_t)
			idx = &fileIndex{dev: uint64(st.Dev), ino: uint64(st.Ino), blocksEnd: headerSize}
		} else {
			idx.end, idx.lines = off, first-1
			idx.count--
			idx.blocksEnd -= idx.partial
			idx.partial = 0
		}
	}
	tail, err := out.Seek(0, io.SeekEnd)
	if err != nil {
		return 0, err
	}
	// Only the blocks the header counts are trusted: drop anything after them.
	if tail != idx.blocksEnd {
		if err := out.Truncate(idx.blocksEnd); err != nil {
			return 0, err
		}
		tail = idx.blocksEnd
	}
	w := blockWriters.Get().(*bufio.Writer)
	w.Reset(out)
	defer func() { w.Reset(nil); blockWriters.Put(w) }()
	if _, err := out.Seek(tail, io.SeekStart); err != nil {
		return 0, err
	}
	start := idx.end
	b := newBuilder()
	blockOff, line := idx.end, idx.lines
	var blockLines int64
	rd := lineReader(io.NewSectionReader(src, idx.end, fi.Size()-idx.end))
	defer putLineReader(rd)
	pos := idx.end
	for {
		raw, n, err := viewLine(rd, maxLine)
		if err != nil {
			break // io.EOF, or a partial last line: left for later
		}
		lt, ok := memo.get(pos, raw)
		if !ok {
			lt = decodeLineText(kind, raw)
			if kind == Text {
				lt.search = bytes.Clone(lt.search) // raw itself, kept in memo past the next read
			}
			if memo.room > 0 { // past it, no line is kept: nor hashed
				memo.put(pos, raw, xxhash.Sum64(raw), lt)
			}
		}
		pos += n
		line++
		blockLines++
		b.add(lt.search)
		if pos-blockOff >= target {
			if err := b.encode(w, blockOff, pos-blockOff, line-blockLines+1, blockLines); err != nil {
				return 0, err
			}
			idx.count++
			idx.blocksEnd += b.size()
			idx.end, idx.lines = pos, line
			blockOff, blockLines = pos, 0
			b = newBuilder()
		}
	}
	if pos > blockOff {
		// The lines after the last full block: a partial one.
		if err := b.encode(w, blockOff, pos-blockOff, line-blockLines+1, blockLines); err != nil {
			return 0, err
		}
		idx.count++
		idx.partial = b.size()
		idx.blocksEnd += b.size()
		idx.end, idx.lines = pos, line
	}
	if err := w.Flush(); err != nil {
		return 0, err
	}
	if idx.end == start {
		if created {
			_, err := out.WriteAt(header(idx), 0) // no whole line yet
			return 0, err
		}
		return 0, nil
	}
	if idx.tailSum, err = tailSum(src, idx.end); err != nil {
		return 0, err
	}
	idx.ctime = ctime
	if o.Cache.defersSync() {
		// The blocks reach the disk with the next SyncIndexes; until
		// then the header says they may not have (fileIndex.unsynced).
		o.Cache.markUnsynced(path)
		idx.unsynced = true
	} else {
		if err := out.Sync(); err != nil {
			return 0, err
		}
		idx.unsynced = false // the earlier unsynced blocks with these
	}
	if _, err := out.WriteAt(header(idx), 0); err != nil {
		return 0, err
	}
	return idx.end - start, nil
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
	count := uint32(idx.count)
	if idx.unsynced {
		count |= unsyncedBit
	}
	le.PutUint32(h[48:], count)
	le.PutUint64(h[52:], uint64(idx.blocksEnd))
	le.PutUint32(h[60:], uint32(idx.partial))
	le.PutUint64(h[64:], uint64(idx.ctime))
	return h
}

// rewriteHeader writes idx's header over the index file's.
func rewriteHeader(path string, idx *fileIndex) error {
	f, err := openIndexFile(path, os.O_WRONLY, 0)
	if err != nil {
		return err
	}
	_, err = f.WriteAt(header(idx), 0)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// writeNew replaces the index file with an empty one for idx.
func writeNew(path string, idx *fileIndex) error {
	tmp := path + ".tmp"
	if err := writeIndexFile(tmp, header(idx)); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// openIndexFile is os.OpenFile for the index's own files, O_NONBLOCK
// added, which a regular file ignores: without it os.OpenFile toggles the
// descriptor's mode, four fcntl calls an open (confine's nonBlocking
// says why; a catch-up of 10,000 one-session directories opened 160,000
// of the index's files).
func openIndexFile(path string, flag int, perm os.FileMode) (*os.File, error) {
	return os.OpenFile(path, flag|syscall.O_NONBLOCK, perm)
}

// writeIndexFile is os.WriteFile through openIndexFile.
func writeIndexFile(path string, data []byte) error {
	f, err := openIndexFile(path, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return err
	}
	_, err = f.Write(data)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// lineReaders are the indexing passes' readers, 1 MiB each: a catch-up
// of a home's 1,700 sessions allocated (and cleared) two buffers a file.
var lineReaders = sync.Pool{New: func() any { return bufio.NewReaderSize(nil, 1<<20) }}

// blockWriters are the trigram pass's writers (64 KiB): one made for each
// file was 4% of what a home's catch-up allocated.
var blockWriters = sync.Pool{New: func() any { return bufio.NewWriterSize(nil, 1<<16) }}

func lineReader(r io.Reader) *bufio.Reader {
	rd := lineReaders.Get().(*bufio.Reader)
	rd.Reset(r)
	return rd
}

func putLineReader(rd *bufio.Reader) {
	rd.Reset(nil)
	lineReaders.Put(rd)
}

// readLine reads one complete line (without its newline), keeping at most
// max bytes of it, and returns how many bytes it spanned with the newline.
// A partial last line is an io.ErrUnexpectedEOF.
func readLine(r *bufio.Reader, max int) ([]byte, int64, error) {
	chunk, err := r.ReadSlice('\n')
	return collectLine(r, max, chunk, err)
}

// viewLine is readLine for a line used before the next read: a line
// whole in r's buffer is returned in it, not copied (indexing a home
// copied each of its lines twice).
func viewLine(r *bufio.Reader, maxLen int) ([]byte, int64, error) {
	chunk, err := r.ReadSlice('\n')
	if err == nil {
		return chunk[:min(len(chunk)-1, max(maxLen, 0))], int64(len(chunk)), nil
	}
	return collectLine(r, maxLen, chunk, err)
}

// collectLine is readLine from the first chunk ReadSlice returned.
func collectLine(r *bufio.Reader, max int, chunk []byte, err error) ([]byte, int64, error) {
	var line []byte
	var n int64
	for {
		n += int64(len(chunk))
		if room := max - len(line); room > 0 {
			line = append(line, chunk[:min(room, len(chunk))]...)
		}
		switch {
		case err == nil:
			return bytes.TrimSuffix(line, []byte{'\n'}), n, nil
		case errors.Is(err, bufio.ErrBufferFull):
			chunk, err = r.ReadSlice('\n')
		case errors.Is(err, io.EOF) && n > 0:
			return line, n, io.ErrUnexpectedEOF // the partial last line
		default:
			return nil, n, err
		}
	}
}

// DropIndex removes the index of rel in root (its trigram index and term
// segments) from dir: a file that is gone for good (a central node's
// copy of a log its host dropped).
func DropIndex(dir string, root *confine.Root, rel string) {
	os.Remove(indexPath(dir, root.Path(), rel))
	segs, _ := filepath.Glob(termPrefix(dir, root.Path(), rel) + "*")
	for _, s := range segs {
		os.Remove(s)
	}
}
