package recall

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/memwatch/memwatch/confine"
)

// The term index of ranked recall: for a run of a file's documents (the
// messages of a log, the non-blank lines of a note, numbered in file
// order from 0: their ordinals), which terms (analyze.go) each holds and
// how often, as a segment:
//
//   - a header: the ordinals and bytes of the file it covers, the sum of
//     the documents' lengths (in terms), the file's device and inode and a
//     hash of the 256 bytes before its end (a segment of a file renamed
//     over or rewritten in place since is not read, and the file's
//     segments are built anew);
//   - per document, where its line starts, its line number and its length;
//   - a dictionary of the terms, sorted, each with its document frequency,
//     the highest term frequency and the shortest document it has (so a
//     bound on its score is known without reading its postings), and where
//     its postings are;
//   - the postings of each term: blocks of postingBlock ordinals (varint
//     gaps) and term frequencies, behind a table of each block's last
//     ordinal, so a cursor seeks to an ordinal by a binary search and
//     decodes one block.
//
// The daemon writes a segment for the complete lines each indexing pass
// adds (IndexFile, at most maxSegDocs documents each: memory stays
// bounded) and merges the newest two while the older is less than
// mergeRatio times the newer, so a file has O(log n) segments; merging
// concatenates postings (the ordinals of two segments do not overlap),
// term by term into the new file, and re-reads no text. Files under
// minTermFile bytes get none: a search analyzes them, as fast as it would
// read a segment. A search reads the segments of every file it covers,
// and analyzes the rest (the file's tail, files too small to index, the
// spool's held messages) into segments in memory, restricted to the
// query's terms: one scorer for all (rank.go).

const (
	termMagic    = "MWTERM02" // 02: messages hold their time's terms (dates.go)
	termHeader   = 128
	docEntry     = 14 // offset u64, line u32, length u16
	dictEntry    = 36 // string offset u32, length u16, df u32, max tf u16, min length u16, postings offset u64, postings length u32, blocks u32, pad u32
	postingBlock = 128
	// mergeRatio: the newest two segments are merged while the older holds
	// fewer than this many times the newer's documents.
	mergeRatio = 4
	// maxSegDocs bounds the documents of a segment built in one go.
	maxSegDocs = 1 << 16
	// minTermFile is the smallest file given term segments.
	minTermFile = 16 << 10
)

// fileID is the identity a segment was built for.
type fileID struct {
	dev, ino uint64
	tailSum  uint64 // of the 256 bytes before the segment's end
}

// docInfo is one document of a segment being built.
type docInfo struct {
	off  int64 // where its line starts in the file
	line int64 // its line number (1-based)
	len  int   // its length in terms
}

// posting is one document holding a term, and how often.
type posting struct {
	ord uint32 // relative to the segment's first ordinal
	tf  uint16
}

// segBuilder collects the documents of a segment.
type segBuilder struct {
	start    uint64 // the first document's ordinal
	startOff int64  // the file offset the segment covers from
	endOff   int64  // ... and to
	docs     []docInfo
	terms    map[string][]posting
	totalLen int64
	nextLine int64                  // the number of the line at endOff
	keep     func(term string) bool // nil: every term
	seen     map[string]int         // per document being added
	dates    bool                   // the times' terms may be kept (timeTerms)
	// The indexing's way (every term kept): terms by the analyzer's ids,
	// numbered again for the segment (local), made strings at encode.
	a       *Analyzer
	ids     []int32 // local id -> analyzer id (a.local the other way)
	post    [][]posting
	tf      []int32 // per local id, in the document being added
	touched []int32
}

func newSegBuilder(start uint64, startOff int64, keep func(string) bool) *segBuilder {
	return &segBuilder{start: start, startOff: startOff, endOff: startOff, terms: map[string][]posting{}, keep: keep, seen: map[string]int{}, dates: true}
}

// add analyzes one document's text.
func (b *segBuilder) add(a *Analyzer, text []byte, off, line int64, when time.Time) {
	if b.keep == nil && a.only == nil && (b.a == nil || b.a == a) {
		b.addIDs(a, text, off, line, when)
		return
	}
	clear(b.seen)
	n := 0
	a.Terms(text, func(t string) {
		n++
		if b.keep == nil || b.keep(t) {
			b.seen[t]++
		}
	})
	if b.dates && !when.IsZero() {
		for _, t := range timeTerms(when) {
			if b.keep == nil || b.keep(t) {
				b.seen[t]++
			}
		}
	}
	ord := uint32(len(b.docs))
	for t, tf := range b.seen {
		b.terms[t] = append(b.terms[t], posting{ord: ord, tf: uint16(min(tf, 65535))})
	}
	b.docs = append(b.docs, docInfo{off: off, line: line, len: min(n, 65535)})
	b.totalLen += int64(min(n, 65535))
}

