package spool

import (
	"bytes"
	"context"
	"database/sql"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// session is a transcript whose lines repeat each other as tool results
// do: the same file read twice, a command's output again.
func toolSession(n int, salt string) []string {
	var out []string
	for i := range n {
		body := strings.Repeat(fmt.Sprintf("func handler%d() { return db.Query(%s) }\\n", i%7, salt), 20+i%13)
		out = append(out, fmt.Sprintf(`{"role":"user","content":"%s %d %s"}`, salt, i, body))
	}
	return out
}

// spoolSize is what the spool's database takes on disk.
func spoolSize(t *testing.T, s *Spool) int64 {
	t.Helper()
	if _, err := s.db.Exec(`PRAGMA wal_checkpoint(TRUNCATE)`); err != nil {
		t.Fatal(err)
	}
	var pages, size int64
	s.db.QueryRow(`PRAGMA page_count`).Scan(&pages)
	s.db.QueryRow(`PRAGMA page_size`).Scan(&size)
	var free int64
	s.db.QueryRow(`PRAGMA freelist_count`).Scan(&free)
	return (pages - free) * size
}

// TestPackedLinesReadBack: a log captured whole is kept in blocks, a log
// appended a line at a time is packed by Pack once it has enough; every
// line reads back byte for byte, through every reader (Read, Show, Held,
// CapturedSince), and the spool takes a fraction of the logs' bytes.
func TestPackedLinesReadBack(t *testing.T) {
	ctx := context.Background()
	s := newSpool(t)
	dir := t.TempDir()
	root := openRoot(t, dir)
	whole := toolSession(400, "whole")
	os.WriteFile(filepath.Join(dir, "a.jsonl"), []byte(lines(whole...)), 0o644)
	if _, err := s.Capture(ctx, root, "a.jsonl", opts); err != nil {
		t.Fatal(err)
	}
	// Appended a line at a time, captured after each.
	drip := toolSession(300, "drip")
	f, _ := os.Create(filepath.Join(dir, "b.jsonl"))
	for _, l := range drip {
		f.WriteString(l + "\n")
		if _, err := s.Capture(ctx, root, "b.jsonl", opts); err != nil {
			t.Fatal(err)
		}
	}
	f.Close()
	var inline int64
	s.db.QueryRow(`SELECT COALESCE(SUM(length(data)),0) FROM lines WHERE pack=0`).Scan(&inline)
	if inline < packMin {
		t.Fatalf("%d bytes inline after appends of a line each, want them waiting for Pack", inline)
	}
	st, err := s.Pack(ctx, 1<<30)
	if err != nil || st.Blocks == 0 {
		t.Fatalf("pack = %+v, %v", st, err)
	}
	s.db.QueryRow(`SELECT COALESCE(SUM(length(data)),0) FROM lines WHERE pack=0`).Scan(&inline)
	if inline >= packMin {
		t.Errorf("%d bytes still inline after Pack", inline)
	}
	for rel, want := range map[string][]string{"a.jsonl": whole, "b.jsonl": drip} {
		if got := captured(t, s, root, rel); strings.Join(got, "\n") != strings.Join(want, "\n") {
			t.Errorf("%s: the spool reads back %d lines, not the %d captured", rel, len(got), len(want))
		}
		c, _ := ParseCitation(rel + "#L100-120")
		os.Remove(filepath.Join(dir, rel)) // from the spool, not the file
		s.Capture(ctx, root, rel, opts)
		shown, err := s.Show(ctx, root, c)
		if err != nil || len(shown) != 21 {
			t.Fatalf("show %s#L100-120: %d lines, %v", rel, len(shown), err)
		}
		for i, l := range shown {
			if string(l.Data) != want[99+i] {
				t.Errorf("show %s L%d (%s) = %.40q, want %.40q", rel, 100+i, l.Source, l.Data, want[99+i])
			}
		}
	}
	held := map[string]int{}
	s.Held(ctx, root.ID(), func(h HeldLine) error {
		want := whole
		if h.Path == "b.jsonl" {
			want = drip
		}
		if !bytes.Equal(h.Data, []byte(want[h.Line-1])) {
			t.Errorf("held %s#L%d differs", h.Path, h.Line)
		}
		// memwatch secrets dates a held line by its capture.
		if time.Since(h.Time) > time.Hour || time.Until(h.Time) > time.Minute {
			t.Errorf("held %s#L%d captured at %v", h.Path, h.Line, h.Time)
		}
		held[h.Path]++
		return nil
	})
	if held["a.jsonl"] != len(whole) || held["b.jsonl"] != len(drip) {
		t.Errorf("held lines %v, want every line of both deleted logs", held)
	}
	logBytes := int64(len(lines(whole...)) + len(lines(drip...)))
	var blockBytes, inlineBytes int64
	s.db.QueryRow(`SELECT COALESCE(SUM(length(data)),0) FROM packs`).Scan(&blockBytes)
	s.db.QueryRow(`SELECT COALESCE(SUM(length(data)),0) FROM lines`).Scan(&inlineBytes)
	// The text's share; the file adds a page or two per table.
	if text := blockBytes + inlineBytes; text*2 > logBytes {
		t.Errorf("the spool keeps %d bytes of text for %d of logs, want under half", text, logBytes)
	}
	t.Logf("spool %d bytes (text: blocks %d, inline %d) for %d of logs", spoolSize(t, s), blockBytes, inlineBytes, logBytes)
}

// TestPruneLeavesNoTextInBlocks: text pruned from a block is gone from the
// block, not only from its rows; a block with nothing left goes.
func TestPruneLeavesNoTextInBlocks(t *testing.T) {
	ctx := context.Background()
	s := newSpool(t)
	dir := t.TempDir()
	root := openRoot(t, dir)
	ls := toolSession(200, "prune")
	ls[150] = `{"role":"user","content":"the marker zebracorn is here"}`
	ls[10] = `{"role":"user","content":"an early marker quagga"}`
	os.WriteFile(filepath.Join(dir, "s.jsonl"), []byte(lines(ls...)), 0o644)
	s.Capture(ctx, root, "s.jsonl", opts)
	st, _, _ := s.Find(ctx, root.ID(), "s.jsonl")
	// A consumer read the first 100 lines: only they may be pruned.
	s.Commit(ctx, "c", st.ID, 100)
	if _, err := s.Prune(ctx, time.Now().Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	if b := string(blockText(t, s)); strings.Contains(b, "quagga") || !strings.Contains(b, "zebracorn") {
		t.Errorf("after pruning lines 1-100 the blocks hold quagga %v, zebracorn %v; want the pruned text gone, the rest kept",
			strings.Contains(b, "quagga"), strings.Contains(b, "zebracorn"))
	}
	got := captured(t, s, root, "s.jsonl")
	if len(got) != 200 || got[150] != ls[150] || got[10] != "" {
		t.Errorf("after the prune: %d lines, L151 %.30q, L11 %.30q", len(got), got[150], got[10])
	}
	s.Commit(ctx, "c", st.ID, 200)
	s.Prune(ctx, time.Now().Add(time.Hour))
	var n int
	s.db.QueryRow(`SELECT COUNT(*) FROM packs`).Scan(&n)
	if n != 0 {
		t.Errorf("%d blocks left with every line pruned", n)
	}
}

// blockText is the text of every block of the spool, decompressed.
func blockText(t *testing.T, s *Spool) []byte {
	t.Helper()
	var all []byte
	rows, err := s.db.Query(`SELECT first, last, data FROM packs`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	for rows.Next() {
		var first, last int64
		var z []byte
		rows.Scan(&first, &last, &z)
		ls, err := unpackBlock(z, first, last)
		if err != nil {
			t.Fatal(err)
		}
		all = append(all, bytes.Join(ls, nil)...)
	}
	return all
}

// TestSpoolBeforePacksConverts: a state directory written before packs
// (every line inline, no pack column) opens, converts with Pack, and
// keeps every line byte for byte; a kill between blocks loses nothing.
func TestSpoolBeforePacksConverts(t *testing.T) {
	if packMinSQL != fmt.Sprint(packMin) {
		t.Fatalf("packMinSQL %s is not packMin %d", packMinSQL, packMin)
	}
	ctx := context.Background()
	stateDir := t.TempDir()
	s, err := Open(ctx, stateDir)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	root := openRoot(t, dir)
	want := map[string][]string{}
	for i := range 5 {
		rel := fmt.Sprintf("s%d.jsonl", i)
		want[rel] = toolSession(150+i*20, rel)
		os.WriteFile(filepath.Join(dir, rel), []byte(lines(want[rel]...)), 0o644)
		if _, err := s.Capture(ctx, root, rel, opts); err != nil {
			t.Fatal(err)
		}
	}
	s.Close()
	// The previous format: the text inline, no packs.
	db, err := sql.Open("sqlite", "file:"+filepath.Join(stateDir, FileName))
	if err != nil {
		t.Fatal(err)
	}
	// Unpack every block into its rows, as the old release stored them.
	rows, _ := db.Query(`SELECT log, first, last, data FROM packs`)
	type row struct {
		log, seq int64
		data     []byte
	}
	var back []row
	for rows.Next() {
		var log, first, last int64
		var z []byte
		rows.Scan(&log, &first, &last, &z)
		ls, err := unpackBlock(z, first, last)
		if err != nil {
			t.Fatal(err)
		}
		for i, l := range ls {
			back = append(back, row{log, first + int64(i), l})
		}
	}
	rows.Close()
	for _, r := range back {
		if _, err := db.Exec(`UPDATE lines SET data=?, pack=0 WHERE log=? AND seq=?`, r.data, r.log, r.seq); err != nil {
			t.Fatal(err)
		}
	}
	for _, q := range []string{`DROP INDEX logs_inline`, `DROP TABLE packs`, `ALTER TABLE lines DROP COLUMN pack`, `ALTER TABLE logs DROP COLUMN inline`} {
		if _, err := db.Exec(q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	db.Close()

	s, err = Open(ctx, stateDir)
	if err != nil {
		t.Fatalf("open a spool of the previous format: %v", err)
	}
	defer s.Close()
	// Every line reads back before the conversion, and after it, however
	// little each call converts.
	check := func(when string) {
		for rel, ls := range want {
			if got := captured(t, s, root, rel); strings.Join(got, "\n") != strings.Join(ls, "\n") {
				t.Errorf("%s: %s reads back %d lines, want the %d captured", when, rel, len(got), len(ls))
			}
		}
	}
	check("before Pack")
	for range 100 {
		st, err := s.Pack(ctx, packTarget)
		if err != nil {
			t.Fatal(err)
		}
		if !st.More {
			break
		}
	}
	var inline int64
	s.db.QueryRow(`SELECT COALESCE(SUM(length(data)),0) FROM lines WHERE pack=0`).Scan(&inline)
	if inline >= packMin {
		t.Errorf("%d bytes inline after the conversion", inline)
	}
	check("after Pack")
}
