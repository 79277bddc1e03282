package recall

import (
	"bufio"
	"bytes"
	"container/heap"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unicode"

	"github.com/memwatch/memwatch/recall/analysis"
	"github.com/memwatch/memwatch/session"
)

// Ranked recall: the question an agent asks ("what did we decide about
// the deploy?"), answered by relevance, not by the newest line holding
// every word.
//
// A document is a message of a log or a non-blank line of a note. Its
// own score is Okapi BM25 over the query's terms (recall/analysis; k1 1.2,
// b 0.75, idf ln(1 + (N - df + 0.5)/(df + 0.5)), N, df and the average
// length taken over every document searched). A message is often the
// answer to the one before it, or is answered by the next: its score adds
// its neighbours' own scores in the same file (the next and previous at
// half weight, the two beyond at a quarter), and is multiplied by the
// share of the query's weight (the sum of its terms' idf) that the five
// messages around it hold, so a passage that answers the whole question
// beats one that repeats a word of it. Then two fields of a message: a
// message said by someone the question names (its text starts "Name: ")
// counts three times (spokenByNamed), and a date the question names
// counts as a word held by the messages of that time (analysis.TimeTerms); and the
// file: a score is multiplied by 1 + 0.7 x its file's own BM25 (as one
// document) over the best file's, as a session about the question holds
// more of its answers. Results come by that score; equal scores by
// recency (the newer file, the later line). Measured on LoCoMo (make
// bench-relevance, in the process: go test ./recall -run TestLoCoMo with
// MEMWATCH_LOCOMO): evidence recall@10 77.2% against 52.3% for plain BM25
// over the same turns; neighbours and coverage gave 72.1%, the speaker
// +3.5 (multi-hop +5.8), dates +1.2 (temporal +2), the file +0.2.
// Tried and left out, each under half a point or worse: pseudo-relevance
// feedback (the top results' rarest terms added at 0.1 to 0.3), a second
// pass with the top results' rare terms, diversifying the top 10 by
// neighbourhood, other BM25 parameters, a wider candidate pool.
//
// The cost of a query. Where the daemon's index covers a file, its term
// segments (terms.go) give each term's postings; the rest (a file's tail,
// small files, the spool's held messages) is analyzed at query time into
// segments in memory, restricted to the query's terms. The top documents
// by own score are found with MaxScore (Turtle and Flood, 1995): terms are
// ordered by the most they can add to a score (from their highest term
// frequency and shortest document); the documents of the rarest terms
// are scored first, and once the Limit-th best score exceeds what the
// weakest terms can add together, documents holding only those are never
// scored, and those terms are only looked up for documents the others
// bring. A common word costs a lookup per candidate, not a pass
// over its postings. The neighbours and coverage of those top documents
// are then computed by lookups, and the best Limit returned.
//
// Why segments of our own: SQLite FTS5 (in the driver the project uses)
// was measured on issue #32's 370 MiB log: 40 s to build, 528 MiB, and its
// bm25() scores every matching row, so a question holding a word on nine
// lines in ten took 2.4 s; these segments took 16 s and 101 MiB, and the
// question 12 ms.

// Sort orders of a search (Options.Sort).
const (
	SortRelevance = "relevance" // the default: ranked (a single term or a phrase: every line holding it)
	SortNewest    = "newest"    // every line holding every word, newest first
)

// BM25 parameters and the neighbours' weights.
const (
	bm25K1 = 1.2
	bm25B  = 0.75
	// seedDocs bounds the documents of the rarest terms scored first.
	seedDocs = 10000
)

var neighbourWeight = [3]float64{1, 0.5, 0.25}

// rfile is a file (or the spool's held messages of one) being ranked.
type rfile struct {
	idx  int // its place in the search's files (ties)
	f    file
	segs []*segment // consecutive, in ordinal order
	// held are the raw lines of held messages, by document offset.
	held [][]byte
	// df is, by query term, the documents of the file holding it (as
	// prepare looked them up: fileScore needs no second lookup).
	df []float64
}

// ranker is one ranked search.
type ranker struct {
	ctx   context.Context
	o     Options
	a     *analysis.Analyzer
	da    *analysis.Analyzer // the documents' analyzer: only the query's terms stemmed
	terms []string
	keep  map[string]bool
	dates bool // the question names a date: the messages' times count
	files []*rfile
	segs  []segRef // every segment holding a query term, with its file
	// looked holds what prepare found in the segments holding a query
	// term (those of segs), so scoring a document does not look its
	// terms up again.
	looked map[*segment][]termInfo
	stats  Stats
	vs     *views
	// segFiles lists the index's segment files, by index file name.
	segFiles  map[string][]string
	segListed map[string]bool // the index directories listed into segFiles

	w          []float64 // the terms' weights
	fileScores map[*rfile]float64
	// handles and rd read result lines (readLine); lines keeps them.
	handles  map[string]*os.File
	rd       *bufio.Reader
	lines    map[docRef]rawDoc
	n        int64
	avgdl    float64
	df       []int64
	idf      []float64
	totalIDF float64
}