// addIDs is add keeping every term, by id.
func (b *segBuilder) addIDs(a *Analyzer, text []byte, off, line int64, when time.Time) {
	if b.a == nil {
		a.ResetIDs() // between segments: no id of this one is held yet
		b.a = a
	}
	n := 0
	count := func(id int32) {
		if int(id) >= len(a.local) {
			a.local = append(a.local, make([]int32, int(id)+1-len(a.local)+len(a.local)/2)...)
		}
		// A sparse set: the entry is this segment's when its local id
		// points back at it, whatever an earlier segment left there.
		l := a.local[id]
		if int(l) >= len(b.ids) || b.ids[l] != id {
			l = int32(len(b.ids))
			a.local[id] = l
			b.ids = append(b.ids, id)
			b.post = append(b.post, nil)
			b.tf = append(b.tf, 0)
		}
		if b.tf[l] == 0 {
			b.touched = append(b.touched, l)
		}
		b.tf[l]++
	}
	a.TermIDs(text, func(id int32) {
		n++
		count(id)
	})
	if b.dates && !when.IsZero() {
		for _, t := range timeTerms(when) {
			count(a.TermID(t))
		}
	}
	ord := uint32(len(b.docs))
	for _, l := range b.touched {
		b.post[l] = append(b.post[l], posting{ord: ord, tf: uint16(min(b.tf[l], 65535))})
		b.tf[l] = 0
	}
	b.touched = b.touched[:0]
	b.docs = append(b.docs, docInfo{off: off, line: line, len: min(n, 65535)})
	b.totalLen += int64(min(n, 65535))
}

// segment is a segment to read: one written by the daemon (mapped or
// read) or one built in memory by a search.
type segment struct {
	id         fileID
	start, end uint64 // ordinals [start, end)
	startOff   int64
	endOff     int64
	nextLine   int64 // the number of the line at endOff
	totalLen   int64
	nterms     int
	data       []byte // the encoded segment (nil when read lazily)
	mapped     bool
	// named, for a segment a search built, says of each document
	// whether it is said by someone the question names (spokenByNamed).
	named []bool
	// file, when set, is a small segment read lazily: docs and postings
	// are read from it at these offsets when asked for.
	file                    *os.File
	docsAt, postAt, postEnd int64
	docs, dict              []byte
	strs, postings          []byte
}

// encode writes the segment b describes.
func (b *segBuilder) encode(id fileID) []byte {
	type termPostings struct {
		t  string
		ps []posting
	}
	terms := make([]termPostings, 0, len(b.terms)+len(b.ids))
	for t, ps := range b.terms {
		terms = append(terms, termPostings{t, ps})
	}
	for l, tid := range b.ids {
		terms = append(terms, termPostings{b.a.Term(tid), b.post[l]})
	}
	slices.SortFunc(terms, func(x, y termPostings) int { return strings.Compare(x.t, y.t) })
	le := binary.LittleEndian
	var strs, posts bytes.Buffer
	dict := make([]byte, 0, len(terms)*dictEntry)
	var blk []byte
	for _, tp := range terms {
		t, ps := tp.t, tp.ps
		maxTF, minLen := uint16(0), uint16(65535)
		for _, p := range ps {
			maxTF = max(maxTF, p.tf)
			minLen = min(minLen, uint16(b.docs[p.ord].len))
		}
		postOff := posts.Len()
		var nblocks int
		blk, nblocks = encodePostings(&posts, ps, blk)
		var e [dictEntry]byte
		le.PutUint32(e[0:], uint32(strs.Len()))
		le.PutUint16(e[4:], uint16(len(t)))
		le.PutUint32(e[6:], uint32(len(ps)))
		le.PutUint16(e[10:], maxTF)
		le.PutUint16(e[12:], minLen)
		le.PutUint64(e[14:], uint64(postOff))
		le.PutUint32(e[22:], uint32(posts.Len()-postOff))
		le.PutUint32(e[26:], uint32(nblocks))
		dict = append(dict, e[:]...)
		strs.WriteString(t)
	}
	docs := make([]byte, len(b.docs)*docEntry)
	for i, d := range b.docs {
		le.PutUint64(docs[i*docEntry:], uint64(d.off))
		le.PutUint32(docs[i*docEntry+8:], uint32(d.line))
		le.PutUint16(docs[i*docEntry+12:], uint16(d.len))
	}
	out := make([]byte, termHeader, termHeader+len(docs)+len(dict)+strs.Len()+posts.Len())
	copy(out, termMagic)
	le.PutUint64(out[16:], b.start)
	le.PutUint64(out[24:], b.start+uint64(len(b.docs)))
	le.PutUint64(out[32:], uint64(b.startOff))
	le.PutUint64(out[40:], uint64(b.endOff))
	le.PutUint64(out[48:], uint64(b.totalLen))
	le.PutUint32(out[56:], uint32(len(terms)))
	docsAt := int64(termHeader)
	dictAt := docsAt + int64(len(docs))
	strsAt := dictAt + int64(len(dict))
	postAt := strsAt + int64(strs.Len())
	le.PutUint64(out[60:], uint64(dictAt))
	le.PutUint64(out[68:], uint64(strsAt))
	le.PutUint64(out[76:], uint64(postAt))
	le.PutUint64(out[84:], uint64(postAt)+uint64(posts.Len()))
	le.PutUint32(out[92:], uint32(b.nextLine))
	le.PutUint64(out[96:], id.dev)
	le.PutUint64(out[104:], id.ino)
	le.PutUint64(out[112:], id.tailSum)
	out = append(out, docs...)
	out = append(out, dict...)
	out = append(out, strs.Bytes()...)
	return append(out, posts.Bytes()...)
}

