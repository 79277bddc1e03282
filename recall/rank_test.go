package recall

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/memwatch/memwatch/recall/analysis"
)

// TestRankedIndexMatchesScan: a log indexed as it grows (segments
// written per pass and merged) is ranked through its term segments
// exactly as a search without the index ranks it: the same results,
// scores and order; a rewrite starts the segments anew.
func TestRankedIndexMatchesScan(t *testing.T) {
	dir, idx := t.TempDir(), t.TempDir()
	root := openRoot(t, dir)
	srcs := []Source{{Glob: "*.jsonl", Kind: Log, Label: "messages"}, {Glob: "*.md", Kind: Text, Label: "notes"}}
	rng := rand.New(rand.NewPCG(1, 2))
	words := strings.Fields("deploy staging cluster migration database token refresh rotation budget review the agent decided to wait for tests flaky retry rollback")
	p := filepath.Join(dir, "s.jsonl")
	write := func(from, n int) {
		f, _ := os.OpenFile(p, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
		defer f.Close()
		for i := from; i < from+n; i++ {
			var b []string
			for range 3 + rng.IntN(12) {
				b = append(b, words[rng.IntN(len(words))])
			}
			if i%97 == 0 {
				b = append(b, "zanzibar-quokka")
			}
			if i%50 == 7 {
				fmt.Fprintf(f, `{"_type":"metadata","n":%d}`+"\n", i)
			}
			fmt.Fprintf(f, `{"role":%q,"content":"message %d: %s"}`+"\n", []string{"user", "assistant"}[i%2], i, strings.Join(b, " "))
		}
	}
	os.WriteFile(filepath.Join(dir, "notes.md"), []byte("# Notes\n\nthe zanzibar-quokka deploy waits for the database migration\n\nrollback plan: retry twice\n"), 0o644)
	questions := []string{"what did the agent decide about the zanzibar-quokka deploy?", "database migration rollback", "why was the token rotation flaky", "review budget"}
	compare := func(stage string, wantIndexed bool) {
		t.Helper()
		for _, qs := range questions {
			q, _ := ParseQuery(qs)
			scan, _, err := Search(context.Background(), q, Options{Roots: []Root{{Root: root, Sources: srcs}}, Limit: 10, Explain: true})
			if err != nil {
				t.Fatal(err)
			}
			fast, st, err := Search(context.Background(), q, Options{Roots: []Root{{Root: root, Sources: srcs}}, Limit: 10, Explain: true, Index: idx})
			if err != nil {
				t.Fatal(err)
			}
			if wantIndexed && st.Indexed == 0 {
				t.Errorf("%s %q: the index was not used", stage, qs)
			}
			if len(scan) != 10 {
				t.Errorf("%s %q: %d results, want 10", stage, qs, len(scan))
			}
			if i, diff := firstDiff(scan, fast); diff {
				t.Errorf("%s %q: the index ranks differently from result %d\nscan  %+v\nindex %+v", stage, qs, i, at(scan, i), at(fast, i))
			}
		}
	}
	index := func() {
		if _, err := IndexFile(idx, root, "s.jsonl", Log, IndexOptions{BlockSize: 4096}); err != nil {
			t.Fatal(err)
		}
	}
	n := 0
	for range 80 {
		write(n, 40)
		n += 40
		index()
	}
	segs := termSegmentFiles(idx, root.Path(), "s.jsonl")
	if len(segs) < 2 || len(segs) > 8 {
		t.Errorf("%d term segments after 80 passes, want a few (merged)", len(segs))
	}
	compare("indexed", true)
	write(n, 25) // a tail the index does not cover yet
	compare("grown", true)
	// Questions of a rare identifier: every result holds it.
	q, _ := ParseQuery("what did the agent decide about the zanzibar-quokka deploy?")
	rs, _, _ := Search(context.Background(), q, Options{Roots: []Root{{Root: root, Sources: srcs}}, Limit: 10, Index: idx})
	for _, r := range rs {
		if !strings.Contains(r.Text, "zanzibar-quokka") {
			t.Errorf("result %s does not hold zanzibar-quokka: %s", r.Citation, r.Text)
		}
	}
	// Rewritten in place: a new epoch, segments built anew.
	os.WriteFile(p, nil, 0o644)
	n = 0
	write(0, 900)
	index()
	compare("rewritten", true)
}

// FuzzSegment: a segment file cut or overwritten (a crash, a bad disk)
// is refused or read without a panic, whatever its bytes.
func FuzzSegment(f *testing.F) {
	b := newSegBuilder(0, 0, nil)
	a := analysis.New()
	for i := range 300 {
		b.add(a, []byte(fmt.Sprintf("message %d about the deploy and the rollback of service %d", i, i%7)), int64(i*60), int64(i+1), time.Time{})
	}
	b.endOff, b.nextLine = 300*60, 301
	good := b.encode(fileID{dev: 1, ino: 2})
	f.Add(good)
	f.Add(good[:len(good)/2])
	f.Fuzz(func(t *testing.T, data []byte) {
		s, err := parseSegment(data)
		if err != nil {
			return
		}
		for it := s.iter(0); it.next(); { // as a merge walks it
			if ti, ok := it.info(); ok {
				for c := newCursor(ti); !c.done; c.next() {
				}
			}
		}
		for _, term := range []string{"deploy", "rollback", "servic", "1", "zzz"} {
			ti, ok := s.lookup(term)
			if !ok {
				continue
			}
			c := newCursor(ti)
			for n := 0; !c.done && n < 100000; n++ {
				if d := c.doc(); int(d) < s.count() {
					s.doc(d)
				}
				c.next()
			}
			c = newCursor(ti)
			c.seek(150)
		}
	})
}

// appendMessages appends n messages of an indexing pass to the log at p.
func appendMessages(t *testing.T, p string, pass, n int) {
	t.Helper()
	f, err := os.OpenFile(p, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for j := range n {
		fmt.Fprintf(f, `{"role":"user","content":"pass %d line %d of %s: the deploy of service %d waits for the migration"}`+"\n", pass, j, filepath.Base(p), j%7)
	}
}

// TestSegmentListingKeepsTheChain: indexing many files through one
// listing of the index directory (the daemon's way) writes and merges
// exactly the segments that listing it for each file does, and the
// listing stays what the directory holds.
func TestSegmentListingKeepsTheChain(t *testing.T) {
	dir := t.TempDir()
	root := openRoot(t, dir)
	shared, each := t.TempDir(), t.TempDir()
	l := NewSegmentListing()
	names := []string{"a.jsonl", "b.jsonl", "c.jsonl"}
	for pass := range 30 {
		for i, n := range names {
			appendMessages(t, filepath.Join(dir, n), pass, 20+10*i)
			if pass == 20 && i == 1 {
				os.WriteFile(filepath.Join(dir, n), nil, 0o644) // rewritten: its segments go
			}
			if _, err := IndexFile(shared, root, n, Log, IndexOptions{Listing: l}); err != nil {
				t.Fatal(err)
			}
			if _, err := IndexFile(each, root, n, Log, IndexOptions{}); err != nil {
				t.Fatal(err)
			}
		}
	}
	base := func(paths []string) []string {
		var out []string
		for _, p := range paths {
			out = append(out, filepath.Base(p))
		}
		slices.Sort(out)
		return out
	}
	for _, n := range names {
		got := base(termSegmentFiles(shared, root.Path(), n))
		want := base(termSegmentFiles(each, root.Path(), n))
		if !slices.Equal(got, want) {
			t.Errorf("%s: segments %v, want %v", n, got, want)
		}
		if kept := base(l.files(shared, termPrefix(shared, root.Path(), n))); !slices.Equal(kept, got) {
			t.Errorf("%s: the listing holds %v, the directory %v", n, kept, got)
		}
		if len(got) == 0 {
			t.Errorf("%s: no segment", n)
		}
	}
}

// TestSegmentByIDsAsByStrings: the indexing's way of building a segment
// (terms by id, one analyzer for many segments) writes the very bytes
// the way by strings does.
func TestSegmentByIDsAsByStrings(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	words := strings.Fields("Deploy deploying deployed the a staging cluster's migration v2 café 日本語 token refresh don't rotation budget painted painting")
	shared := analysis.New()
	for seg := range 5 {
		byID := newSegBuilder(uint64(seg*100), 0, nil)
		byStr := newSegBuilder(uint64(seg*100), 0, func(string) bool { return true })
		for i := range 100 {
			var b []string
			for range 1 + rng.IntN(20) {
				b = append(b, words[rng.IntN(len(words))])
			}
			text := []byte(strings.Join(b, " "))
			// Months and years change, and come back (the ids of a
			// month's terms are kept while it lasts).
			when := time.Date(2025+rng.IntN(2), time.Month(11+i/40), 1+i%20, 10, 0, 0, 0, time.UTC)
			if i%7 == 0 {
				when = when.In(time.FixedZone("far", 14*3600))
			}
			byID.add(shared, text, int64(i*80), int64(i+1), when)
			byStr.add(analysis.New(), text, int64(i*80), int64(i+1), when)
		}
		if seg == 4 {
			// A builder given a second analyzer goes on by strings.
			for i := range 20 {
				text := []byte(fmt.Sprintf("deploy later %d painted", i))
				byID.add(analysis.New(), text, int64(8000+i*80), int64(101+i), time.Time{})
				byStr.add(analysis.New(), text, int64(8000+i*80), int64(101+i), time.Time{})
			}
		}
		byID.endOff, byStr.endOff = 8000, 8000
		if got, want := byID.encode(fileID{}), byStr.encode(fileID{}); !bytes.Equal(got, want) {
			t.Fatalf("segment %d: %d bytes by id differ from the %d by string", seg, len(got), len(want))
		}
	}
}

// TestSegmentOfAnEarlierFormatIsBuiltAnew: a state written by an earlier
// release holds segments of another format; they are not read, and the
// next indexing pass replaces them, after which the index answers again.
func TestSegmentOfAnEarlierFormatIsBuiltAnew(t *testing.T) {
	dir, idx := t.TempDir(), t.TempDir()
	root := openRoot(t, dir)
	var b strings.Builder
	for i := range 400 {
		fmt.Fprintf(&b, `{"role":"user","content":"message %d: the deploy of service %d waits for the migration"}`+"\n", i, i%9)
	}
	os.WriteFile(filepath.Join(dir, "s.jsonl"), []byte(b.String()), 0o644)
	if _, err := IndexFile(idx, root, "s.jsonl", Log, IndexOptions{}); err != nil {
		t.Fatal(err)
	}
	segs := termSegmentFiles(idx, root.Path(), "s.jsonl")
	if len(segs) != 1 {
		t.Fatalf("%d segments, want 1", len(segs))
	}
	// As the previous release wrote it: another magic (and layout).
	data, _ := os.ReadFile(segs[0])
	copy(data, "MWTERM02")
	os.WriteFile(segs[0], data, 0o600)
	q, _ := ParseQuery("why does the deploy wait")
	o := Options{Roots: []Root{{Root: root, Sources: []Source{{Glob: "*.jsonl", Kind: Log, Label: "messages"}}}}, Limit: 5, Index: idx}
	rs, st, err := Search(context.Background(), q, o)
	if err != nil || len(rs) != 5 || st.Indexed != 0 {
		t.Fatalf("with an old segment: %d results, %d files by the index, %v; want 5, 0", len(rs), st.Indexed, err)
	}
	if _, err := IndexFile(idx, root, "s.jsonl", Log, IndexOptions{}); err != nil {
		t.Fatal(err)
	}
	after := termSegmentFiles(idx, root.Path(), "s.jsonl")
	if len(after) != 1 {
		t.Fatalf("%d segments after indexing again, want 1", len(after))
	}
	if data, _ := os.ReadFile(after[0]); string(data[:8]) != termMagic {
		t.Errorf("the segment is %q, want %q", data[:8], termMagic)
	}
	rs2, st, err := Search(context.Background(), q, o)
	if err != nil || st.Indexed != 1 {
		t.Fatalf("after: %d files by the index, %v; want 1", st.Indexed, err)
	}
	if i, diff := firstDiff(rs, rs2); diff {
		t.Errorf("the index ranks differently from the scan at %d", i)
	}
}

// TestUnchangedLogIsRankedFromItsSegments: a log indexed whole once its
// change time had settled is described by its segments without being
// read (the segment records that time); rewritten in place to the same
// size, its change time moves and the segments are checked, and refused.
func TestUnchangedLogIsRankedFromItsSegments(t *testing.T) {
	dir, idx := t.TempDir(), t.TempDir()
	root := openRoot(t, dir)
	p := filepath.Join(dir, "s.jsonl")
	write := func(topic string) {
		var b strings.Builder
		for i := range 400 {
			fmt.Fprintf(&b, `{"role":"user","content":"message %03d: the %s of service %d waits for the migration"}`+"\n", i, topic, i%9)
		}
		f, err := os.OpenFile(p, os.O_WRONLY|os.O_CREATE, 0o644) // in place: the same inode
		if err != nil {
			t.Fatal(err)
		}
		f.WriteAt([]byte(b.String()), 0)
		f.Close()
		waitSettled(t, p)
	}
	o := Options{Roots: []Root{{Root: root, Sources: []Source{{Glob: "*.jsonl", Kind: Log, Label: "messages"}}}}, Limit: 5, Explain: true}
	ask := func(question string, indexed int) {
		t.Helper()
		q, _ := ParseQuery(question)
		scan, _, err := Search(context.Background(), q, o)
		if err != nil {
			t.Fatal(err)
		}
		oi := o
		oi.Index = idx
		fast, st, err := Search(context.Background(), q, oi)
		if err != nil || st.Indexed != indexed {
			t.Fatalf("%q: %d files by the index, %v; want %d", question, st.Indexed, err, indexed)
		}
		if i, diff := firstDiff(scan, fast); diff || len(scan) == 0 {
			t.Errorf("%q: the index ranks differently from the scan at %d (%d results)", question, i, len(scan))
		}
	}
	write("deploy")
	if _, err := IndexFile(idx, root, "s.jsonl", Log, IndexOptions{}); err != nil {
		t.Fatal(err)
	}
	segs := termSegmentFiles(idx, root.Path(), "s.jsonl")
	if len(segs) != 1 {
		t.Fatalf("%d segments, want 1", len(segs))
	}
	if h, err := readSegmentHeader(segs[0]); err != nil || h.id.ctime == 0 {
		t.Fatalf("the segment of a settled log records no change time (%v)", err)
	}
	ask("why does the deploy wait", 1)
	// The same size, other words, not indexed again: the change time
	// moved, the end's bytes differ, the segments are refused.
	write("update")
	ask("why does the update wait", 0)
	ask("why does the deploy wait", 0)
}

// TestSegmentLookupByKeys: a term is found by its block's key (its first
// eight bytes) and, where keys tie (long shared prefixes, date terms that
// start with a zero byte), by the whole term; an absent term is not.
func TestSegmentLookupByKeys(t *testing.T) {
	var terms []string
	for i := range 200 {
		terms = append(terms, fmt.Sprintf("configuration%03d", i), fmt.Sprintf("\x00d%d", i), fmt.Sprintf("w%d", i))
	}
	terms = append(terms, "a", "ab", "abcdefgh", "abcdefgh\x00", "abcdefghi", "zz")
	b := newSegBuilder(0, 0, func(string) bool { return true })
	for i, term := range terms {
		b.terms[term] = []posting{{ord: uint32(i), tf: 1}}
		b.docs = append(b.docs, docInfo{off: int64(i), line: int64(i + 1), len: 1})
	}
	b.endOff = int64(len(terms))
	s, err := parseSegment(b.encode(fileID{}))
	if err != nil {
		t.Fatal(err)
	}
	if len(s.postings) != 0 {
		t.Errorf("terms of one document each wrote %d bytes of postings, want them in their entries", len(s.postings))
	}
	for i, term := range terms {
		ti, ok := s.lookup(term)
		if !ok {
			t.Fatalf("lookup %q: not found", term)
		}
		if c := newCursor(ti); c.done || c.doc() != uint32(i) {
			t.Errorf("lookup %q: got the postings of another term", term)
		}
	}
	for _, absent := range []string{"", "\x00", "abcdefg", "abcdefgh\x00\x00", "abcdefgha", "configuration", "configuration200", "zzz", "\xff"} {
		if _, ok := s.lookup(absent); ok {
			t.Errorf("lookup %q: found, want absent", absent)
		}
	}
}

// TestLookupKeptRemembersRight: a kept segment's remembered look-ups
// answer as the dictionary does, for terms asked again, terms sharing a
// slot, absent terms and terms its filter refuses, from several searches
// at once.
func TestLookupKeptRemembersRight(t *testing.T) {
	var terms []string
	b := newSegBuilder(0, 0, func(string) bool { return true })
	for i := range 300 {
		term := fmt.Sprintf("word%03d", i)
		terms = append(terms, term)
		ps := []posting{{ord: uint32(i), tf: 1}}
		if i%3 == 0 { // some terms in many documents: postings outside the entry
			ps = append(ps, posting{ord: uint32(i + 1), tf: 2}, posting{ord: uint32(i + 2), tf: 3})
		}
		b.terms[term] = ps
		b.docs = append(b.docs, docInfo{off: int64(i), line: int64(i + 1), len: 1})
	}
	b.docs = append(b.docs, docInfo{off: 300, line: 301, len: 1}, docInfo{off: 301, line: 302, len: 1})
	b.endOff = 302
	s, err := parseSegment(b.encode(fileID{}))
	if err != nil {
		t.Fatal(err)
	}
	s.keptBy = NewIndexCache(1 << 20) // as the daemon's cache keeps it
	s.uses.Store(2)                   // its filter built
	asked := append(slices.Clone(terms), "absent", "word", "word3000", "")
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for pass := range 3 {
				for k := range asked {
					term := asked[(k*7+g*31+pass)%len(asked)]
					want, wantOK := s.lookup(term)
					for range 2 {
						got, ok := s.lookupKept(term, termHash(term))
						if ok != wantOK || got.df != want.df || got.maxTF != want.maxTF || got.ord != want.ord || !bytes.Equal(got.post, want.post) {
							t.Errorf("lookupKept(%q) = %+v, %v; want %+v, %v", term, got, ok, want, wantOK)
							return
						}
					}
				}
			}
		}()
	}
	wg.Wait()
	if s.looked == nil {
		t.Error("a kept segment remembered no look-up")
	}
}