type segRef struct {
	file *rfile
	seg  *segment
	tis  []termInfo // per query term (df 0: absent)
}

// docRef names a document: its file and ordinal.
type docRef struct {
	file *rfile
	ord  uint64
}

func rankedSearch(ctx context.Context, q Query, o Options) ([]Result, Stats, error) {
	start := time.Now()
	r := &ranker{ctx: ctx, o: o, a: analysis.New(), vs: &views{}, keep: map[string]bool{}}
	defer r.close()
	r.terms, _ = r.a.QueryTerms(q.Text)
	if len(r.terms) == 0 {
		// Only stopwords ("what is it"): nothing to rank by.
		return nil, Stats{}, errNoTerms
	}
	for range r.terms {
		r.w = append(r.w, 1)
	}
	// The dates the question names, as the terms of the messages' times.
	for _, t := range analysis.DateTerms(q.Text) {
		r.terms, r.w = append(r.terms, t), append(r.w, analysis.DateWeight)
	}
	for _, t := range r.terms {
		r.keep[t] = true
		r.dates = r.dates || strings.HasPrefix(t, "\x00")
	}
	r.da = analysis.NewFiltered(r.terms)
	files, err := listFiles(o, r.vs, &r.stats)
	if err != nil {
		return nil, Stats{}, err
	}
	for _, f := range files {
		if err := ctx.Err(); err != nil {
			return nil, r.stats, err
		}
		if err := r.addFile(f); err != nil && !errors.Is(err, fs.ErrNotExist) {
			if ctx.Err() != nil {
				return nil, r.stats, ctx.Err()
			}
			unread(&r.stats, f, err)
		}
	}
	if o.Held != nil {
		if err := r.addHeld(); err != nil {
			return nil, r.stats, err
		}
	}
	r.prepare()
	top := r.topByOwn(o.Limit)
	results, err := r.results(r.final(top), q)
	r.stats.Duration = time.Since(start)
	return results, r.stats, err
}

// errNoTerms means a question had no term to rank by; the search falls
// back to matching every word.
var errNoTerms = errors.New("no term to rank by")

func (r *ranker) close() {
	for _, fh := range r.handles {
		fh.Close()
	}
	for _, f := range r.files {
		for _, s := range f.segs {
			s.close()
		}
	}
	r.vs.close()
}

// docText is what a line is as a document: the text of a log's message
// (not its role, nor a metadata line), or a non-blank line of a note.
func docText(k Kind, raw []byte) ([]byte, bool) {
	text, _, ok := docTextTime(k, raw)
	return text, ok
}

// docTextTime is docText with the message's time (zero: none).
func docTextTime(k Kind, raw []byte) ([]byte, time.Time, bool) {
	raw = trimCR(raw)
	if k == Text {
		return raw, time.Time{}, len(bytes.TrimSpace(raw)) > 0
	}
	m := session.Decode(raw)
	if m.Meta {
		return nil, time.Time{}, false
	}
	return []byte(m.Text), m.Time, true
}

// addFile adds a file's documents: its index's term segments, then the
// rest analyzed now.
func (r *ranker) addFile(f file) error {
	// Opened only when needed: the segments of a file unchanged since it
	// was indexed whole describe it (its change time, as listed), and a
	// home's sessions are mostly such files.
	var fh *os.File
	size := f.size
	open := func() (*os.File, error) {
		if fh != nil {
			return fh, nil
		}
		h, fi, err := r.vs.open(f)
		if err != nil {
			return nil, err
		}
		if st, ok := fi.Sys().(*syscall.Stat_t); !ok || uint64(st.Dev) != f.dev || uint64(st.Ino) != f.ino {
			h.Close()
			return nil, fs.ErrNotExist // another file since it was listed
		}
		fh, size = h, fi.Size()
		return fh, nil
	}
	defer func() {
		if fh != nil {
			fh.Close()
		}
	}()
	if !f.readable {
		// As the owner may not read it (or it is not known): opened, so
		// the kernel and the root's checks say, as for any file read.
		if _, err := open(); err != nil {
			return err
		}
	}
	rf := &rfile{f: f, idx: len(r.files)}
	var from int64
	var ord uint64
	var line int64 = 1
	segs := r.indexSegments(f, open)
	if len(segs) > 0 {
		last := segs[len(segs)-1]
		from, ord, line = last.endOff, last.end, last.nextLine
	}
	if fh == nil && size > from {
		if _, err := open(); err != nil {
			for _, s := range segs {
				s.close()
			}
			return err
		}
	}
	r.stats.Files++
	r.files = append(r.files, rf)
	if len(segs) > 0 {
		rf.segs = segs
		r.stats.Indexed++
	}
	if size > from {
		seg, err := r.analyze(fh, f.src.Kind, from, size, ord, line)
		if err != nil {
			return err
		}
		rf.segs = append(rf.segs, seg)
	}
	return nil
}