var errCorruptSegment = errors.New("corrupt term segment")

// parseSegment checks a segment's structure and returns a view of it.
func parseSegment(data []byte) (*segment, error) {
	if len(data) < termHeader || string(data[:8]) != termMagic {
		return nil, errCorruptSegment
	}
	le := binary.LittleEndian
	s := decodeSegmentHeader(data)
	dictAt, strsAt, postAt, end := le.Uint64(data[60:]), le.Uint64(data[68:]), le.Uint64(data[76:]), le.Uint64(data[84:])
	if err := s.check(dictAt, strsAt, postAt, end, uint64(len(data))); err != nil {
		return nil, err
	}
	s.data = data
	s.docs, s.dict, s.strs, s.postings = data[termHeader:dictAt], data[dictAt:strsAt], data[strsAt:postAt], data[postAt:end]
	return s, nil
}

// openSegment maps (or, when small, reads) a segment file.
func openSegment(path string) (*segment, error) { return openSegmentAs(path, false) }

// openSegmentAs opens a segment, read lazily whatever its size when lazy
// (a merge reads every posting once: mapped, they would all count in the
// daemon's memory).
func openSegmentAs(path string, lazy bool) (*segment, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, err
	}
	if lazy || fi.Size() < mapAbove {
		// A small segment (a note's): its dictionary is read, its postings
		// and documents when asked for. A search over hundreds of notes
		// reads kilobytes of each, not all of it.
		s, err := readLazy(f, fi.Size())
		if err != nil {
			f.Close()
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		return s, nil
	}
	defer f.Close()
	// Not populated: a query touches the dictionary's path to its terms
	// and their postings, a small part of a large segment.
	data, err := syscall.Mmap(int(f.Fd()), 0, int(fi.Size()), syscall.PROT_READ, syscall.MAP_SHARED)
	if err != nil {
		return nil, fmt.Errorf("map %s: %w", path, err)
	}
	s, err := parseSegment(data)
	if err != nil {
		syscall.Munmap(data)
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	s.mapped = true
	return s, nil
}

// readLazy reads a segment's header and dictionary from f (size bytes).
func readLazy(f *os.File, size int64) (*segment, error) {
	h := make([]byte, termHeader)
	if _, err := f.ReadAt(h, 0); err != nil || string(h[:8]) != termMagic {
		return nil, errCorruptSegment
	}
	le := binary.LittleEndian
	s := decodeSegmentHeader(h)
	dictAt, strsAt, postAt, end := le.Uint64(h[60:]), le.Uint64(h[68:]), le.Uint64(h[76:]), le.Uint64(h[84:])
	if err := s.check(dictAt, strsAt, postAt, end, uint64(size)); err != nil {
		return nil, err
	}
	ds := make([]byte, postAt-dictAt)
	if _, err := f.ReadAt(ds, int64(dictAt)); err != nil {
		return nil, errCorruptSegment
	}
	s.dict, s.strs = ds[:strsAt-dictAt], ds[strsAt-dictAt:]
	s.file, s.docsAt, s.postAt, s.postEnd = f, int64(termHeader), int64(postAt), int64(end)
	return s, nil
}

// check verifies the sections a header places.
func (s *segment) check(dictAt, strsAt, postAt, end, size uint64) error {
	n := s.end - s.start
	if s.end < s.start || n > 1<<31 || termHeader+n*docEntry != dictAt || dictAt+uint64(s.nterms)*dictEntry != strsAt ||
		strsAt > postAt || postAt > end || end != size || s.startOff < 0 || s.endOff < s.startOff {
		return errCorruptSegment
	}
	return nil
}

func (s *segment) close() {
	if s == nil {
		return
	}
	if s.mapped {
		syscall.Munmap(s.data)
		s.mapped, s.data = false, nil
	}
	if s.file != nil {
		s.file.Close()
		s.file = nil
	}
}

// docBytes returns the documents section.
func (s *segment) docBytes() ([]byte, error) {
	if s.file == nil {
		return s.docs, nil
	}
	b := make([]byte, s.count()*docEntry)
	if _, err := s.file.ReadAt(b, s.docsAt); err != nil && len(b) > 0 {
		return nil, err
	}
	return b, nil
}

// docs returns the number of documents.
func (s *segment) count() int { return int(s.end - s.start) }

// doc returns document i (relative ordinal): its line's offset, its line
// number, its length.
func (s *segment) doc(i uint32) (off, line int64, length int) {
	le := binary.LittleEndian
	var e []byte
	if s.file != nil {
		var b [docEntry]byte
		if _, err := s.file.ReadAt(b[:], s.docsAt+int64(i)*docEntry); err != nil {
			return 0, 0, 0
		}
		e = b[:]
	} else {
		e = s.docs[int(i)*docEntry:]
	}
	return int64(le.Uint64(e)), int64(le.Uint32(e[8:])), int(le.Uint16(e[12:]))
}

// termInfo is a dictionary entry.
type termInfo struct {
	df      int
	maxTF   int
	minLen  int
	post    []byte // skip table, then blocks
	nblocks int
}

func (s *segment) termAt(i int) string {
	le := binary.LittleEndian
	e := s.dict[i*dictEntry:]
	off, n := le.Uint32(e), le.Uint16(e[4:])
	if int(off)+int(n) > len(s.strs) {
		return ""
	}
	return string(s.strs[off : off+uint32(n)])
}

// lookup finds a term's entry.
func (s *segment) lookup(term string) (termInfo, bool) {
	i := sort.Search(s.nterms, func(i int) bool { return s.termAt(i) >= term })
	if i >= s.nterms || s.termAt(i) != term {
		return termInfo{}, false
	}
	return s.entry(i)
}

func (s *segment) entry(i int) (termInfo, bool) {
	le := binary.LittleEndian
	e := s.dict[i*dictEntry:]
	ti := termInfo{df: int(le.Uint32(e[6:])), maxTF: int(le.Uint16(e[10:])), minLen: int(le.Uint16(e[12:])), nblocks: int(le.Uint32(e[26:]))}
	off, n := le.Uint64(e[14:]), uint64(le.Uint32(e[22:]))
	if s.file != nil {
		if int64(off+n) > s.postEnd-s.postAt || uint64(ti.nblocks)*8 > n || ti.df < 1 {
			return termInfo{}, false
		}
		ti.post = make([]byte, n)
		if _, err := s.file.ReadAt(ti.post, s.postAt+int64(off)); err != nil {
			return termInfo{}, false
		}
		return ti, true
	}
	if off+n > uint64(len(s.postings)) || uint64(ti.nblocks)*8 > n || ti.df < 1 {
		return termInfo{}, false
	}
	ti.post = s.postings[off : off+n]
	return ti, true
}

// cursor walks a term's postings in a segment in ordinal order.
type cursor struct {
	ti    termInfo
	block int // the block decoded into ords and tfs
	ords  []uint32
	tfs   []uint16
	i     int // position in the block
	done  bool
}

func newCursor(ti termInfo) *cursor {
	c := &cursor{ti: ti, block: -1}
	c.load(0)
	return c
}

// load decodes block b (done past the last).
func (c *cursor) load(b int) {
	if b >= c.ti.nblocks {
		c.done = true
		return
	}
	le := binary.LittleEndian
	skips := c.ti.post[:8*c.ti.nblocks]
	data := c.ti.post[8*c.ti.nblocks:]
	from := uint32(0)
	prev := uint32(0)
	if b > 0 {
		from = le.Uint32(skips[8*(b-1)+4:])
		prev = le.Uint32(skips[8*(b-1):])
	}
	to := le.Uint32(skips[8*b+4:])
	c.ords, c.tfs = c.ords[:0], c.tfs[:0]
	if from > to || int(to) > len(data) {
		c.done = true
		return
	}
	blk := data[from:to]
	for len(blk) > 0 {
		gap, n := binary.Uvarint(blk)
		if n <= 0 {
			break
		}
		blk = blk[n:]
		tf, m := binary.Uvarint(blk)
		if m <= 0 {
			break
		}
		blk = blk[m:]
		prev += uint32(gap)
		c.ords = append(c.ords, prev)
		c.tfs = append(c.tfs, uint16(tf))
	}
	c.block, c.i = b, 0
	if len(c.ords) == 0 {
		c.done = true
	}
}

// doc is the current ordinal (relative); tf its frequency.
func (c *cursor) doc() uint32 { return c.ords[c.i] }
func (c *cursor) tf() int     { return int(c.tfs[c.i]) }

func (c *cursor) next() {
	if c.done {
		return
	}
	c.i++
	if c.i >= len(c.ords) {
		c.load(c.block + 1)
	}
}

// seek moves to the first posting at or after ord.
func (c *cursor) seek(ord uint32) {
	if c.done || c.doc() >= ord {
		return
	}
	le := binary.LittleEndian
	skips := c.ti.post[:8*c.ti.nblocks]
	if last := le.Uint32(skips[8*c.block:]); ord > last {
		b := c.block + 1 + sort.Search(c.ti.nblocks-c.block-1, func(i int) bool { return le.Uint32(skips[8*(c.block+1+i):]) >= ord })
		c.load(b)
		if c.done {
			return
		}
	}
	c.i += sort.Search(len(c.ords)-c.i, func(j int) bool { return c.ords[c.i+j] >= ord })
	if c.i >= len(c.ords) {
		c.load(c.block + 1)
	}
}

// decodeSegmentHeader reads a segment's header (termHeader bytes).
func decodeSegmentHeader(h []byte) *segment {
	le := binary.LittleEndian
	return &segment{start: le.Uint64(h[16:]), end: le.Uint64(h[24:]),
		startOff: int64(le.Uint64(h[32:])), endOff: int64(le.Uint64(h[40:])), totalLen: int64(le.Uint64(h[48:])),
		nterms: int(le.Uint32(h[56:])), nextLine: int64(le.Uint32(h[92:])),
		id: fileID{dev: le.Uint64(h[96:]), ino: le.Uint64(h[104:]), tailSum: le.Uint64(h[112:])}}
}

// encodePostings writes a term's postings: the skip table (each block's
// last ordinal and where it ends), then the blocks. It returns the block
// buffer to reuse and the number of blocks.
func encodePostings(w *bytes.Buffer, ps []posting, blk []byte) ([]byte, int) {
	le := binary.LittleEndian
	nblocks := (len(ps) + postingBlock - 1) / postingBlock
	skips := make([]byte, 8*nblocks)
	blk = blk[:0]
	prev := uint32(0)
	for i, p := range ps {
		if i%postingBlock == 0 {
			prev = 0
			if i > 0 {
				prev = ps[i-1].ord
			}
		}
		blk = binary.AppendUvarint(blk, uint64(p.ord-prev))
		blk = binary.AppendUvarint(blk, uint64(p.tf))
		prev = p.ord
		if i%postingBlock == postingBlock-1 || i == len(ps)-1 {
			bi := i / postingBlock
			le.PutUint32(skips[8*bi:], p.ord)
			le.PutUint32(skips[8*bi+4:], uint32(len(blk)))
		}
	}
	w.Write(skips)
	w.Write(blk)
	return blk, nblocks
}

// Term segments are files beside a file's trigram index: its name's hash,
// then the ordinals and the offset they cover, ".t<start>-<end>-<endOff>"
// in hex.

func termPrefix(dir, root, rel string) string {
	return strings.TrimSuffix(indexPath(dir, root, rel), ".idx") + ".t"
}

func segmentName(prefix string, start, end uint64, endOff int64) string {
	return fmt.Sprintf("%s%016x-%016x-%016x", prefix, start, end, endOff)
}

// isSegmentName reports a segment file's name (its base).
func isSegmentName(name string) bool {
	i := strings.LastIndex(name, ".t")
	if i < 0 || len(name)-i-2 != 50 {
		return false
	}
	for _, part := range strings.Split(name[i+2:], "-") {
		if _, err := strconv.ParseUint(part, 16, 64); err != nil || len(part) != 16 {
			return false
		}
	}
	return true
}

// termSegmentFiles lists the segment files of rel (their paths).
func termSegmentFiles(dir, root, rel string) []string {
	return (*SegmentListing)(nil).files(dir, termPrefix(dir, root, rel))
}

// SegmentListing is one listing of an index directory's term segments,
// kept up to date by the indexing that reads it: a pass over a root's
// files lists the directory (which holds every file's segments) once, not
// once per file, which made a first start quadratic in the files. It is
// for one goroutine, and only while nothing else writes the directory
// (the daemon's indexing); a nil listing lists the directory each time.
type SegmentListing struct {
	dir      string
	byPrefix map[string][]string // segment paths by termPrefix
}

// NewSegmentListing returns a listing to be made when first needed.
func NewSegmentListing() *SegmentListing { return &SegmentListing{} }

// files lists the segment files whose names start with prefix.
func (l *SegmentListing) files(dir, prefix string) []string {
	if l == nil {
		ms, _ := filepath.Glob(prefix + "*")
		var out []string
		for _, m := range ms {
			if isSegmentName(filepath.Base(m)) {
				out = append(out, m)
			}
		}
		return out
	}
	if l.byPrefix == nil || l.dir != dir {
		l.dir, l.byPrefix = dir, map[string][]string{}
		ents, _ := os.ReadDir(dir)
		for _, e := range ents {
			if n := e.Name(); isSegmentName(n) {
				p := filepath.Join(dir, n)
				k := p[:strings.LastIndex(p, ".t")+2]
				l.byPrefix[k] = append(l.byPrefix[k], p)
			}
		}
	}
	return slices.Clone(l.byPrefix[prefix])
}

// wrote notes a segment file written (or, gone, removed) at path.
func (l *SegmentListing) wrote(path string, gone bool) {
	if l == nil || l.byPrefix == nil || filepath.Dir(path) != l.dir {
		return
	}
	k := path[:strings.LastIndex(path, ".t")+2]
	ps := slices.DeleteFunc(l.byPrefix[k], func(p string) bool { return p == path })
	if !gone {
		ps = append(ps, path)
	}
	if len(ps) == 0 {
		delete(l.byPrefix, k)
		return
	}
	l.byPrefix[k] = ps
}

func removeTermSegments(l *SegmentListing, paths []string) {
	for _, p := range paths {
		os.Remove(p)
		l.wrote(p, true)
	}
}

// readSegmentHeader reads what a segment file's header says.
func readSegmentHeader(path string) (*segment, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var h [termHeader]byte
	if _, err := io.ReadFull(f, h[:]); err != nil || string(h[:8]) != termMagic {
		return nil, errCorruptSegment
	}
	return decodeSegmentHeader(h[:]), nil
}

// chainLink is a segment file in a chain.
type chainLink struct {
	path string
	hdr  *segment
}

// termChain is the run of segments of the file fh (fi) from its first
// document, each the longest that starts where the one before ends, when
// they describe the file as it is: its device and inode, and the bytes
// before the last one's end (a rewrite in place shows there); nil when
// they do not.
func termChain(paths []string, fh *os.File, fi fs.FileInfo) []chainLink {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return nil
	}
	var links []chainLink
	for _, p := range paths {
		if h, err := readSegmentHeader(p); err == nil && h.id.dev == uint64(st.Dev) && h.id.ino == uint64(st.Ino) {
			links = append(links, chainLink{path: p, hdr: h})
		}
	}
	var chain []chainLink
	var at uint64
	var atOff int64
	for {
		best := -1
		for i, l := range links {
			if l.hdr.start == at && l.hdr.startOff == atOff && l.hdr.endOff > atOff && (best < 0 || l.hdr.endOff > links[best].hdr.endOff) {
				best = i
			}
		}
		if best < 0 {
			break
		}
		chain = append(chain, links[best])
		at, atOff = links[best].hdr.end, links[best].hdr.endOff
	}
	if len(chain) == 0 {
		return nil
	}
	last := chain[len(chain)-1].hdr
	if last.endOff > fi.Size() {
		return nil
	}
	if sum, err := tailSum(fh, last.endOff); err != nil || sum != last.id.tailSum {
		return nil
	}
	return chain
}

