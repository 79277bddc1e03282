package recall

import (
	"bufio"
	"bytes"
	"cmp"
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
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/cespare/xxhash/v2"

	"github.com/memwatch/memwatch/confine"
	"github.com/memwatch/memwatch/recall/analysis"
)

// The term index of ranked recall: for a run of a file's documents (the
// messages of a log, the non-blank lines of a note, numbered in file
// order from 0: their ordinals), which terms (recall/analysis) each holds and
// how often, as a segment:
//
//   - a header: the ordinals and bytes of the file it covers, the sum of
//     the documents' lengths (in terms), the file's device and inode and a
//     hash of the 256 bytes before its end (a segment of a file renamed
//     over or rewritten in place since is not read, and the file's
//     segments are built anew);
//   - per document, where its line starts, its line number and its length;
//   - the postings of each term: blocks of postingBlock ordinals (varint
//     gaps) and term frequencies, behind (when there are several) a table
//     of each block's last ordinal, so a cursor seeks to an ordinal by a
//     binary search and decodes one block;
//   - a dictionary of the terms, sorted, each with its document frequency,
//     the highest term frequency and the shortest document it has (so a
//     bound on its score is known without reading its postings), and the
//     length of its postings, in blocks of dictBlock terms, each term
//     written as the bytes it shares with the one before and the rest,
//     all in varints (Lucene's block tree, flat): most of a home's terms
//     are in one document of one file, and a fixed 36-byte entry with an
//     8-byte skip table made the index larger than the logs; a term in
//     one document holds its posting in its entry instead (dictWriter.add);
//   - an index of the dictionary's blocks (where each starts, its first
//     term's postings and its first term's first 8 bytes): a term is
//     found by a binary search of those keys (the whole first terms where
//     keys tie), then a walk of at most dictBlock entries.
//
// A document's line number carries one more bit: whether its text starts
// with a speaker's name ("Caroline: ..."), so a search reads only those
// lines to see whether the question names the speaker.
//
// The daemon writes a segment for the complete lines each indexing pass
// adds (IndexFile, at most maxSegDocs documents and maxSegPostings
// postings each: memory stays bounded) and merges the newest two while
// the older is less than mergeRatio times the newer, so a file has
// O(log n) segments; merging
// concatenates postings (the ordinals of two segments do not overlap),
// term by term into the new file, and re-reads no text. Every file with
// a line gets them, however small (files under 16 KiB once got none, and
// every question analyzed them, where the daemon's kept segments answer
// in microseconds). A search reads the segments of every file it covers,
// and analyzes the rest (the file's tail, the spool's held messages) into
// segments in memory, restricted to the query's terms: one scorer for
// all (rank.go).

const (
	// 02: messages hold their time's terms (analysis.TimeTerms); 03: the dictionary
	// in front-coded blocks of varints, after the postings; 04: a block's
	// first term's first bytes in its index entry, a document's speaker
	// label in its line number's top bit; 05: a term of one document
	// holds its posting in its entry, a line number a tool printed is no
	// term (analysis). A segment of an earlier format is not read: its
	// file is indexed anew.
	termMagic  = "MWTERM05"
	termHeader = 128
	docEntry   = 14 // offset u64, line u32 (top bit: labelled), length u16
	dictBlock  = 16 // terms per dictionary block
	indexEntry = 20 // a dictionary block's offset u32, its first postings' offset u64, its first term's first 8 bytes
	// labelled marks, in a document's line number, a message said by a
	// named speaker ("Caroline: ..."): only those are read to see whether
	// the question names who said them (rank.go, spokenByNamed).
	labelled     = 1 << 31
	postingBlock = 128
	// mergeRatio: the newest two segments are merged while the older holds
	// fewer than this many times the newer's documents.
	mergeRatio = 4
	// maxSegDocs bounds the documents of a segment built in one go.
	maxSegDocs = 1 << 16
	// maxSegPostings bounds its postings (12 bytes each as they are
	// gathered): a few messages of long tool results hold as many terms
	// as thousands of short ones.
	maxSegPostings = 1 << 21
	// minTermFile is the smallest file given term segments: every file
	// with a line. A file left out is analyzed by every question, about
	// 270 us of CPU for a session of 12 KiB on the machine of the home's
	// last figures, where the daemon's kept segment answers in a few; a
	// segment of a small file is a few hundred bytes of the state.
	minTermFile = 1
)

// fileID is the identity a segment was built for.
type fileID struct {
	dev, ino uint64
	tailSum  uint64 // of the 256 bytes before the segment's end
	// ctime is the file's change time when the segment covers all of it
	// and that time had settled (settledCtime), else 0: a file whose
	// change time has not moved since is described without reading it.
	ctime int64
}

// docInfo is one document of a segment being built.
type docInfo struct {
	off  int64 // where its line starts in the file
	line int64 // its line number (1-based)
	len  int   // its length in terms
	// labelled: its text starts with a speaker's name (speakerLabel).
	labelled bool
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
	dates    bool                   // the times' terms may be kept (analysis.TimeTerms)
	// The indexing's way (every term kept): terms by the analyzer's ids,
	// numbered again for the segment (local), made strings at encode.
	a   *analysis.Analyzer
	ids []int32 // local id -> analyzer id (a.local the other way)
	// Every posting, by document, its term's local id beside it: one
	// slice grown, not one a term (their growth was a tenth of the term
	// pass); put in term order at encode (byLocal).
	flat    []localPosting
	tf      []int32 // per local id, in the document being added
	touched []int32
	// The time terms' ids of the last month seen (TimeTerms).
	timeIDs []int32
	timeYM  int
	timeOK  bool
	// enc is encode's and byLocal's memory, kept with a builder reused
	// (segBuilders).
	enc encodeScratch
}

// encodeScratch is the memory a segment's encoding works in.
type encodeScratch struct {
	at    []int
	all   []posting
	lists [][]posting
	terms []termPostings
	order []sortKey
	posts bytes.Buffer
	docs  []byte
	out   []byte
	dw    dictWriter
}

type termPostings struct {
	t  []byte
	ps []posting
}

// segBuilders keeps the indexer's builders (getSegBuilder), their slices
// grown once: a catch-up builds a segment a session, and growing each
// builder's anew was a third of the bytes it allocated.
var segBuilders = sync.Pool{New: func() any { return newSegBuilder(0, 0, nil) }}

// getSegBuilder is newSegBuilder(start, startOff, nil) from segBuilders;
// putSegBuilder gives it back once its segment is written (encode's bytes
// are the builder's: not kept past that).
func getSegBuilder(start uint64, startOff int64) *segBuilder {
	b := segBuilders.Get().(*segBuilder)
	b.reset(start, startOff)
	return b
}