// analyze builds an in-memory segment of the lines of fh from off to end
// (the last without a newline included), restricted to the query's terms.
func (r *ranker) analyze(fh *os.File, k Kind, off, end int64, ord uint64, line int64) (*segment, error) {
	b := r.segBuilder(ord, off)
	var named []bool
	rd := bufio.NewReaderSize(io.NewSectionReader(fh, off, end-off), int(min(1<<20, max(4096, end-off))))
	pos := off
	for {
		raw, n, err := readLine(rd, r.o.MaxLine)
		if n == 0 {
			if err != nil && !errors.Is(err, io.EOF) {
				return nil, err
			}
			break
		}
		if text, when, ok := docTextTime(k, raw); ok {
			b.add(r.da, text, pos, line, when)
			named = append(named, k != Text && r.namedSpeaker(text))
		}
		pos += n
		line++
		if err != nil {
			break // the last line, without a newline
		}
	}
	b.nextLine = line
	r.stats.BytesRead += pos - off
	b.endOff = pos
	seg, err := parseSegment(b.encode(fileID{}))
	if err == nil {
		seg.named = named
	}
	return seg, err
}

// segBuilder starts a segment of the documents a search reads itself,
// keeping only the question's terms.
func (r *ranker) segBuilder(ord uint64, off int64) *segBuilder {
	b := newSegBuilder(ord, off, func(t string) bool { return r.keep[t] })
	b.dates = r.dates
	return b
}

// indexSegments returns the daemon's term segments of a file, when they
// describe it as it is: a run of them from its first document.
func (r *ranker) indexSegments(f file, fh func() (*os.File, error)) []*segment {
	dir := f.root.index(r.o)
	if dir == "" || f.gz() {
		return nil
	}
	paths, ok := r.o.Segments.listed(dir, termPrefixOf(f.indexIn(dir)))
	if !ok {
		paths = r.listSegments(dir, f)
	}
	opened := map[string]*segment{}
	chain := termChainOf(paths, f, fh, func(p string) (*segment, error) {
		seg, err := r.o.Indexes.segment(p)
		if err == nil {
			opened[p] = seg
		}
		return seg, err
	})
	var segs []*segment
	for _, l := range chain {
		segs = append(segs, l.hdr)
		delete(opened, l.path)
	}
	for _, seg := range opened {
		seg.close()
	}
	return segs
}

// listSegments lists f's segment files in dir, the directory read once
// per search (names are hashes of root and file: one map serves every
// index).
func (r *ranker) listSegments(dir string, f file) []string {
	if !r.segListed[dir] {
		if r.segFiles == nil {
			r.segFiles, r.segListed = map[string][]string{}, map[string]bool{}
		}
		r.segListed[dir] = true
		ents, _ := os.ReadDir(dir)
		for _, e := range ents {
			if n := e.Name(); isSegmentName(n) {
				k := n[:strings.LastIndex(n, ".t")]
				r.segFiles[k] = append(r.segFiles[k], filepath.Join(dir, n))
			}
		}
	}
	return r.segFiles[strings.TrimSuffix(filepath.Base(indexPath(dir, f.root.Root.Path(), f.rel)), ".idx")]
}

// addHeld adds the spool's held messages, a segment per log (or
// database conversation) and generation, in line order.
func (r *ranker) addHeld() error {
	want := map[string]bool{}
	for _, l := range r.o.Labels {
		want[l] = true
	}
	for _, root := range r.o.Roots {
		var srcs []Source
		for _, src := range root.Sources {
			if (src.Kind == Log || src.Kind == Records) && (len(want) == 0 || want[src.Label]) {
				srcs = append(srcs, src)
			}
		}
		if len(srcs) == 0 {
			continue
		}
		type held struct {
			line int64
			raw  []byte
		}
		byLog := map[string][]held{}
		logs := map[string]file{}
		err := r.o.Held(r.ctx, root.Root, func(rel string, gen, line int64, raw []byte) error {
			name, _, _ := strings.Cut(rel, "#")
			i := -1
			for j, src := range srcs {
				if src.holds(name) {
					i = j
					break
				}
			}
			if i < 0 || !root.holds(name) || !root.holdsHeld(rel) {
				return nil
			}
			key := rel + "\x00" + strconv.FormatInt(gen, 10)
			if _, ok := logs[key]; !ok {
				logs[key] = file{root: &root, rel: rel, src: &Source{Kind: Log, Label: srcs[i].Label, Strip: srcs[i].Strip}, gen: gen}
			}
			byLog[key] = append(byLog[key], held{line: line, raw: bytes.Clone(raw)})
			r.stats.BytesRead += int64(len(raw))
			return nil
		})
		if err != nil {
			return err
		}
		keys := make([]string, 0, len(logs))
		for k := range logs {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			hs := byLog[k]
			sort.Slice(hs, func(i, j int) bool { return hs[i].line < hs[j].line })
			rf := &rfile{f: logs[k], idx: len(r.files)}
			b := r.segBuilder(0, 0)
			var named []bool
			for _, h := range hs {
				if text, when, ok := docTextTime(Log, h.raw); ok {
					b.add(r.da, text, int64(len(rf.held)), h.line, when)
					rf.held = append(rf.held, h.raw)
					named = append(named, r.namedSpeaker(text))
				}
			}
			seg, err := parseSegment(b.encode(fileID{}))
			if err != nil {
				return err
			}
			seg.named = named
			rf.segs = []*segment{seg}
			r.files = append(r.files, rf)
		}
	}
	return nil
}