// indexTerms brings rel's term segments up to date: a segment of the
// complete lines written since the last one ends (maxSegDocs documents at
// most each), merged as mergeRatio says; segments that do not describe the
// file any more are built anew from its start.
func indexTerms(dir string, root *confine.Root, rel string, kind Kind, o IndexOptions, memo *lineMemo) (int64, error) {
	maxLine := o.MaxLine
	if maxLine <= 0 {
		maxLine = 1 << 20
	}
	src, fi, err := root.OpenRead(rel)
	if err != nil {
		return 0, err
	}
	defer src.Close()
	if fi.Size() < minTermFile {
		// No segments for a small file: a search analyzes it. Segments
		// of a larger one it was before are not looked for (a listing of
		// the index directory, which holds every file's, per file): they
		// describe another file and no search trusts them (termChain),
		// and they go when it grows past minTermFile again.
		return 0, nil
	}
	paths := o.Listing.files(dir, termPrefix(dir, root.Path(), rel))
	chain := termChain(paths, src, fi)
	var ord uint64
	var off int64
	line := int64(1)
	if len(chain) > 0 {
		last := chain[len(chain)-1].hdr
		ord, off, line = last.end, last.endOff, last.nextLine
	} else if len(paths) > 0 {
		removeTermSegments(o.Listing, paths)
	}
	if fi.Size() <= off {
		return 0, nil
	}
	st := fi.Sys().(*syscall.Stat_t)
	id := fileID{dev: uint64(st.Dev), ino: uint64(st.Ino)}
	a := o.Analyzer
	if a == nil || a.only != nil {
		a = NewAnalyzer()
	}
	rd := bufio.NewReaderSize(io.NewSectionReader(src, off, fi.Size()-off), int(min(1<<20, max(4096, fi.Size()-off))))
	start := off
	b := newSegBuilder(ord, off, nil)
	flush := func() error {
		b.endOff, b.nextLine = off, line
		if b.endOff == b.startOff {
			return nil
		}
		if id.tailSum, err = tailSum(src, b.endOff); err != nil {
			return err
		}
		if err := addTermSegment(o.Listing, dir, root.Path(), rel, id, b); err != nil {
			return err
		}
		b = newSegBuilder(b.start+uint64(len(b.docs)), off, nil)
		return nil
	}
	for {
		raw, n, err := readLine(rd, maxLine)
		if err != nil {
			break // io.EOF, or a partial last line: left for later
		}
		lt, ok := memo.get(off)
		if !ok {
			lt = decodeLineText(kind, raw)
		}
		if lt.doc >= 0 {
			b.add(a, lt.search[lt.doc:], off, line, lt.when)
		}
		off += n
		line++
		if len(b.docs) >= maxSegDocs {
			if err := flush(); err != nil {
				return 0, err
			}
		}
	}
	if err := flush(); err != nil {
		return 0, err
	}
	return off - start, nil
}