func putSegBuilder(b *segBuilder) {
	if cap(b.flat) > maxPostingsKept || cap(b.enc.out) > maxEncodedKept || cap(b.enc.all) > maxPostingsKept {
		return // a rare huge segment's memory is not held
	}
	b.a = nil
	segBuilders.Put(b)
}

// maxPostingsKept and maxEncodedKept bound the memory a pooled builder
// keeps: a session's segment is a few thousand postings, tens of KiB.
const (
	maxPostingsKept = 1 << 16
	maxEncodedKept  = 1 << 20
)

// reset empties b for a segment from ordinal start and offset startOff,
// keeping the memory of its slices.
func (b *segBuilder) reset(start uint64, startOff int64) {
	b.start, b.startOff, b.endOff = start, startOff, startOff
	b.docs = b.docs[:0]
	clear(b.terms)
	b.totalLen, b.nextLine = 0, 0
	b.keep = nil
	clear(b.seen)
	b.dates = true
	b.a = nil
	b.ids, b.flat, b.tf, b.touched = b.ids[:0], b.flat[:0], b.tf[:0], b.touched[:0]
	b.timeIDs, b.timeYM, b.timeOK = b.timeIDs[:0], 0, false
}

type localPosting struct {
	l int32
	p posting
}

// byLocal is the postings of each local id, in document order.
func (b *segBuilder) byLocal() [][]posting {
	e := &b.enc
	at := grow(e.at, len(b.ids)+1)
	clear(at)
	for _, f := range b.flat {
		at[f.l+1]++
	}
	for i := 1; i < len(at); i++ {
		at[i] += at[i-1]
	}
	all := grow(e.all, len(b.flat))
	out := grow(e.lists, len(b.ids))
	e.at, e.all, e.lists = at, all, out
	for l := range out {
		out[l] = all[at[l]:at[l]:at[l+1]]
	}
	for _, f := range b.flat {
		out[f.l] = append(out[f.l], f.p)
	}
	return out
}

func newSegBuilder(start uint64, startOff int64, keep func(string) bool) *segBuilder {
	b := &segBuilder{terms: map[string][]posting{}, seen: map[string]int{}}
	b.reset(start, startOff)
	b.keep = keep
	return b
}

// add analyzes one document's text.
func (b *segBuilder) add(a *analysis.Analyzer, text []byte, off, line int64, when time.Time) {
	if b.keep == nil && !a.Filtered() && len(b.terms) == 0 && (b.a == nil || b.a == a) {
		b.addIDs(a, text, off, line, when)
		return
	}
	if b.a != nil {
		// Another analyzer (its ids are not these): by strings from here
		// on, so no term is kept both ways.
		for l, ps := range b.byLocal() {
			b.terms[b.a.Term(b.ids[l])] = ps
		}
		b.a, b.ids, b.flat, b.tf = nil, nil, nil, nil
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
		for _, t := range analysis.TimeTerms(when) {
			if b.keep == nil || b.keep(t) {
				b.seen[t]++
			}
		}
	}
	ord := uint32(len(b.docs))
	for t, tf := range b.seen {
		b.terms[t] = append(b.terms[t], posting{ord: ord, tf: uint16(min(tf, 65535))})
	}
	b.docs = append(b.docs, docInfo{off: off, line: line, len: min(n, 65535), labelled: speakerLabel(text) != nil})
	b.totalLen += int64(min(n, 65535))
}