// prepare takes the collection's statistics and looks every term up.
func (r *ranker) prepare() {
	// The terms are looked up in each file's segments side by side (a
	// home's thousands of files, a question's terms in each: most of a
	// question's time), each file's by one worker, gathered in file order.
	found := make([][]segRef, len(r.files))
	hs := make([]uint64, len(r.terms))
	for i, t := range r.terms {
		hs[i] = termHash(t)
	}
	var next atomic.Int64
	var wg sync.WaitGroup
	for range min(runtime.GOMAXPROCS(0), 4, max(1, len(r.files)/64)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			// The look-ups of a segment holding none of the terms (most
			// of a home's, for each of a question's rarer words) leave
			// nothing behind: they go in scratch, copied when one is found.
			scratch := make([]termInfo, len(r.terms))
			for {
				k := int(next.Add(1) - 1)
				if k >= len(r.files) {
					return
				}
				f := r.files[k]
				f.df = make([]float64, len(r.terms))
				for _, s := range f.segs {
					any := false
					for i, t := range r.terms {
						ti, ok := s.lookupKept(t, hs[i])
						if !ok {
							ti = termInfo{} // df 0: absent
						}
						scratch[i] = ti
						if ok {
							f.df[i] += float64(ti.df)
							any = true
						}
					}
					if any {
						found[k] = append(found[k], segRef{file: f, seg: s, tis: slices.Clone(scratch)})
					}
				}
			}
		}()
	}
	wg.Wait()
	var total int64
	df := make([]int64, len(r.terms))
	n := 0
	for _, refs := range found {
		n += len(refs)
	}
	r.looked = make(map[*segment][]termInfo, n)
	r.segs = slices.Grow(r.segs, n)
	for k, f := range r.files {
		for _, s := range f.segs {
			r.n += int64(s.count())
			total += s.totalLen
		}
		for _, ref := range found[k] {
			for i, ti := range ref.tis {
				df[i] += int64(ti.df)
			}
			r.looked[ref.seg] = ref.tis
		}
		r.segs = append(r.segs, found[k]...)
	}
	r.avgdl = 1
	if r.n > 0 {
		r.avgdl = max(1, float64(total)/float64(r.n))
	}
	r.df = df
	r.idf = make([]float64, len(r.terms))
	for i := range r.terms {
		r.idf[i] = math.Log(1 + (float64(r.n)-float64(df[i])+0.5)/(float64(df[i])+0.5))
		r.totalIDF += r.idf[i] * r.w[i]
	}
}

// bm25 is one term's part of a document's score.
func (r *ranker) bm25(i, tf, length int) float64 {
	t := float64(tf)
	return r.w[i] * r.idf[i] * t * (bm25K1 + 1) / (t + bm25K1*(1-bm25B+bm25B*float64(length)/r.avgdl))
}

// scored is a document and its score.
type scored struct {
	ref   docRef
	score float64
}

// better orders documents by score, then (for ties) by a fixed order of
// files and ordinals, so every search path keeps the same ones.
func better(a, b scored) bool {
	if a.score != b.score {
		return a.score > b.score
	}
	if a.ref.file.idx != b.ref.file.idx {
		return a.ref.file.idx < b.ref.file.idx
	}
	return a.ref.ord > b.ref.ord
}

// minHeap keeps the best documents, the worst on top.
type minHeap []scored

func (h minHeap) Len() int           { return len(h) }
func (h minHeap) Less(i, j int) bool { return better(h[j], h[i]) }
func (h minHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *minHeap) Push(x any)        { *h = append(*h, x.(scored)) }
func (h *minHeap) Pop() any          { old := *h; x := old[len(old)-1]; *h = old[:len(old)-1]; return x }

// push adds s to h (of capacity k) if it is among the k best.
func (h *minHeap) push(k int, s scored) {
	if len(*h) < k {
		heap.Push(h, s)
	} else if better(s, (*h)[0]) {
		(*h)[0] = s
		heap.Fix(h, 0)
	}
}

// pool keeps the candidates of the first phase: the best candidates
// documents by own score, and the best limit of them, whose worst sets
// the threshold: a document under pruneShare of it is not a candidate.
type pool struct {
	all, best         minHeap
	candidates, limit int
}

// pruneShare: documents under this share of the Limit-th best own score
// cannot become results (their neighbours' contexts add at most that
// much), and are not looked for.
const pruneShare = 0.5

func (p *pool) push(s scored) {
	p.all.push(p.candidates, s)
	p.best.push(p.limit, s)
}

// threshold is the score a document must beat to be a candidate.
func (p *pool) threshold() float64 {
	t := 0.0
	if len(p.all) >= p.candidates {
		t = p.all[0].score
	}
	if len(p.best) >= p.limit {
		t = max(t, pruneShare*p.best[0].score)
	}
	return t
}

// candidatesPerResult: the first phase keeps this many documents per
// result asked for.
const candidatesPerResult = 5