// TestSegmentSaysWhichDocumentsHaveASpeaker: only a message that starts
// with a speaker's name is read to see whether the question names them;
// the mark leaves the line number as it was.
func TestSegmentSaysWhichDocumentsHaveASpeaker(t *testing.T) {
	texts := []struct {
		text     string
		labelled bool
	}{
		{"Caroline: I went to the support group yesterday", true},
		{"Mel Anne: what a day", true},
		{"user: the deploy keeps hitting the timeout", false},
		{"assistant: raised it to 90s", false},
		{"no speaker at all here", false},
		{"Dr. Who: at line", true},
	}
	b := newSegBuilder(0, 0, nil)
	a := analysis.New()
	for i, tc := range texts {
		b.add(a, []byte(tc.text), int64(i*100), int64(3_000_000_000+i), time.Time{})
	}
	b.endOff = int64(len(texts) * 100)
	s, err := parseSegment(b.encode(fileID{}))
	if err != nil {
		t.Fatal(err)
	}
	for i, tc := range texts {
		if got := s.labelled(uint32(i)); got != tc.labelled {
			t.Errorf("%q: labelled %v, want %v", tc.text, got, tc.labelled)
		}
		if off, line, _ := s.doc(uint32(i)); off != int64(i*100) || line != labelled-1 {
			t.Errorf("%q: doc at %d line %d, want %d line %d", tc.text, off, line, i*100, labelled-1)
		}
	}
}