// addIDs is add keeping every term, by id.
func (b *segBuilder) addIDs(a *analysis.Analyzer, text []byte, off, line int64, when time.Time) {
	if b.a == nil {
		a.ResetIDs() // between segments: no id of this one is held yet
		b.a = a
	}
	n := 0
	local := a.Scratch()
	count := func(id int32) {
		if int(id) >= len(*local) {
			*local = append(*local, make([]int32, int(id)+1-len(*local)+len(*local)/2)...)
		}
		// A sparse set: the entry is this segment's when its local id
		// points back at it, whatever an earlier segment left there.
		l := (*local)[id]
		if int(l) >= len(b.ids) || b.ids[l] != id {
			l = int32(len(b.ids))
			(*local)[id] = l
			b.ids = append(b.ids, id)
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
		// A session's messages share their month: its terms' ids are
		// looked up once a month, not formatted and hashed at each.
		if ym := when.Year()*12 + int(when.Month()); !b.timeOK || ym != b.timeYM {
			b.timeIDs = b.timeIDs[:0]
			for _, t := range analysis.TimeTerms(when) {
				b.timeIDs = append(b.timeIDs, a.TermID(t))
			}
			b.timeYM, b.timeOK = ym, true
		}
		for _, id := range b.timeIDs {
			count(id)
		}
	}
	ord := uint32(len(b.docs))
	for _, l := range b.touched {
		b.flat = append(b.flat, localPosting{l, posting{ord: ord, tf: uint16(min(b.tf[l], 65535))}})
		b.tf[l] = 0
	}
	b.touched = b.touched[:0]
	b.docs = append(b.docs, docInfo{off: off, line: line, len: min(n, 65535), labelled: speakerLabel(text) != nil})
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
	// keptBy is the cache that holds this mapping (a search's close
	// releases it there); keptPath its file.
	keptBy   *IndexCache
	keptPath string
	refs     int // the searches holding it once the cache dropped it
	// named, for a segment a search built, says of each document
	// whether it is said by someone the question names (spokenByNamed).
	named []bool
	// file, when set, is a small segment read lazily: docs and postings
	// are read from it at these offsets when asked for.
	file                    *os.File
	docsAt, postAt, postEnd int64
	docs, dict, index       []byte
	postings                []byte
	// has, for a segment the daemon's cache keeps, tells the terms it
	// cannot hold (termFilter), built at its second search.
	uses    atomic.Int32
	hasOnce sync.Once
	has     *termFilter
	// looked is what the last questions' terms found in a kept segment
	// (lookupKept), nil until one is asked.
	lookedMu sync.Mutex
	looked   *[lookedSlots]lookedTerm
}

// encode writes the segment b describes.
func (b *segBuilder) encode(id fileID) []byte {
	e := &b.enc
	terms := e.terms[:0]
	for t, ps := range b.terms {
		terms = append(terms, termPostings{[]byte(t), ps})
	}
	for l, ps := range b.byLocal() { // empty unless built by ids (add)
		terms = append(terms, termPostings{b.a.TermBytes(b.ids[l]), ps})
	}
	order := grow(e.order, len(terms))
	for i, tp := range terms {
		order[i] = sortKey{bytesKey(tp.t), int32(i)}
	}
	e.terms, e.order = terms, order
	sortTerms(order, func(i int32) []byte { return terms[i].t })
	posts := &e.posts
	posts.Reset()
	dw := &e.dw
	*dw = dictWriter{dict: dw.dict[:0], index: dw.index[:0], blk: dw.blk}
	for _, o := range order {
		t, ps := terms[o.i].t, terms[o.i].ps
		maxTF, minLen := uint16(0), uint16(65535)
		for _, p := range ps {
			maxTF = max(maxTF, p.tf)
			minLen = min(minLen, uint16(b.docs[p.ord].len))
		}
		dw.add(t, ps, int(maxTF), int(minLen), posts)
	}
	le := binary.LittleEndian
	docs := grow(e.docs, len(b.docs)*docEntry)
	e.docs = docs
	for i, d := range b.docs {
		le.PutUint64(docs[i*docEntry:], uint64(d.off))
		line := uint32(min(d.line, labelled-1))
		if d.labelled {
			line |= labelled
		}
		le.PutUint32(docs[i*docEntry+8:], line)
		le.PutUint16(docs[i*docEntry+12:], uint16(d.len))
	}
	out := grow(e.out, termHeader+len(docs)+posts.Len()+len(dw.dict)+len(dw.index))[:termHeader]
	clear(out) // put leaves bytes of the header as they were
	h := segmentHeader{start: b.start, end: b.start + uint64(len(b.docs)), startOff: b.startOff, endOff: b.endOff,
		totalLen: b.totalLen, nterms: dw.n, nextLine: b.nextLine, id: id}
	h.postAt = termHeader + uint64(len(docs))
	h.dictAt = h.postAt + uint64(posts.Len())
	h.indexAt = h.dictAt + uint64(len(dw.dict))
	h.size = h.indexAt + uint64(len(dw.index))
	h.put(out)
	out = append(out, docs...)
	out = append(out, posts.Bytes()...)
	out = append(out, dw.dict...)
	out = append(out, dw.index...)
	e.out = out
	// The terms' bytes are the analyzer's: a builder kept in the pool
	// must not hold its memory past a reset of its tables.
	clear(terms)
	dw.prev = nil
	return out
}

// grow is s with length n, its memory reused when it has room.
func grow[T any](s []T, n int) []T {
	if cap(s) >= n {
		return s[:n]
	}
	return make([]T, n, n+n/4)
}

// segmentHeader is what a segment's first termHeader bytes say.
type segmentHeader struct {
	start, end                    uint64 // ordinals
	startOff, endOff              int64
	totalLen                      int64
	nterms                        int
	nextLine                      int64
	id                            fileID
	postAt, dictAt, indexAt, size uint64 // the sections, and the file's size
}

func (h *segmentHeader) put(out []byte) {
	le := binary.LittleEndian
	copy(out, termMagic)
	le.PutUint64(out[16:], h.start)
	le.PutUint64(out[24:], h.end)
	le.PutUint64(out[32:], uint64(h.startOff))
	le.PutUint64(out[40:], uint64(h.endOff))
	le.PutUint64(out[48:], uint64(h.totalLen))
	le.PutUint32(out[56:], uint32(h.nterms))
	le.PutUint64(out[60:], h.postAt)
	le.PutUint64(out[68:], h.dictAt)
	le.PutUint64(out[76:], h.indexAt)
	le.PutUint64(out[84:], h.size)
	le.PutUint32(out[92:], uint32(h.nextLine))
	le.PutUint64(out[96:], h.id.dev)
	le.PutUint64(out[104:], h.id.ino)
	le.PutUint64(out[112:], h.id.tailSum)
	le.PutUint64(out[120:], uint64(h.id.ctime))
}

// dictWriter builds a dictionary and its index, terms added in order.
type dictWriter struct {
	dict, index []byte
	n           int
	prev        []byte // the last term added (kept: not copied)
	postOff     uint64
	blk         []byte // encodePostings' buffer
}

// A dictionary entry: the length of the prefix the term shares with the
// one before (none at a block's start), then, in one varint, the rest's
// length and the entry's kind (its low two bits), the rest's bytes, and
// what the kind says. Most of a home's terms are in one document of a
// file, once: their postings, lengths and bounds were a fifth of its
// index, so a term of one document holds its posting in its entry (a
// "pulsed" term, as Lucene's).
const (
	entryOne   = 0 // one document, once: its ordinal
	entryOneTF = 1 // one document: its ordinal, the term's frequency
	entryMany  = 2 // df, the highest frequency, the shortest document's length, the postings' length
	entryKinds = 2 // bits
)

// add appends term t, in documents ps (their highest term frequency
// maxTF, the shortest's length minLen), its postings to posts unless it
// is pulsed.
func (d *dictWriter) add(t []byte, ps []posting, maxTF, minLen int, posts *bytes.Buffer) {
	shared := 0
	if d.n%dictBlock == 0 {
		d.index = binary.LittleEndian.AppendUint32(d.index, uint32(len(d.dict)))
		d.index = binary.LittleEndian.AppendUint64(d.index, d.postOff)
		d.index = binary.BigEndian.AppendUint64(d.index, bytesKey(t))
	} else {
		for shared < min(len(t), len(d.prev)) && t[shared] == d.prev[shared] {
			shared++
		}
	}
	kind := entryMany
	switch {
	case len(ps) == 1 && ps[0].tf == 1:
		kind = entryOne
	case len(ps) == 1:
		kind = entryOneTF
	}
	d.dict = binary.AppendUvarint(d.dict, uint64(shared))
	d.dict = binary.AppendUvarint(d.dict, uint64(len(t)-shared)<<entryKinds|uint64(kind))
	d.dict = append(d.dict, t[shared:]...)
	d.prev = t
	d.n++
	switch kind {
	case entryOne:
		d.dict = binary.AppendUvarint(d.dict, uint64(ps[0].ord))
		return
	case entryOneTF:
		d.dict = binary.AppendUvarint(d.dict, uint64(ps[0].ord))
		d.dict = binary.AppendUvarint(d.dict, uint64(ps[0].tf))
		return
	}
	n := posts.Len()
	d.blk = encodePostings(posts, ps, d.blk)
	postLen := posts.Len() - n
	for _, v := range []int{len(ps), maxTF, minLen, postLen} {
		d.dict = binary.AppendUvarint(d.dict, uint64(v))
	}
	d.postOff += uint64(postLen)
}

// entry decodes what an entry of kind says, at d[pos:]: the term's
// information (a pulsed term's posting in it, its shortest document
// unknown until bounded; the others' postings are postLen bytes of the
// postings section, read by withPostings) and where the entry ends.
func (s *segment) entry(d []byte, pos int, kind uint64) (ti termInfo, postLen uint64, end int, ok bool) {
	var v [4]uint64
	n := 4
	switch kind {
	case entryOne:
		n = 1
	case entryOneTF:
		n = 2
	case entryMany:
	default:
		return termInfo{}, 0, pos, false
	}
	for k := range n {
		x, m := binary.Uvarint(d[min(pos, len(d)):])
		if m <= 0 {
			return termInfo{}, 0, pos, false
		}
		v[k], pos = x, pos+m
	}
	if kind == entryMany {
		if v[0] < 2 || v[0] > 1<<31 {
			return termInfo{}, 0, pos, false
		}
		ti = termInfo{df: int(v[0]), maxTF: int(min(v[1], 65535)), minLen: int(min(v[2], 65535))}
		ti.nblocks = (ti.df + postingBlock - 1) / postingBlock
		return ti, v[3], pos, true
	}
	ord, tf := v[0], uint64(1)
	if kind == entryOneTF {
		tf = v[1]
	}
	if ord >= uint64(s.count()) {
		return termInfo{}, 0, pos, false
	}
	return termInfo{df: 1, maxTF: int(min(tf, 65535)), nblocks: 1, pulsed: true, ord: uint32(ord)}, 0, pos, true
}

// bounded returns a pulsed term's information with its shortest
// document: its document's length when s's documents are at hand (a
// mapped segment), else 0, a looser bound on its score for the same
// results. Only the term a lookup finds is bounded: reading the document
// of each entry it steps over would touch a page of the documents for
// each.
func (s *segment) bounded(ti termInfo) termInfo {
	if ti.pulsed && s.file == nil && int(ti.ord+1)*docEntry <= len(s.docs) {
		_, _, ti.minLen = s.doc(ti.ord)
	}
	return ti
}

var errCorruptSegment = errors.New("corrupt term segment")

// parseSegment checks a segment's structure and returns a view of it.
func parseSegment(data []byte) (*segment, error) {
	if len(data) < termHeader || string(data[:8]) != termMagic {
		return nil, errCorruptSegment
	}
	s, h := decodeSegmentHeader(data)
	if err := s.check(h, uint64(len(data))); err != nil {
		return nil, err
	}
	s.data = data
	s.docs, s.postings = data[termHeader:h.postAt], data[h.postAt:h.dictAt]
	s.dict, s.index = data[h.dictAt:h.indexAt], data[h.indexAt:h.size]
	return s, nil
}

// openSegment maps (or, when small, reads) a segment file.
func openSegment(path string) (*segment, error) { return openSegmentAs(path, false) }

// openSegmentAs opens a segment, read lazily whatever its size when lazy
// (a merge reads every posting once: mapped, they would all count in the
// daemon's memory).
func openSegmentAs(path string, lazy bool) (*segment, error) {
	f, err := openIndexFile(path, os.O_RDONLY, 0)
	if err != nil {
		return nil, err
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, err
	}
	if lazy {
		// Its dictionary is read, its postings and documents when asked
		// for.
		s, err := readLazy(f, fi.Size())
		if err != nil {
			f.Close()
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		return s, nil
	}
	defer f.Close()
	// Not populated: a query touches the index of the dictionary, the
	// blocks its binary search reads and their terms' postings, a few
	// pages of a segment. Reading small ones whole (a home has thousands)
	// or piece by piece cost several times more. Segment files are
	// written whole and renamed, never truncated: a mapping stays valid.
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
	hb := make([]byte, termHeader)
	if _, err := f.ReadAt(hb, 0); err != nil || string(hb[:8]) != termMagic {
		return nil, errCorruptSegment
	}
	s, h := decodeSegmentHeader(hb)
	if err := s.check(h, uint64(size)); err != nil {
		return nil, err
	}
	di := make([]byte, h.size-h.dictAt)
	if _, err := f.ReadAt(di, int64(h.dictAt)); err != nil {
		return nil, errCorruptSegment
	}
	s.dict, s.index = di[:h.indexAt-h.dictAt], di[h.indexAt-h.dictAt:]
	s.file, s.docsAt, s.postAt, s.postEnd = f, int64(termHeader), int64(h.postAt), int64(h.dictAt)
	return s, nil
}

// check verifies the sections a header places.
func (s *segment) check(h segmentHeader, size uint64) error {
	n := s.end - s.start
	blocks := uint64(s.nterms+dictBlock-1) / dictBlock
	if s.end < s.start || n > 1<<31 || termHeader+n*docEntry != h.postAt || h.postAt > h.dictAt || h.dictAt > h.indexAt ||
		h.indexAt+blocks*indexEntry != h.size || h.size != size || s.startOff < 0 || s.endOff < s.startOff {
		return errCorruptSegment
	}
	return nil
}

func (s *segment) close() {
	if s == nil {
		return
	}
	if s.keptBy != nil {
		s.keptBy.release(s) // the cache unmaps it when no search holds it
		return
	}
	s.unmap()
}

// unmap releases what open took.
func (s *segment) unmap() {
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
	return int64(le.Uint64(e)), int64(le.Uint32(e[8:]) &^ labelled), int(le.Uint16(e[12:]))
}

// labelled reports whether document i's text starts with a speaker's
// name (true when it cannot be read: the caller then reads the line).
func (s *segment) labelled(i uint32) bool {
	if s.file != nil {
		var b [4]byte
		if _, err := s.file.ReadAt(b[:], s.docsAt+int64(i)*docEntry+8); err != nil {
			return true
		}
		return binary.LittleEndian.Uint32(b[:])&labelled != 0
	}
	if int(i+1)*docEntry > len(s.docs) {
		return true
	}
	return binary.LittleEndian.Uint32(s.docs[int(i)*docEntry+8:])&labelled != 0
}

// termInfo is a dictionary entry.
type termInfo struct {
	df      int
	maxTF   int
	minLen  int
	post    []byte // skip table, then blocks
	nblocks int
	// pulsed: the term is in one document, ord, maxTF times (its entry
	// holds its posting: no post).
	pulsed bool
	ord    uint32
}

// dictIter walks a segment's dictionary in term order.
type dictIter struct {
	s       *segment
	i       int    // the next term's number
	pos     int    // its place in the dictionary
	term    []byte // the current term
	ti      termInfo
	postOff uint64 // where its postings start
	postLen uint64
	bad     bool
}

// iter starts a walk at dictionary block b.
func (s *segment) iter(b int) *dictIter {
	it := &dictIter{s: s}
	it.seekBlock(b)
	return it
}

func (it *dictIter) seekBlock(b int) {
	le := binary.LittleEndian
	if (b+1)*indexEntry > len(it.s.index) {
		it.i, it.bad = it.s.nterms, b*dictBlock < it.s.nterms
		return
	}
	e := it.s.index[b*indexEntry:]
	it.i, it.pos, it.postOff, it.postLen = b*dictBlock, int(le.Uint32(e)), le.Uint64(e[4:]), 0
	it.term = it.term[:0]
}

// next decodes the next term (false at the end, or on a corrupt entry).
func (it *dictIter) next() bool {
	if it.bad || it.i >= it.s.nterms {
		return false
	}
	if it.i%dictBlock == 0 && it.i > 0 && it.pos != int(binary.LittleEndian.Uint32(it.s.index[(it.i/dictBlock)*indexEntry:])) {
		it.bad = true // a block starts where the one before ends
		return false
	}
	d := it.s.dict
	uvarint := func() uint64 {
		x, n := binary.Uvarint(d[min(it.pos, len(d)):])
		if n <= 0 {
			it.bad = true
		}
		it.pos += max(n, 0)
		return x
	}
	shared, suffix := uvarint(), uvarint()
	kind := suffix & (1<<entryKinds - 1)
	suffix >>= entryKinds
	if it.bad || shared > uint64(len(it.term)) || suffix > uint64(len(d)-it.pos) || it.i%dictBlock == 0 && shared != 0 {
		it.bad = true
		return false
	}
	it.term = append(it.term[:shared], d[it.pos:it.pos+int(suffix)]...)
	it.pos += int(suffix)
	ti, postLen, end, ok := it.s.entry(d, it.pos, kind)
	if !ok {
		it.bad = true
		return false
	}
	it.postOff += it.postLen
	it.ti, it.postLen, it.pos = it.s.bounded(ti), postLen, end
	it.i++
	return true
}

// withPostings returns ti with its postings, n bytes at off (a pulsed
// term's are in its entry: ti as it is).
func (s *segment) withPostings(ti termInfo, off, n uint64) (termInfo, bool) {
	if ti.pulsed {
		return ti, true
	}
	if ti.nblocks > 1 && uint64(ti.nblocks)*8 > n {
		return termInfo{}, false
	}
	if s.file != nil {
		if int64(off+n) > s.postEnd-s.postAt || off+n < off {
			return termInfo{}, false
		}
		ti.post = make([]byte, n)
		if _, err := s.file.ReadAt(ti.post, s.postAt+int64(off)); err != nil {
			return termInfo{}, false
		}
		return ti, true
	}
	if off+n > uint64(len(s.postings)) || off+n < off {
		return termInfo{}, false
	}
	ti.post = s.postings[off : off+n]
	return ti, true
}

// firstTerm is the first term of dictionary block b (nil: corrupt).
func (s *segment) firstTerm(b int) []byte {
	off := int(binary.LittleEndian.Uint32(s.index[b*indexEntry:]))
	if off > len(s.dict) {
		return nil
	}
	d := s.dict[off:]
	shared, n := binary.Uvarint(d)
	if n <= 0 || shared != 0 {
		return nil
	}
	l, m := binary.Uvarint(d[n:])
	l >>= entryKinds
	if m <= 0 || l > uint64(len(d)-n-m) {
		return nil
	}
	return d[n+m : n+m+int(l)]
}

// termFilter is a Bloom filter of a segment's terms (two bits a term of
// about twelve): a question looks each of its terms up in every file's
// segments, and a term a segment does not hold (a rare word: in nearly
// all) cost a binary search and a walk of a dictionary block, memory the
// cache had rarely kept warm. It is blocked: a term's two bits are in one
// word, so a look-up misses the cache once, not twice (the filters of a
// home's 1,700 segments are megabytes, read at random).
type termFilter struct {
	bits []uint64
	mask uint64 // of a word's index
}

// maxFilterTerms bounds the terms of a segment given a filter (its bits
// are a heap the cache does not count).
const maxFilterTerms = 1 << 20

// termHash is the hash the filters take a term by: a question's term is
// hashed once, then looked for in every segment's filter.
func termHash(term string) uint64 { return xxhash.Sum64String(term) }

// wordOf is the word and the two bits of it that stand for a term of
// hash h.
func (f *termFilter) wordOf(h uint64) (int, uint64) {
	return int(h & f.mask), 1<<((h>>32)&63) | 1<<((h>>40)&63)
}

func (f *termFilter) add(term []byte) {
	w, m := f.wordOf(xxhash.Sum64(term))
	f.bits[w] |= m
}

func (f *termFilter) mayHold(h uint64) bool {
	w, m := f.wordOf(h)
	return f.bits[w]&m == m
}

// filter is the segment's filter of terms: none for a segment a search
// opened for itself, nor before the second search of a kept one (one
// search looks each of its terms up once: a walk of the whole dictionary
// would cost more), nor for a dictionary that does not read whole.
func (s *segment) filter() *termFilter {
	if s.keptBy == nil || s.nterms > maxFilterTerms || s.uses.Load() < 2 {
		return nil
	}
	s.hasOnce.Do(func() {
		n := uint64(64)
		for n < uint64(s.nterms)*12 {
			n <<= 1
		}
		f := &termFilter{bits: make([]uint64, n/64), mask: n/64 - 1}
		it := s.iter(0)
		k := 0
		for it.next() {
			f.add(it.term)
			k++
		}
		if !it.bad && k == s.nterms {
			s.has = f
		}
	})
	return s.has
}

// termKey is a term's first 8 bytes, zero-padded, as a number that
// orders as the terms do (where two keys are equal, the terms are
// compared whole).
func termKey[T string | []byte](t T) uint64 {
	if len(t) >= 8 {
		return uint64(t[0])<<56 | uint64(t[1])<<48 | uint64(t[2])<<40 | uint64(t[3])<<32 |
			uint64(t[4])<<24 | uint64(t[5])<<16 | uint64(t[6])<<8 | uint64(t[7])
	}
	var k uint64
	for i := range len(t) {
		k |= uint64(t[i]) << (56 - 8*i)
	}
	return k
}

// bytesKey is termKey of bytes: eight read at once when there is room
// after them (a term in the analyzer's arena), those past it masked off.
func bytesKey(t []byte) uint64 {
	if cap(t) >= 8 && len(t) > 0 {
		return binary.BigEndian.Uint64(t[:8]) & ^(^uint64(0) >> (8 * uint(min(len(t), 8))))
	}
	return termKey(t)
}

// sortKey is a term to sort: its key (termKey) and which it is.
type sortKey struct {
	key uint64
	i   int32
}

// sortTerms sorts terms by their bytes (term(i) of each): by their keys
// first, a byte at a time from the last (a radix sort, skipping the bytes
// all keys share), then the runs of equal keys whole. A segment's terms
// are thousands to hundreds of thousands: sorting them by comparisons
// was a third of writing it.
func sortTerms(order []sortKey, term func(i int32) []byte) {
	if len(order) < 64 {
		slices.SortFunc(order, func(x, y sortKey) int { return compareTerms(x, y, term) })
		return
	}
	tmp := make([]sortKey, len(order))
	src, dst := order, tmp
	for shift := uint(0); shift < 64; shift += 8 {
		var count [256]int
		for _, o := range src {
			count[byte(o.key>>shift)]++
		}
		if count[byte(src[0].key>>shift)] == len(src) {
			continue // every key has this byte
		}
		at := 0
		for b := range count {
			at, count[b] = at+count[b], at
		}
		for _, o := range src {
			b := byte(o.key >> shift)
			dst[count[b]] = o
			count[b]++
		}
		src, dst = dst, src
	}
	if &src[0] != &order[0] {
		copy(order, src)
	}
	for i := 0; i < len(order); {
		j := i + 1
		for j < len(order) && order[j].key == order[i].key {
			j++
		}
		if j-i > 1 {
			slices.SortFunc(order[i:j], func(x, y sortKey) int { return compareTerms(x, y, term) })
		}
		i = j
	}
}

func compareTerms(x, y sortKey, term func(i int32) []byte) int {
	if x.key != y.key {
		return cmp.Compare(x.key, y.key)
	}
	return bytes.Compare(term(x.i), term(y.i))
}

// lookup finds a term's entry: a binary search of the dictionary blocks'
// first terms by their keys (the block index alone, no varint decoded),
// then a walk of one block.
func (s *segment) lookup(term string) (termInfo, bool) {
	return s.lookupHashed(term, termHash(term))
}

// lookupHashed is lookup of a term whose termHash is h.
func (s *segment) lookupHashed(term string, h uint64) (termInfo, bool) {
	if f := s.filter(); f != nil && !f.mayHold(h) {
		return termInfo{}, false
	}
	return s.lookupDict(term)
}

// lookupDict is lookup in the dictionary itself, the filter asked
// already (or not built).
func (s *segment) lookupDict(term string) (termInfo, bool) {
	blocks := (s.nterms + dictBlock - 1) / dictBlock
	key := termKey(term)
	// The last block whose first term is at most term.
	b := sort.Search(blocks, func(i int) bool {
		if k := binary.BigEndian.Uint64(s.index[i*indexEntry+12:]); k != key {
			return k > key
		}
		return string(s.firstTerm(i)) > term
	}) - 1
	if b < 0 {
		return termInfo{}, false
	}
	// The block's entries, as dictIter.next reads them (and refuses what
	// it refuses), without its allocations: a question looks its terms up
	// in every file's segments.
	e := s.index[b*indexEntry:]
	pos, postOff := int(binary.LittleEndian.Uint32(e)), binary.LittleEndian.Uint64(e[4:])
	d := s.dict
	var buf [64]byte
	cur := buf[:0]
	for i := b * dictBlock; i < min(s.nterms, (b+1)*dictBlock); i++ {
		shared, n := binary.Uvarint(d[min(pos, len(d)):])
		if n <= 0 {
			return termInfo{}, false
		}
		pos += n
		suffix, n := binary.Uvarint(d[pos:])
		kind := suffix & (1<<entryKinds - 1)
		suffix >>= entryKinds
		if n <= 0 || shared > uint64(len(cur)) || i == b*dictBlock && shared != 0 {
			return termInfo{}, false
		}
		pos += n
		if suffix > uint64(len(d)-pos) {
			return termInfo{}, false
		}
		cur = append(cur[:shared], d[pos:pos+int(suffix)]...)
		pos += int(suffix)
		c := compareTerm(cur, term)
		if c > 0 {
			return termInfo{}, false
		}
		ti, postLen, end, ok := s.entry(d, pos, kind)
		if !ok {
			return termInfo{}, false
		}
		if c == 0 {
			return s.withPostings(s.bounded(ti), postOff, postLen)
		}
		postOff, pos = postOff+postLen, end
	}
	return termInfo{}, false
}

// lookedSlots is how many terms a kept segment remembers having looked
// up: a slot a term, by its hash.
const lookedSlots = 8

// lookedTerm is a remembered look-up.
type lookedTerm struct {
	term string
	ti   termInfo
	ok   bool
}

// lookupKept is lookupHashed remembered in a segment the daemon's cache
// keeps. A question looks each of its terms up in every file's segments
// to count their documents (a home's 1,700 files, three of a question's
// four words in nearly every one: a third of its time, each look-up a few
// cache misses); the words one asks about are those the next asks about
// too (the project's names, "deploy", "timeout"), so the entries found
// are kept beside the segment, which never changes while it is mapped:
// the next question's look-up of the same word is a slot's comparison.
// A term the segment's filter refuses is not kept (that answer is as
// cheap), and a lazily read segment's postings are a buffer of each
// look-up's own: only a kept mapping remembers.
func (s *segment) lookupKept(term string, h uint64) (termInfo, bool) {
	if s.keptBy == nil || s.file != nil {
		return s.lookupHashed(term, h)
	}
	// The slot first: a term found before skips the filter, whose word
	// is a cache miss of its own.
	slot := h % lookedSlots
	s.lookedMu.Lock()
	if s.looked != nil {
		if e := &s.looked[slot]; e.term == term && term != "" {
			ti, ok := e.ti, e.ok
			s.lookedMu.Unlock()
			return ti, ok
		}
	}
	s.lookedMu.Unlock()
	if f := s.filter(); f != nil && !f.mayHold(h) {
		return termInfo{}, false
	}
	ti, ok := s.lookupDict(term)
	s.lookedMu.Lock()
	if s.looked == nil {
		s.looked = new([lookedSlots]lookedTerm)
	}
	s.looked[slot] = lookedTerm{term: term, ti: ti, ok: ok}
	s.lookedMu.Unlock()
	return ti, ok
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
	if ti.pulsed {
		c.ords, c.tfs, c.block = []uint32{ti.ord}, []uint16{uint16(ti.maxTF)}, 0
		return c
	}
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
	skips, data := c.ti.skips()
	from := uint32(0)
	prev := uint32(0)
	if b > 0 {
		from = le.Uint32(skips[8*(b-1)+4:])
		prev = le.Uint32(skips[8*(b-1):])
	}
	to := uint32(len(data))
	if len(skips) > 0 {
		to = le.Uint32(skips[8*b+4:])
	}
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

// skips returns a term's skip table (none for one block) and its blocks.
func (ti termInfo) skips() (skips, data []byte) {
	if ti.nblocks <= 1 {
		return nil, ti.post
	}
	return ti.post[:8*ti.nblocks], ti.post[8*ti.nblocks:]
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
	skips, _ := c.ti.skips()
	if len(skips) == 0 {
		// One block: searched below.
	} else if last := le.Uint32(skips[8*c.block:]); ord > last {
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
func decodeSegmentHeader(hb []byte) (*segment, segmentHeader) {
	le := binary.LittleEndian
	h := segmentHeader{start: le.Uint64(hb[16:]), end: le.Uint64(hb[24:]),
		startOff: int64(le.Uint64(hb[32:])), endOff: int64(le.Uint64(hb[40:])), totalLen: int64(le.Uint64(hb[48:])),
		nterms: int(le.Uint32(hb[56:])), nextLine: int64(le.Uint32(hb[92:])),
		id:     fileID{dev: le.Uint64(hb[96:]), ino: le.Uint64(hb[104:]), tailSum: le.Uint64(hb[112:]), ctime: int64(le.Uint64(hb[120:]))},
		postAt: le.Uint64(hb[60:]), dictAt: le.Uint64(hb[68:]), indexAt: le.Uint64(hb[76:]), size: le.Uint64(hb[84:])}
	return &segment{start: h.start, end: h.end, startOff: h.startOff, endOff: h.endOff, totalLen: h.totalLen,
		nterms: h.nterms, nextLine: h.nextLine, id: h.id}, h
}

// encodePostings writes a term's postings: the skip table (each block's
// last ordinal and where it ends) when there are several blocks, then the
// blocks. It returns the block buffer to reuse.
func encodePostings(w *bytes.Buffer, ps []posting, blk []byte) []byte {
	le := binary.LittleEndian
	nblocks := (len(ps) + postingBlock - 1) / postingBlock
	var skips []byte
	if nblocks > 1 {
		skips = make([]byte, 8*nblocks)
	}
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
		if skips != nil && (i%postingBlock == postingBlock-1 || i == len(ps)-1) {
			bi := i / postingBlock
			le.PutUint32(skips[8*bi:], p.ord)
			le.PutUint32(skips[8*bi+4:], uint32(len(blk)))
		}
	}
	w.Write(skips)
	w.Write(blk)
	return blk
}

// Term segments are files beside a file's trigram index: its name's hash,
// then the ordinals and the offset they cover, ".t<start>-<end>-<endOff>"
// in hex.

func termPrefix(dir, root, rel string) string { return termPrefixOf(indexPath(dir, root, rel)) }

// termPrefixOf is termPrefix of the file whose trigram index is idxPath.
func termPrefixOf(idxPath string) string { return strings.TrimSuffix(idxPath, ".idx") + ".t" }

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

// SegmentListing is one listing of an index directory's term segments,
// kept up to date by the indexing that reads it: a pass over a root's
// files lists the directory (which holds every file's segments) once, not
// once per file, which made a first start quadratic in the files. It is
// right only while nothing else writes the directory (the daemon's
// indexing, which tells it what it writes); searches read it (Options.
// Segments) instead of listing the directory each. A nil listing lists
// the directory each time.
type SegmentListing struct {
	mu       sync.Mutex
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
	l.mu.Lock()
	defer l.mu.Unlock()
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

// listed returns the segment files whose names start with prefix when
// the listing is of dir and made (ok false: list the directory).
func (l *SegmentListing) listed(dir, prefix string) (paths []string, ok bool) {
	if l == nil {
		return nil, false
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.byPrefix == nil || l.dir != dir {
		return nil, false
	}
	return slices.Clone(l.byPrefix[prefix]), true
}

// wrote notes a segment file written (or, gone, removed) at path.
func (l *SegmentListing) wrote(path string, gone bool) {
	if l == nil {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.byPrefix == nil || filepath.Dir(path) != l.dir {
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

func removeTermSegments(o IndexOptions, paths []string) {
	for _, p := range paths {
		os.Remove(p)
		o.wrote(p, true)
	}
}

// wrote tells the listing and the cache that a segment file was written
// (or removed) at path.
func (o IndexOptions) wrote(path string, gone bool) {
	o.Listing.wrote(path, gone)
	o.Cache.forget(path)
}

// readSegmentHeader reads what a segment file's header says.
func readSegmentHeader(path string) (*segment, error) {
	f, err := openIndexFile(path, os.O_RDONLY, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var h [termHeader]byte
	if _, err := io.ReadFull(f, h[:]); err != nil || string(h[:8]) != termMagic {
		return nil, errCorruptSegment
	}
	seg, _ := decodeSegmentHeader(h[:])
	return seg, nil
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
	f := file{size: fi.Size(), dev: uint64(st.Dev), ino: uint64(st.Ino), ctime: confine.ChangeTime(st)}
	return termChainOf(paths, f, func() (*os.File, error) { return fh, nil }, readSegmentHeader)
}

// termChainOf is termChain of the file f (as listed: its identity, size
// and change time), opened by fh only when the chain's end must be read
// to tell (its change time moved since), with each segment's header read
// by open (a search opens the segments it reads once).
func termChainOf(paths []string, f file, fh func() (*os.File, error), open func(string) (*segment, error)) []chainLink {
	var links []chainLink
	for _, p := range paths {
		if h, err := open(p); err == nil && h.id.dev == f.dev && h.id.ino == f.ino {
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
	if last.endOff > f.size {
		return nil
	}
	if last.id.ctime != 0 && last.id.ctime == f.ctime && last.endOff == f.size {
		return chain // unchanged since it was indexed whole
	}
	h, err := fh()
	if err != nil {
		return nil
	}
	if sum, err := tailSum(h, last.endOff); err != nil || sum != last.id.tailSum {
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
	now := time.Now() // before the stat: see settledCtime
	src, fi, err := root.OpenRead(rel)
	if err != nil {
		return 0, err
	}
	defer src.Close()
	if fi.Size() < minTermFile {
		// No segments for an empty file. Segments of the larger one it
		// was before are not looked for (a listing of the index
		// directory, which holds every file's, per file): they describe
		// another file and no search trusts them (termChain), and they
		// go when it has a line again.
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
		removeTermSegments(o, paths)
	}
	if fi.Size() <= off {
		return 0, nil
	}
	st := fi.Sys().(*syscall.Stat_t)
	id := fileID{dev: uint64(st.Dev), ino: uint64(st.Ino)}
	a := o.Analyzer
	if a == nil || a.Filtered() {
		a = analysis.New()
	}
	rd := lineReader(io.NewSectionReader(src, off, fi.Size()-off))
	defer putLineReader(rd)
	start := off
	b := getSegBuilder(ord, off)
	defer putSegBuilder(b)
	maxPostings := o.SegPostings
	if maxPostings <= 0 {
		maxPostings = maxSegPostings
	}
	flush := func() error {
		b.endOff, b.nextLine = off, line
		if b.endOff == b.startOff {
			return nil
		}
		if id.tailSum, err = tailSum(src, b.endOff); err != nil {
			return err
		}
		id.ctime = 0
		if b.endOff == fi.Size() {
			id.ctime = settledCtime(st, now)
		}
		if err := addTermSegment(o, dir, root.Path(), rel, id, b); err != nil {
			return err
		}
		b.reset(b.start+uint64(len(b.docs)), off)
		return nil
	}
	for {
		raw, n, err := viewLine(rd, maxLine)
		if err != nil {
			break // io.EOF, or a partial last line: left for later
		}
		lt, ok := memo.get(off, raw)
		if !ok {
			lt = decodeLineText(kind, raw)
		}
		if lt.doc >= 0 {
			b.add(a, lt.search[lt.doc:], off, line, lt.when)
		}
		off += n
		line++
		if len(b.docs) >= maxSegDocs || len(b.flat) >= maxPostings {
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
func addTermSegment(o IndexOptions, dir, root, rel string, id fileID, b *segBuilder) error {
	l := o.Listing
	prefix := termPrefix(dir, root, rel)
	name := segmentName(prefix, b.start, b.start+uint64(len(b.docs)), b.endOff)
	if err := writeSegment(name, b.encode(id)); err != nil {
		return err
	}
	o.wrote(name, false)
	if b.startOff == 0 {
		// The file's first: nothing before it to merge with (a catch-up
		// read 1,700 headers back to learn that).
		return nil
	}
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
		o.wrote(merged, false)
		os.Remove(older.path)
		o.wrote(older.path, true)
		if newer.path != merged {
			os.Remove(newer.path)
			o.wrote(newer.path, true)
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
	id.tailSum, id.ctime = b.id.tailSum, b.id.ctime
	tmp := path + ".tmp"
	f, err := openIndexFile(tmp, os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return err
	}
	defer os.Remove(tmp)
	defer f.Close()
	w := bufio.NewWriterSize(f, 1<<20)
	header := make([]byte, termHeader)
	w.Write(header)
	var docs [2][]byte // each segment's documents: a pulsed term's length
	for k, seg := range []*segment{a, b} {
		d, err := seg.docBytes()
		if err != nil {
			return err
		}
		w.Write(d)
		docs[k] = d
	}
	// The two dictionaries, both sorted, walked together as the merged
	// one's postings are written term by term: memory holds the merged
	// dictionary's bytes and one term's postings. (A list of the merged
	// terms first held 74 MiB for a 48 MiB log of numbered messages: the
	// peak of a daemon bound to 300 MiB.)
	type entry struct {
		ti        termInfo // df 0: absent
		off, size uint64
	}
	shift := uint32(a.count())
	var ps []posting
	var buf bytes.Buffer
	var dw dictWriter
	var postLen uint64
	// The term written, in one of two buffers in turn: dw keeps the one
	// before (dictWriter.prev), and the iterators reuse theirs.
	var terms [2][]byte
	ia, ib := a.iter(0), b.iter(0)
	okA, okB := ia.next(), ib.next()
	for n := 0; okA || okB; n++ {
		c := 0
		switch {
		case !okB:
			c = -1
		case !okA:
			c = 1
		default:
			c = bytes.Compare(ia.term, ib.term)
		}
		var t []byte
		var ta, tb entry
		if c <= 0 {
			t, ta = ia.term, entry{ia.ti, ia.postOff, ia.postLen}
		}
		if c >= 0 {
			t, tb = ib.term, entry{ib.ti, ib.postOff, ib.postLen}
		}
		terms[n%2] = append(terms[n%2][:0], t...)
		ps = ps[:0]
		maxTF, minLen := 0, 65535
		for k, e := range []entry{ta, tb} {
			if e.ti.df == 0 {
				continue
			}
			ti, ok := []*segment{a, b}[k].withPostings(e.ti, e.off, e.size)
			if !ok {
				return errCorruptSegment
			}
			if ti.pulsed {
				// Read lazily, it does not know its document's length.
				if int(ti.ord+1)*docEntry > len(docs[k]) {
					return errCorruptSegment
				}
				ti.minLen = int(binary.LittleEndian.Uint16(docs[k][int(ti.ord)*docEntry+12:]))
			}
			maxTF, minLen = max(maxTF, ti.maxTF), min(minLen, ti.minLen)
			off := uint32(0)
			if k == 1 {
				off = shift
			}
			if ti.pulsed {
				// Most terms: their one posting is in the entry (no
				// cursor made for each).
				ps = append(ps, posting{ord: ti.ord + off, tf: uint16(ti.maxTF)})
				continue
			}
			for c := newCursor(ti); !c.done; c.next() {
				ps = append(ps, posting{ord: c.doc() + off, tf: uint16(c.tf())})
			}
		}
		buf.Reset()
		dw.add(terms[n%2], ps, maxTF, minLen, &buf)
		postLen += uint64(buf.Len())
		w.Write(buf.Bytes())
		if c <= 0 {
			okA = ia.next()
		}
		if c >= 0 {
			okB = ib.next()
		}
	}
	if ia.bad || ib.bad || ia.i != a.nterms || ib.i != b.nterms {
		return errCorruptSegment
	}
	w.Write(dw.dict)
	w.Write(dw.index)
	if err := w.Flush(); err != nil {
		return err
	}
	h := segmentHeader{start: a.start, end: b.end, startOff: a.startOff, endOff: b.endOff, totalLen: a.totalLen + b.totalLen,
		nterms: dw.n, nextLine: b.nextLine, id: id}
	h.postAt = termHeader + uint64(a.count()+b.count())*docEntry
	h.dictAt = h.postAt + postLen
	h.indexAt = h.dictAt + uint64(len(dw.dict))
	h.size = h.indexAt + uint64(len(dw.index))
	h.put(header)
	if _, err := f.WriteAt(header, 0); err != nil {
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// writeSegment writes a segment file whole (temp, then rename).
func writeSegment(path string, data []byte) error {
	tmp := path + ".tmp"
	if err := writeIndexFile(tmp, data); err != nil {
		os.Remove(tmp)
		return err
	}
	return os.Rename(tmp, path)
}