// topByOwn returns the k best documents by their own score. The
// documents of the rarest terms (seedDocs at most) are scored first, so
// the threshold is high before any common term's postings are read; then
// MaxScore goes through each segment for the rest.
func (r *ranker) topByOwn(limit int) []scored {
	p := &pool{candidates: candidatesPerResult * limit, limit: limit}
	seen := map[docRef]bool{}
	order := make([]int, len(r.terms))
	for i := range order {
		order[i] = i
	}
	sort.Slice(order, func(a, b int) bool { return r.df[order[a]] < r.df[order[b]] })
	// The rarest terms, in the whole collection, up to seedDocs documents.
	var seed []int
	budget := int64(seedDocs)
	for _, i := range order {
		if r.df[i] > budget {
			break
		}
		budget -= r.df[i]
		seed = append(seed, i)
	}
	for _, ref := range r.segs {
		var ords []uint32
		for _, i := range seed {
			if ti := ref.tis[i]; ti.df > 0 {
				for c := newCursor(ti); !c.done; c.next() {
					ords = append(ords, c.doc())
				}
			}
		}
		if len(ords) == 0 {
			continue
		}
		refs := map[docRef]*ownInfo{}
		for _, o := range ords {
			d := docRef{file: ref.file, ord: ref.seg.start + uint64(o)}
			if !seen[d] {
				seen[d] = true
				refs[d] = &ownInfo{}
			}
		}
		r.own(refs)
		for d, info := range refs {
			p.push(scored{ref: d, score: info.score})
		}
	}
	for _, ref := range r.segs {
		if r.ctx.Err() != nil {
			break
		}
		r.maxScore(ref, p, seen)
	}
	out := append([]scored(nil), p.all...)
	sort.Slice(out, func(i, j int) bool { return better(out[i], out[j]) })
	return out
}

// maxScore scores a segment's documents into h, skipping those that
// cannot enter it.
func (r *ranker) maxScore(ref segRef, pl *pool, seen map[docRef]bool) {
	type tcur struct {
		i  int // query term
		c  *cursor
		ub float64
	}
	var ts []tcur
	for i, ti := range ref.tis {
		if ti.df == 0 {
			continue
		}
		ts = append(ts, tcur{i: i, ub: r.bm25(i, ti.maxTF, ti.minLen)})
	}
	sort.Slice(ts, func(a, b int) bool { return ts[a].ub < ts[b].ub })
	prefix := make([]float64, len(ts)+1) // prefix[j]: the most terms 0..j-1 add
	for j, t := range ts {
		prefix[j+1] = prefix[j] + t.ub
	}
	if prefix[len(ts)] < pl.threshold() {
		// No document of the segment can enter (as the loop below would
		// find at once): its postings are not read. Opening a cursor
		// decodes a block of them, a tenth of a question over a home,
		// whose segments mostly end here.
		return
	}
	for j := range ts {
		ts[j].c = newCursor(ref.tis[ts[j].i])
	}
	parts := make([]float64, len(r.terms))
	for {
		theta := pl.threshold()
		// Terms 0..p-1 cannot lift a document to theta by themselves.
		p := 0
		for p < len(ts) && prefix[p+1] < theta {
			p++
		}
		if p == len(ts) {
			return
		}
		d := uint32(math.MaxUint32)
		for _, t := range ts[p:] {
			if !t.c.done && t.c.doc() < d {
				d = t.c.doc()
			}
		}
		if d == math.MaxUint32 {
			return
		}
		_, _, length := ref.seg.doc(d)
		clear(parts)
		score := 0.0
		for _, t := range ts[p:] {
			if !t.c.done && t.c.doc() == d {
				parts[t.i] = r.bm25(t.i, t.c.tf(), length)
				score += parts[t.i]
				t.c.next()
			}
		}
		complete := true
		for j := p - 1; j >= 0; j-- {
			if score+prefix[j+1] < theta {
				complete = false
				break
			}
			t := ts[j]
			t.c.seek(d)
			if !t.c.done && t.c.doc() == d {
				parts[t.i] = r.bm25(t.i, t.c.tf(), length)
				score += parts[t.i]
			}
		}
		if ref := (docRef{file: ref.file, ord: ref.seg.start + uint64(d)}); complete && !seen[ref] {
			// Summed in the query's order, as own does: the same score
			// whichever path computed it.
			sum := 0.0
			for _, x := range parts {
				sum += x
			}
			pl.push(scored{ref: ref, score: sum})
		}
	}
}

// ownInfo is a document's own score and the query terms it holds.
type ownInfo struct {
	score  float64
	has    uint64 // bit i: term i (the first 64 terms)
	tfs    []int
	length int // the document's terms, the query's and others
}