// addTermSegment writes b's segment, then merges the newest two while
// the older is less than mergeRatio times the newer.
func addTermSegment(l *SegmentListing, dir, root, rel string, id fileID, b *segBuilder) error {
	prefix := termPrefix(dir, root, rel)
	name := segmentName(prefix, b.start, b.start+uint64(len(b.docs)), b.endOff)
	if err := writeSegment(name, b.encode(id)); err != nil {
		return err
	}
	l.wrote(name, false)
	for {
		// The chain as written: the headers alone (the file is as indexed).
		var links []chainLink
		for _, p := range l.files(dir, prefix) {
			if h, err := readSegmentHeader(p); err == nil && h.id.dev == id.dev && h.id.ino == id.ino {
				links = append(links, chainLink{path: p, hdr: h})
			}
		}
		var older, newer *chainLink
		for i := range links {
			if links[i].hdr.endOff == b.endOff && (newer == nil || links[i].hdr.startOff < newer.hdr.startOff) {
				newer = &links[i]
			}
		}
		if newer == nil {
			return nil
		}
		for i := range links {
			if links[i].hdr.endOff == newer.hdr.startOff && links[i].hdr.end == newer.hdr.start && (older == nil || links[i].hdr.startOff < older.hdr.startOff) {
				older = &links[i]
			}
		}
		if older == nil || older.hdr.end-older.hdr.start >= mergeRatio*max(1, newer.hdr.end-newer.hdr.start) {
			return nil
		}
		merged := segmentName(prefix, older.hdr.start, newer.hdr.end, newer.hdr.endOff)
		if err := mergeSegmentFiles(older.path, newer.path, merged, id); err != nil {
			return err
		}
		l.wrote(merged, false)
		os.Remove(older.path)
		l.wrote(older.path, true)
		if newer.path != merged {
			os.Remove(newer.path)
			l.wrote(newer.path, true)
		}
	}
}