// termSegmentFiles lists the segment files of rel (their paths).
func termSegmentFiles(dir, root, rel string) []string {
	return (*SegmentListing)(nil).files(dir, termPrefix(dir, root, rel))
}

// info returns the current term's entry with its postings.
func (it *dictIter) info() (termInfo, bool) { return it.s.withPostings(it.ti, it.postOff, it.postLen) }

// TestSegmentPulsedTerms: a term of one document keeps its posting in its
// dictionary entry, the others in the postings; both read back the same
// by lookup, by a walk of the dictionary and after a merge of two
// segments, with their bounds (highest frequency, shortest document).
func TestSegmentPulsedTerms(t *testing.T) {
	build := func(start uint32, n int) *segBuilder {
		b := newSegBuilder(uint64(start), int64(start), func(string) bool { return true })
		for i := range n {
			b.docs = append(b.docs, docInfo{off: int64(start) + int64(i), line: int64(start) + int64(i) + 1, len: 3 + i%11})
		}
		for k := range 40 {
			var ps []posting
			for i := 0; i < n; i += 1 + k*k { // df 1 for the large k
				ps = append(ps, posting{ord: uint32(i), tf: uint16(1 + (i+k)%5)})
			}
			if k >= 30 {
				ps = ps[:1]
				ps[0].ord = uint32((k * 7) % n)
			}
			b.terms[fmt.Sprintf("t%02d", k)] = ps
		}
		b.endOff = int64(start) + int64(n)
		b.nextLine = int64(start) + int64(n) + 1
		return b
	}
	type want struct{ ords, tfs []int }
	expect := func(bs ...*segBuilder) map[string]want {
		out := map[string]want{}
		for _, b := range bs {
			for term, ps := range b.terms {
				w := out[term]
				for _, p := range ps {
					w.ords = append(w.ords, int(b.start-bs[0].start)+int(p.ord))
					w.tfs = append(w.tfs, int(p.tf))
				}
				out[term] = w
			}
		}
		return out
	}
	check := func(name string, s *segment, docs []docInfo, exp map[string]want) {
		t.Helper()
		walked := 0
		for it := s.iter(0); it.next(); walked++ {
			ti, ok := it.info()
			if !ok {
				t.Fatalf("%s: %q: postings not read", name, it.term)
			}
			if ti2, ok := s.lookup(string(it.term)); !ok || ti2.df != ti.df || ti2.maxTF != ti.maxTF || ti2.minLen != ti.minLen {
				t.Errorf("%s: lookup %q: df %d maxTF %d minLen %d, a walk says %d %d %d", name, it.term, ti2.df, ti2.maxTF, ti2.minLen, ti.df, ti.maxTF, ti.minLen)
			}
			w := exp[string(it.term)]
			var got want
			maxTF, minLen := 0, 65535
			for c := newCursor(ti); !c.done; c.next() {
				got.ords, got.tfs = append(got.ords, int(c.doc())), append(got.tfs, c.tf())
				maxTF, minLen = max(maxTF, c.tf()), min(minLen, docs[c.doc()].len)
			}
			if !slices.Equal(got.ords, w.ords) || !slices.Equal(got.tfs, w.tfs) {
				t.Errorf("%s: %q: got postings %v %v, want %v %v", name, it.term, got.ords, got.tfs, w.ords, w.tfs)
			}
			if ti.df != len(w.ords) || ti.maxTF != maxTF || ti.minLen != minLen && !(ti.df == 1 && ti.minLen == 0) {
				t.Errorf("%s: %q: got df %d maxTF %d minLen %d, want %d %d %d", name, it.term, ti.df, ti.maxTF, ti.minLen, len(w.ords), maxTF, minLen)
			}
		}
		if walked != len(exp) {
			t.Errorf("%s: walked %d terms, want %d", name, walked, len(exp))
		}
	}
	a, b := build(0, 700), build(700, 300)
	sa, err := parseSegment(a.encode(fileID{dev: 1, ino: 2}))
	if err != nil {
		t.Fatal(err)
	}
	check("built", sa, a.docs, expect(a))

	dir := t.TempDir()
	pa, pb, pm := filepath.Join(dir, "a"), filepath.Join(dir, "b"), filepath.Join(dir, "m")
	for p, bld := range map[string]*segBuilder{pa: a, pb: b} {
		if err := writeSegment(p, bld.encode(fileID{dev: 1, ino: 2})); err != nil {
			t.Fatal(err)
		}
	}
	if err := mergeSegmentFiles(pa, pb, pm, fileID{dev: 1, ino: 2}); err != nil {
		t.Fatal(err)
	}
	for _, lazy := range []bool{false, true} {
		sm, err := openSegmentAs(pm, lazy)
		if err != nil {
			t.Fatal(err)
		}
		check(fmt.Sprintf("merged (lazy %v)", lazy), sm, append(slices.Clone(a.docs), b.docs...), expect(a, b))
		sm.close()
	}
}