// own computes documents' own scores by lookups, per file.
func (r *ranker) own(refs map[docRef]*ownInfo) {
	byFile := map[*rfile][]uint64{}
	for ref := range refs {
		byFile[ref.file] = append(byFile[ref.file], ref.ord)
	}
	for f, ords := range byFile {
		sort.Slice(ords, func(i, j int) bool { return ords[i] < ords[j] })
		curs := map[*segment][]*cursor{}
		for _, ord := range ords {
			si := sort.Search(len(f.segs), func(i int) bool { return f.segs[i].end > ord })
			if si == len(f.segs) || ord < f.segs[si].start {
				continue
			}
			seg := f.segs[si]
			cs := curs[seg]
			if cs == nil {
				cs = make([]*cursor, len(r.terms))
				tis, looked := r.looked[seg]
				for i, t := range r.terms {
					if looked {
						if tis[i].df > 0 {
							cs[i] = newCursor(tis[i])
						}
					} else if ti, ok := seg.lookup(t); ok {
						cs[i] = newCursor(ti)
					}
				}
				curs[seg] = cs
			}
			d := uint32(ord - seg.start)
			_, _, length := seg.doc(d)
			info := refs[docRef{file: f, ord: ord}]
			info.tfs = make([]int, len(r.terms))
			info.length = int(length)
			for i, c := range cs {
				if c == nil {
					continue
				}
				c.seek(d)
				if !c.done && c.doc() == d {
					info.score += r.bm25(i, c.tf(), length)
					info.tfs[i] = c.tf()
					if i < 64 {
						info.has |= 1 << i
					}
				}
			}
		}
	}
}

// ranked is a document with its final score and what made it.
type ranked struct {
	ref        docRef
	score, own float64
	ctx        float64 // what the neighbours added
	cover      float64 // the share of the query's weight around it
	file       float64 // its file's score, over the best file's
	speaker    bool    // said by someone the question names
	echo       bool    // a question asking nothing but what the query asks
	tfs        []int
	length     int
}

// final scores the top documents' neighbourhoods and returns the best.
func (r *ranker) final(top []scored) []ranked {
	window := len(neighbourWeight) - 1
	refs := map[docRef]*ownInfo{}
	cands := map[docRef]bool{}
	for _, s := range top {
		for d := -window; d <= window; d++ {
			o := int64(s.ref.ord) + int64(d)
			if o < 0 {
				continue
			}
			cands[docRef{file: s.ref.file, ord: uint64(o)}] = true
			for e := -window; e <= window; e++ {
				if o+int64(e) >= 0 {
					refs[docRef{file: s.ref.file, ord: uint64(o + int64(e))}] = &ownInfo{}
				}
			}
		}
	}
	r.own(refs)
	var out []ranked
	for c := range cands {
		info := refs[c]
		if info == nil || info.tfs == nil {
			continue // past the file's end
		}
		rk := ranked{ref: c, own: info.score, tfs: info.tfs, length: info.length}
		var has uint64
		for d := -window; d <= window; d++ {
			o := int64(c.ord) + int64(d)
			n := refs[docRef{file: c.file, ord: uint64(max(o, 0))}]
			if o < 0 || n == nil {
				continue
			}
			has |= n.has
			if d != 0 {
				rk.ctx += neighbourWeight[abs(d)] * n.score
			}
		}
		var got float64
		for i := range r.terms {
			if i < 64 && has&(1<<i) != 0 {
				got += r.idf[i] * r.w[i]
			}
		}
		if r.totalIDF > 0 {
			rk.cover = got / r.totalIDF
		}
		rk.score = (rk.own + rk.ctx) * rk.cover
		if rk.score > 0 {
			rk.file = r.fileScore(c.file)
			rk.score *= 1 + fileWeight*rk.file
			if rk.speaker = r.spokenByNamed(c); rk.speaker {
				rk.score *= speakerBoost
			}
			out = append(out, rk)
		}
	}
	sort.Slice(out, func(i, j int) bool {
		a, b := out[i], out[j]
		if a.score != b.score {
			return a.score > b.score
		}
		if a.ref.file.f.mtime != b.ref.file.f.mtime {
			return a.ref.file.f.mtime > b.ref.file.f.mtime
		}
		if a.ref.file != b.ref.file {
			return a.ref.file.f.rel < b.ref.file.f.rel
		}
		return a.ref.ord > b.ref.ord
	})
	return out
}

// fileWeight: a document's score is multiplied by 1 + fileWeight x its
// file's score (a session that is about the question holds more of its
// answers than one that mentions it once).
const fileWeight = 0.7

// fileScore is a file's BM25 as one document (a term's frequency: the
// number of its documents holding it), over the best file's of its kind
// (notes, logs): 0 to 1.
func (r *ranker) fileScore(f *rfile) float64 {
	if r.fileScores == nil {
		r.fileScores = map[*rfile]float64{}
		var total, nf float64
		lens := map[*rfile]float64{}
		for _, g := range r.files {
			for _, s := range g.segs {
				lens[g] += float64(s.count())
			}
			total += lens[g]
			nf++
		}
		avg := max(1, total/max(1, nf))
		best := map[bool]float64{} // notes and logs apart: a note's lines are not a conversation's
		for _, g := range r.files {
			sc := 0.0
			for i := range r.terms {
				if df := g.df[i]; df > 0 {
					sc += r.w[i] * r.idf[i] * df * (bm25K1 + 1) / (df + bm25K1*(1-bm25B+bm25B*lens[g]/avg))
				}
			}
			r.fileScores[g] = sc
			best[g.f.src.Kind == Text] = max(best[g.f.src.Kind == Text], sc)
		}
		for g := range r.fileScores {
			if b := best[g.f.src.Kind == Text]; b > 0 {
				r.fileScores[g] /= b
			}
		}
	}
	return r.fileScores[f]
}