// mergeSegmentFiles writes the merge of two consecutive segments (the
// first's ordinals and bytes end where the second's start) to path, term
// by term: memory holds the dictionary and one term's postings.
func mergeSegmentFiles(pa, pb, path string, id fileID) error {
	a, err := openSegmentAs(pa, true)
	if err != nil {
		return err
	}
	defer a.close()
	b, err := openSegmentAs(pb, true)
	if err != nil {
		return err
	}
	defer b.close()
	if a.end != b.start || a.endOff != b.startOff {
		return errors.New("merge term segments: not consecutive")
	}
	id.tailSum = b.id.tailSum
	// The merged dictionary: both sorted, walked together.
	type mterm struct {
		t      string
		ia, ib int // -1: absent
	}
	var terms []mterm
	strLen := 0
	for i, j := 0, 0; i < a.nterms || j < b.nterms; {
		var ta, tb string
		if i < a.nterms {
			ta = a.termAt(i)
		}
		if j < b.nterms {
			tb = b.termAt(j)
		}
		switch {
		case j >= b.nterms || i < a.nterms && ta < tb:
			terms = append(terms, mterm{ta, i, -1})
			i++
		case i >= a.nterms || tb < ta:
			terms = append(terms, mterm{tb, -1, j})
			j++
		default:
			terms = append(terms, mterm{ta, i, j})
			i, j = i+1, j+1
		}
		strLen += len(terms[len(terms)-1].t)
	}
	ndocs := a.count() + b.count()
	dictAt := int64(termHeader) + int64(ndocs)*docEntry
	strsAt := dictAt + int64(len(terms))*dictEntry
	postAt := strsAt + int64(strLen)
	tmp := path + ".tmp"
	f, err := os.OpenFile(tmp, os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return err
	}
	defer os.Remove(tmp)
	defer f.Close()
	w := bufio.NewWriterSize(f, 1<<20)
	header := make([]byte, termHeader)
	w.Write(header)
	for _, seg := range []*segment{a, b} {
		d, err := seg.docBytes()
		if err != nil {
			return err
		}
		w.Write(d)
	}
	// Postings go after the dictionary and the strings, whose sizes are
	// known: written at their place, the rest filled in after.
	if err := w.Flush(); err != nil {
		return err
	}
	if _, err := f.Seek(postAt, io.SeekStart); err != nil {
		return err
	}
	w.Reset(f)
	le := binary.LittleEndian
	dict := make([]byte, 0, len(terms)*dictEntry)
	strs := make([]byte, 0, strLen)
	shift := uint32(a.count())
	var ps []posting
	var buf bytes.Buffer
	var blk []byte
	var postOff int64
	for _, m := range terms {
		ps = ps[:0]
		maxTF, minLen := 0, 65535
		for k, pair := range []struct {
			s *segment
			i int
		}{{a, m.ia}, {b, m.ib}} {
			if pair.i < 0 {
				continue
			}
			ti, ok := pair.s.entry(pair.i)
			if !ok {
				return errCorruptSegment
			}
			maxTF, minLen = max(maxTF, ti.maxTF), min(minLen, ti.minLen)
			for c := newCursor(ti); !c.done; c.next() {
				o := c.doc()
				if k == 1 {
					o += shift
				}
				ps = append(ps, posting{ord: o, tf: uint16(c.tf())})
			}
		}
		buf.Reset()
		var nblocks int
		blk, nblocks = encodePostings(&buf, ps, blk)
		var e [dictEntry]byte
		le.PutUint32(e[0:], uint32(len(strs)))
		le.PutUint16(e[4:], uint16(len(m.t)))
		le.PutUint32(e[6:], uint32(len(ps)))
		le.PutUint16(e[10:], uint16(maxTF))
		le.PutUint16(e[12:], uint16(minLen))
		le.PutUint64(e[14:], uint64(postOff))
		le.PutUint32(e[22:], uint32(buf.Len()))
		le.PutUint32(e[26:], uint32(nblocks))
		dict = append(dict, e[:]...)
		strs = append(strs, m.t...)
		postOff += int64(buf.Len())
		w.Write(buf.Bytes())
	}
	if err := w.Flush(); err != nil {
		return err
	}
	copy(header, termMagic)
	le.PutUint64(header[16:], a.start)
	le.PutUint64(header[24:], b.end)
	le.PutUint64(header[32:], uint64(a.startOff))
	le.PutUint64(header[40:], uint64(b.endOff))
	le.PutUint64(header[48:], uint64(a.totalLen+b.totalLen))
	le.PutUint32(header[56:], uint32(len(terms)))
	le.PutUint64(header[60:], uint64(dictAt))
	le.PutUint64(header[68:], uint64(strsAt))
	le.PutUint64(header[76:], uint64(postAt))
	le.PutUint64(header[84:], uint64(postAt+postOff))
	le.PutUint32(header[92:], uint32(b.nextLine))
	le.PutUint64(header[96:], id.dev)
	le.PutUint64(header[104:], id.ino)
	le.PutUint64(header[112:], id.tailSum)
	for _, part := range []struct {
		at   int64
		data []byte
	}{{0, header}, {dictAt, dict}, {strsAt, strs}} {
		if _, err := f.WriteAt(part.data, part.at); err != nil {
			return err
		}
	}
	if err := f.Close(); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// writeSegment writes a segment file whole (temp, then rename).
func writeSegment(path string, data []byte) error {
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, data, 0o600); err != nil {
		os.Remove(tmp)
		return err
	}
	return os.Rename(tmp, path)
}