// TestSegmentsBoundedByPostings: a log whose messages hold more postings
// than a segment built in one go may is indexed in several (merged
// after), and ranks as the scan does.
func TestSegmentsBoundedByPostings(t *testing.T) {
	dir, idx := t.TempDir(), t.TempDir()
	root := openRoot(t, dir)
	var b strings.Builder
	for i := range 300 {
		fmt.Fprintf(&b, `{"role":"user","content":"message %03d: the deploy of service %d waits for migration %d, word%d word%d"}`+"\n", i, i%9, i%17, i, i*7)
	}
	p := filepath.Join(dir, "s.jsonl")
	if err := os.WriteFile(p, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	waitSettled(t, p)
	if _, err := IndexFile(idx, root, "s.jsonl", Log, IndexOptions{SegPostings: 100}); err != nil {
		t.Fatal(err)
	}
	segs := termSegmentFiles(idx, root.Path(), "s.jsonl")
	var docs uint64
	for _, s := range segs {
		h, err := readSegmentHeader(s)
		if err != nil {
			t.Fatal(err)
		}
		docs += h.end - h.start
	}
	if docs != 300 || len(segs) < 2 {
		t.Fatalf("%d segments hold %d documents, want several holding 300", len(segs), docs)
	}
	o := Options{Roots: []Root{{Root: root, Sources: []Source{{Glob: "*.jsonl", Kind: Log, Label: "messages"}}}}, Limit: 5, Explain: true}
	q, _ := ParseQuery("why does migration 5 of the deploy wait")
	scan, _, err := Search(context.Background(), q, o)
	if err != nil {
		t.Fatal(err)
	}
	o.Index = idx
	fast, st, err := Search(context.Background(), q, o)
	if err != nil || st.Indexed != 1 {
		t.Fatalf("%d files by the index, %v; want 1", st.Indexed, err)
	}
	if i, diff := firstDiff(scan, fast); diff || len(scan) == 0 {
		t.Errorf("the index ranks differently from the scan at %d (%d results)", i, len(scan))
	}
}

// TestSortTerms: sortTerms orders terms as bytes.Compare does, whatever
// their lengths, shared prefixes (keys that tie) and bytes.
func TestSortTerms(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	alphabet := []byte("ab0\x00\xffz")
	for _, n := range []int{0, 1, 2, 63, 64, 65, 1000, 5000} {
		for range 5 {
			terms := make([][]byte, n)
			for i := range terms {
				prefix := []byte(nil)
				if r.IntN(3) == 0 {
					prefix = []byte("sharedprefix")[:r.IntN(13)]
				}
				t := append([]byte(nil), prefix...)
				for range r.IntN(12) {
					t = append(t, alphabet[r.IntN(len(alphabet))])
				}
				terms[i] = t
			}
			order := make([]sortKey, n)
			for i, tm := range terms {
				order[i] = sortKey{termKey(tm), int32(i)}
			}
			sortTerms(order, func(i int32) []byte { return terms[i] })
			want := slices.Clone(terms)
			slices.SortFunc(want, bytes.Compare)
			for i, o := range order {
				if !bytes.Equal(terms[o.i], want[i]) {
					t.Fatalf("%d terms: at %d got %q, want %q", n, i, terms[o.i], want[i])
				}
			}
		}
	}
}

// TestTermKey: a term's key is its first eight bytes, zero-padded,
// whatever follows it in memory and whether it is a string or bytes
// (termKey, bytesKey).
func TestTermKey(t *testing.T) {
	buf := []byte("abcdefghijklmnopqrstuvwxyz")
	for n := 0; n <= 12; n++ {
		for start := 0; start+n <= len(buf); start++ {
			term := buf[start : start+n]
			var pad [8]byte
			copy(pad[:], term)
			want := binary.BigEndian.Uint64(pad[:])
			if got := termKey(term); got != want {
				t.Errorf("termKey(%q) = %#x, want %#x", term, got, want)
			}
			if got := termKey(string(term)); got != want {
				t.Errorf("termKey(string %q) = %#x, want %#x", term, got, want)
			}
			if got := bytesKey(term); got != want {
				t.Errorf("bytesKey(%q) = %#x, want %#x", term, got, want)
			}
			if got := bytesKey(bytes.Clone(term)); got != want {
				t.Errorf("bytesKey(a copy of %q) = %#x, want %#x", term, got, want)
			}
		}
	}
}

// TestTermFilter: a kept segment's filter of terms, once built, lets
// every term it holds through, and its look-ups answer as without it.
func TestTermFilter(t *testing.T) {
	b := newSegBuilder(0, 0, nil)
	a := analysis.New()
	for i := range 3000 {
		b.add(a, []byte(fmt.Sprintf("message %d about the deploy%d and the rollback of service %d", i, i, i%7)), int64(i*60), int64(i+1), time.Time{})
	}
	b.endOff, b.nextLine = 3000*60, 3001
	data := b.encode(fileID{dev: 1, ino: 2})
	plain, err := parseSegment(data)
	if err != nil {
		t.Fatal(err)
	}
	kept, _ := parseSegment(data)
	kept.keptBy = &IndexCache{}
	kept.uses.Store(2)
	var terms []string
	for it := plain.iter(0); it.next(); {
		terms = append(terms, string(it.term))
	}
	if kept.filter() == nil || len(terms) != plain.nterms {
		t.Fatalf("no filter built for %d terms (%d walked)", plain.nterms, len(terms))
	}
	absent := 0
	for i := range 20000 {
		terms = append(terms, fmt.Sprintf("absent%d", i))
	}
	for _, term := range terms {
		want, wok := plain.lookup(term)
		got, ok := kept.lookup(term)
		if ok != wok || got.df != want.df || got.maxTF != want.maxTF || len(got.post) != len(want.post) {
			t.Fatalf("%q: %+v %v, want %+v %v", term, got, ok, want, wok)
		}
		if !kept.filter().mayHold(termHash(term)) {
			absent++
		}
	}
	// Two bits of twelve a term, both in one word: about 1 in 100 of the
	// absent terms get through here (19,802 told), at most 1 in 20 may.
	t.Logf("the filter told %d of 20000 absent terms", absent)
	if absent < 19000 {
		t.Errorf("the filter told %d of 20000 absent terms, want most", absent)
	}
	var fresh segment
	fresh.keptBy = &IndexCache{}
	if fresh.uses.Load() != 0 || fresh.filter() != nil {
		t.Errorf("a segment kept once has a filter")
	}
}

// TestMergeSegmentsHoldsNoTermList: merging two segments of many terms
// allocates in proportion to what the files hold, not a list of every
// merged term (74 MiB live for a 48 MiB log of numbered messages: the
// peak of a daemon bound to 300 MiB).
func TestMergeSegmentsHoldsNoTermList(t *testing.T) {
	const n = 200_000
	build := func(start uint32) *segBuilder {
		b := newSegBuilder(uint64(start), int64(start), func(string) bool { return true })
		for i := range 1000 {
			b.docs = append(b.docs, docInfo{off: int64(start) + int64(i), line: int64(start) + int64(i) + 1, len: 5})
		}
		for k := range n {
			b.terms[fmt.Sprintf("m%d-%07d", start, k)] = []posting{{ord: uint32(k % 1000), tf: 1}}
		}
		b.endOff = int64(start) + 1000
		b.nextLine = int64(start) + 1001
		return b
	}
	dir := t.TempDir()
	pa, pb, pm := filepath.Join(dir, "a"), filepath.Join(dir, "b"), filepath.Join(dir, "m")
	for p, bld := range map[string]*segBuilder{pa: build(0), pb: build(1000)} {
		if err := writeSegment(p, bld.encode(fileID{dev: 1, ino: 2})); err != nil {
			t.Fatal(err)
		}
	}
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	if err := mergeSegmentFiles(pa, pb, pm, fileID{dev: 1, ino: 2}); err != nil {
		t.Fatal(err)
	}
	runtime.ReadMemStats(&after)
	var files int64
	for _, p := range []string{pa, pb, pm} {
		fi, err := os.Stat(p)
		if err != nil {
			t.Fatal(err)
		}
		files += fi.Size()
	}
	// The merged dictionary's bytes, grown by append, are most of it
	// (about 19 MiB here); the list of merged terms made it 77 MiB.
	if got := int64(after.TotalAlloc - before.TotalAlloc); got > 6*files {
		t.Errorf("merging %d terms allocated %d KiB, more than six times the three files' %d KiB", 2*n, got>>10, files>>10)
	}
	sm, err := openSegmentAs(pm, false)
	if err != nil {
		t.Fatal(err)
	}
	defer sm.close()
	if sm.nterms != 2*n {
		t.Errorf("merged %d terms, want %d", sm.nterms, 2*n)
	}
	for _, term := range []string{"m0-0000000", "m0-0199999", "m1000-0000000", "m1000-0123456"} {
		if _, ok := sm.lookup(term); !ok {
			t.Errorf("the merged segment does not hold %q", term)
		}
	}
}