// echoWeight multiplies the score of a question that asks nothing but
// what the query asks (echoes): asked again, in this session or another,
// it is the question, never its answer, and it holds every word of the
// query in few others, so plain BM25 puts it above the answer.
const echoWeight = 0.5

// echoes reports a document that is a question (its text ends with "?")
// whose terms are all the query's: its length in terms, less its role
// (a message's text starts "role: "), is what the query's terms make of
// it.
func echoes(k Kind, text []byte, rk ranked) bool {
	if !bytes.HasSuffix(bytes.TrimSpace(text), []byte("?")) {
		return false
	}
	held := 0
	for _, tf := range rk.tfs {
		held += tf
	}
	role := 0
	if k != Text {
		role = 1
	}
	return held > 0 && rk.length-role <= held
}

// speakerBoost multiplies the score of a message said by someone the
// question names.
const speakerBoost = 3

// spokenByNamed reports whether a message is said by someone the question
// names: its text starts with a speaker's name and a colon ("Melanie: I
// signed up for a pottery class"), as in a transcript or a chat relayed
// to an agent, and the name is a term of the query. A question about a
// person is answered by what that person said far more often than by
// what others said about them (on LoCoMo, 95% of the evidence turns of a
// question naming one speaker are that speaker's). Notes are not asked:
// a "Decision: ..." line has no speaker.
func (r *ranker) spokenByNamed(d docRef) bool {
	f := d.file
	if f.f.src.Kind == Text {
		return false
	}
	si := sort.Search(len(f.segs), func(i int) bool { return f.segs[i].end > d.ord })
	if si < len(f.segs) && f.segs[si].named != nil && d.ord >= f.segs[si].start {
		// Known since the search read the document.
		if i := d.ord - f.segs[si].start; i < uint64(len(f.segs[si].named)) {
			return f.segs[si].named[i]
		}
	}
	if si < len(f.segs) && d.ord >= f.segs[si].start && !f.segs[si].labelled(uint32(d.ord-f.segs[si].start)) {
		return false // no speaker's name to read (most of a coding agent's messages)
	}
	raw, _, err := r.rawLine(d)
	if err != nil {
		return false
	}
	text, ok := docText(f.f.src.Kind, raw)
	return ok && r.namedSpeaker(text)
}

// namedSpeaker reports whether a message's text starts with the name of
// someone the question names.
func (r *ranker) namedSpeaker(text []byte) bool {
	name := speakerLabel(text)
	if name == nil {
		return false
	}
	hit := false
	r.a.Terms(name, func(t string) { hit = hit || r.keep[t] })
	return hit
}

// speakerLabel is the speaker's name a message's text starts with
// ("Caroline: ..."), nil when it starts with none.
func speakerLabel(text []byte) []byte {
	name, _, found := bytes.Cut(text[:min(len(text), 64)], []byte(": "))
	if !found || !isSpeakerName(name) {
		return nil
	}
	return name
}

// compareTerm is strings.Compare of a term read and one looked up,
// without making a string of the first.
func compareTerm(b []byte, t string) int {
	switch {
	case string(b) == t:
		return 0
	case string(b) < t:
		return -1
	}
	return 1
}

// isSpeakerName: one to three words, each capitalised, of letters.
func isSpeakerName(b []byte) bool {
	words := strings.Fields(string(b))
	if len(words) == 0 || len(words) > 3 {
		return false
	}
	for _, w := range words {
		for i, c := range w {
			if i == 0 && !unicode.IsUpper(c) || !unicode.IsLetter(c) && c != '.' && c != '\'' && c != '-' {
				return false
			}
		}
	}
	return true
}

func abs(d int) int {
	if d < 0 {
		return -d
	}
	return d
}

// results reads the best documents' lines and cites them.
func (r *ranker) results(rs []ranked, q Query) ([]Result, error) {
	s := &searcher{q: q, o: r.o}
	// An agent that writes a message again under its id (Gemini CLI, as
	// the message changes) has one message: its last version, at the rank
	// of its best.
	type version struct {
		line int64
		raw  []byte
		text []byte
	}
	type cand struct {
		rk   ranked
		key  string // file and message id ("": none)
		line int64
		raw  []byte
	}
	latest := map[string]version{}
	var cands []cand
	for _, rk := range rs {
		if len(cands) >= 4*r.o.Limit {
			break
		}
		f := rk.ref.file
		raw, line, err := r.rawLine(rk.ref)
		if err != nil {
			continue // gone since
		}
		c := cand{rk: rk, line: line, raw: raw}
		text, id := searchTextID(f.f.src.Kind, raw)
		if id != "" {
			c.key = f.f.root.Root.Path() + "\x00" + f.f.rel + "\x00" + id
			if v, ok := latest[c.key]; !ok || line > v.line {
				latest[c.key] = version{line: line, raw: raw, text: text}
			}
		}
		if echoes(f.f.src.Kind, text, rk) {
			c.rk.echo = true
			c.rk.score *= echoWeight
		}
		cands = append(cands, c)
	}
	sort.SliceStable(cands, func(i, j int) bool { return cands[i].rk.score > cands[j].rk.score })
	emitted := map[string]bool{}
	for _, c := range cands {
		if len(s.results) >= r.o.Limit {
			break
		}
		rk, f, line, raw := c.rk, c.rk.ref.file, c.line, c.raw
		if c.key != "" {
			if emitted[c.key] {
				continue
			}
			emitted[c.key] = true
			v := latest[c.key]
			line, raw = v.line, v.raw
		}
		text, _ := searchTextID(f.f.src.Kind, raw)
		n := len(s.results)
		s.emit(f.f, line, raw, text, r.firstTerm(text))
		if r.o.Explain && len(s.results) > n {
			s.results[n].Score = math.Round(rk.score*1000) / 1000
			s.results[n].Why = r.why(rk)
		}
	}
	if s.results == nil {
		s.results = []Result{}
	}
	return s.results, nil
}

// why says how a result's score was made.
func (r *ranker) why(rk ranked) string {
	var ts []string
	for i, tf := range rk.tfs {
		if tf > 0 {
			name, date := analysis.DateTermText(r.terms[i])
			t := fmt.Sprintf("%s (idf %.2f)", name, r.idf[i])
			switch {
			case date:
				t = fmt.Sprintf("%s (idf %.2f, weight %.1f)", name, r.idf[i], r.w[i])
			case tf > 1:
				t = fmt.Sprintf("%s x%d (idf %.2f)", name, tf, r.idf[i])
			}
			ts = append(ts, t)
		}
	}
	own := "no query term itself"
	if len(ts) > 0 {
		own = "BM25 " + strconv.FormatFloat(rk.own, 'f', 2, 64) + " for " + strings.Join(ts, ", ")
	}
	why := fmt.Sprintf("%s; +%.2f from the messages around it; x%.2f: the five around it hold %.0f%% of the question's weight; x%.2f: its file's share of the question (%.0f%% of the best file's)", own, rk.ctx, rk.cover, 100*rk.cover, 1+fileWeight*rk.file, 100*rk.file)
	if rk.echo {
		why += fmt.Sprintf("; x%.1f: a question asking nothing but what this one asks", echoWeight)
	}
	if rk.speaker {
		why += fmt.Sprintf("; x%d: said by someone the question names", speakerBoost)
	}
	return why
}

// firstTerm is the offset in text of the first word that is a query
// term, for the snippet (-1: none).
func (r *ranker) firstTerm(text []byte) int {
	a := analysis.New()
	for i := 0; i < len(text); {
		j := i
		for j < len(text) && !analysis.IsWordByte(text[j]) {
			j++
		}
		k := j
		for k < len(text) && analysis.IsWordByte(text[k]) {
			k++
		}
		if k == j {
			break
		}
		found := false
		a.Terms(text[j:k], func(t string) { found = found || r.keep[t] })
		if found {
			return j
		}
		i = k
	}
	return -1
}

// rawLine is a document's raw line and its line number: read once per
// search (the speaker's name is asked of the candidates, then the best
// are cited).
func (r *ranker) rawLine(d docRef) ([]byte, int64, error) {
	if l, ok := r.lines[d]; ok {
		return l.raw, l.line, nil
	}
	f := d.file
	si := sort.Search(len(f.segs), func(i int) bool { return f.segs[i].end > d.ord })
	if si == len(f.segs) || d.ord < f.segs[si].start {
		return nil, 0, fs.ErrNotExist
	}
	seg := f.segs[si]
	off, line, _ := seg.doc(uint32(d.ord - seg.start))
	var raw []byte
	if f.held != nil {
		raw = f.held[off]
	} else {
		var err error
		if raw, err = r.readLine(f.f, off); err != nil {
			return nil, 0, err
		}
	}
	if r.lines == nil {
		r.lines = map[docRef]rawDoc{}
	}
	r.lines[d] = rawDoc{raw: raw, line: line}
	return raw, line, nil
}

// rawDoc is a document's line as read.
type rawDoc struct {
	raw  []byte
	line int64
}

// readLine reads the line of a file at offset off (cut at MaxLine),
// through a handle kept for the search and a reader sized for a message.
func (r *ranker) readLine(f file, off int64) ([]byte, error) {
	key := f.root.Root.Path() + "\x00" + f.rel
	fh := r.handles[key]
	if fh == nil {
		var err error
		if fh, _, err = r.vs.open(f); err != nil {
			return nil, err
		}
		if r.handles == nil {
			r.handles = map[string]*os.File{}
		}
		r.handles[key] = fh
	}
	if r.rd == nil {
		r.rd = bufio.NewReaderSize(nil, 8<<10)
	}
	r.rd.Reset(io.NewSectionReader(fh, off, 1<<62))
	raw, _, err := readLine(r.rd, r.o.MaxLine)
	if errors.Is(err, io.ErrUnexpectedEOF) {
		err = nil
	}
	return raw, err
}
