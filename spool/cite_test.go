package spool

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// Line numbers a client sends are bounded before they drive work: each of
// these answers at once with an error or the lines that exist.
func TestShowHugeLineNumbers(t *testing.T) {
	ctx := context.Background()
	s := newSpool(t)
	dir := t.TempDir()
	root := openRoot(t, dir)
	os.WriteFile(filepath.Join(dir, "s.jsonl"), []byte(lines(msgs(1, 5)...)), 0o644)
	os.WriteFile(filepath.Join(dir, "NOTE.md"), []byte("one\ntwo\nthree"), 0o644)
	if _, err := s.Capture(ctx, root, "s.jsonl", opts); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		cite  string
		lines int // lines shown; -1: an error
	}{
		{"s.jsonl#L2-3", 2},
		{"s.jsonl#L4-9", 2},
		{"s.jsonl#L5", 1},
		{"s.jsonl#L6", -1},
		{"s.jsonl#L9223372036854775807", -1},
		{"s.jsonl#L9223372036854775802", -1},
		{"s.jsonl#L100000000000000000000", -1},
		{"s.jsonl#L9223372036854775802-9223372036854775807", -1},
		{"s.jsonl#L1-9223372036854775807", -1},
		{"s.jsonl#L1-100000000000000000000", -1},
		{"s.jsonl@9223372036854775807#L1", -1},
		{"s.jsonl@2#L1", -1},
		{"s.jsonl#L1099511627776", -1},
		{"s.jsonl#L1099511627000-1099511627776", -1},
		{"NOTE.md#L3", 1},
		{"NOTE.md#L2-9", 2},
		{"NOTE.md#L4", -1},
		{"NOTE.md#L1099511627000-1099511627776", -1},
	} {
		start := time.Now()
		var got []Shown
		c, err := ParseCitation(tc.cite)
		if err == nil {
			got, err = s.Show(ctx, root, c)
			if errors.Is(err, ErrUnknownLog) {
				var ok bool
				got, ok, err = ShowFile(ctx, root, c)
				if !ok {
					t.Errorf("%s: no such file", tc.cite)
				}
			}
		}
		if took := time.Since(start); took > time.Second {
			t.Errorf("%s took %v", tc.cite, took)
		}
		switch {
		case tc.lines < 0 && err == nil:
			t.Errorf("%s: %d lines, want an error", tc.cite, len(got))
		case tc.lines >= 0 && err != nil:
			t.Errorf("%s: %v", tc.cite, err)
		case tc.lines >= 0 && len(got) != tc.lines:
			t.Errorf("%s: got %d lines, want %d", tc.cite, len(got), tc.lines)
		}
		for _, l := range got {
			if l.Source != "live" && l.Source != "spool" {
				t.Errorf("%s: line %d from %q", tc.cite, l.Line, l.Source)
			}
		}
	}
}

// A range's text is bounded: a show of many long lines holds at most
// MaxShowBytes of them.
func TestShowBoundsItsText(t *testing.T) {
	ctx := context.Background()
	s := newSpool(t)
	dir := t.TempDir()
	root := openRoot(t, dir)
	long := `{"role":"user","content":"` + strings.Repeat("x", 1<<20) + `"}`
	var ls []string
	for range 40 {
		ls = append(ls, long)
	}
	p := filepath.Join(dir, "s.jsonl")
	os.WriteFile(p, []byte(lines(ls...)), 0o644)
	if _, err := s.Capture(ctx, root, "s.jsonl", Options{MaxLine: 2 << 20, IsMessage: opts.IsMessage}); err != nil {
		t.Fatal(err)
	}
	// The agent clears its log: the lines come from the spool.
	os.WriteFile(p, nil, 0o644)
	s.Capture(ctx, root, "s.jsonl", opts)
	c, _ := ParseCitation("s.jsonl#L1-40")
	got, err := s.Show(ctx, root, c)
	if err != nil {
		t.Fatal(err)
	}
	var text, omitted int
	for _, l := range got {
		text += len(l.Data)
		if l.Source == "omitted" {
			omitted++
		}
	}
	if text > MaxShowBytes || omitted == 0 || len(got) != 40 {
		t.Errorf("%d lines, %d bytes of text, %d omitted; want 40, at most %d bytes, some omitted", len(got), text, omitted, MaxShowBytes)
	}
}

func TestParseCitationBounds(t *testing.T) {
	for _, tc := range []struct {
		in       string
		ok       bool
		from, to int64
	}{
		{"a#L1", true, 1, 1},
		{"a#L3-L5", true, 3, 5},
		{fmt.Sprintf("a#L%d", int64(MaxCitedLine)), true, MaxCitedLine, MaxCitedLine},
		{fmt.Sprintf("a#L%d", int64(MaxCitedLine)+1), false, 0, 0},
		{"a#L9223372036854775807", false, 0, 0},
		{"a#L9223372036854775808", false, 0, 0},
		{"a#L1-100001", false, 0, 0},
		{"a#L1-100000", true, 1, 100000},
		{"a#L5-4", false, 0, 0},
		{"a#L0", false, 0, 0},
		{"a@0#L1", false, 0, 0},
		{"a@99999999999999999999#L1", false, 0, 0},
	} {
		c, err := ParseCitation(tc.in)
		if (err == nil) != tc.ok || tc.ok && (c.From != tc.from || c.To != tc.to) {
			t.Errorf("ParseCitation(%q) = %+v, %v", tc.in, c, err)
		}
		if err != nil && len(err.Error()) > 600 {
			t.Errorf("ParseCitation(%q): an error of %d bytes", tc.in, len(err.Error()))
		}
	}
	w := Citation{Path: "a", Gen: 1, From: MaxCitedLine - 3, To: MaxCitedLine}.Widen(5)
	if w.To != MaxCitedLine || w.From != MaxCitedLine-8 {
		t.Errorf("Widen at the bound = %+v", w)
	}
	w = Citation{Path: "a", Gen: 1, From: 1, To: MaxCitedLines}.Widen(5)
	if w.To-w.From >= MaxCitedLines {
		t.Errorf("Widen of a whole range = %+v, over %d lines", w, MaxCitedLines)
	}
}

// FuzzShow asks the spool for the lines of arbitrary citations of a small
// log and note: it never panics, answers in bounded time, and returns only
// lines that exist, each once, in order.
func FuzzShow(f *testing.F) {
	for _, s := range []string{"s.jsonl#L1-4", "s.jsonl#L9223372036854775807", "s.jsonl#L9223372036854775802-9223372036854775807",
		"s.jsonl@2#L1", "NOTE.md#L2-99", "NOTE.md#L100000000000000000000", "s.jsonl#L1-L1099511627776"} {
		f.Add(s)
	}
	ctx := context.Background()
	sp, err := Open(ctx, f.TempDir())
	if err != nil {
		f.Fatal(err)
	}
	defer sp.Close()
	dir := f.TempDir()
	root := openRoot(f, dir)
	os.WriteFile(filepath.Join(dir, "s.jsonl"), []byte(lines(msgs(1, 7)...)), 0o644)
	os.WriteFile(filepath.Join(dir, "NOTE.md"), []byte("a\nb\nc\n"), 0o644)
	if _, err := sp.Capture(ctx, root, "s.jsonl", opts); err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, cite string) {
		c, err := ParseCitation(cite)
		if err != nil {
			return
		}
		if c.From < 1 || c.To < c.From || c.To > MaxCitedLine || c.To-c.From >= MaxCitedLines || c.Gen < 1 || c.Gen > MaxCitedLine {
			t.Fatalf("ParseCitation(%q) = %+v: out of bounds", cite, c)
		}
		start := time.Now()
		got, err := sp.Show(ctx, root, c)
		if errors.Is(err, ErrUnknownLog) {
			got, _, _ = ShowFile(ctx, root, c)
		}
		if time.Since(start) > 2*time.Second {
			t.Errorf("%q took %v", cite, time.Since(start))
		}
		if len(got) > 7 {
			t.Errorf("%q: %d lines of a 7-line file", cite, len(got))
		}
		for i, l := range got {
			if l.Line < c.From || l.Line > c.To || i > 0 && l.Line != got[i-1].Line+1 {
				t.Errorf("%q: line %d out of place", cite, l.Line)
			}
		}
	})
}

// FuzzParseCitation: a citation that parses is within the bounds, and
// widening it stays within them.
func FuzzParseCitation(f *testing.F) {
	for _, s := range []string{"s.jsonl#L1-4", "a/b.jsonl@3#L10", "x#L0", "#L1", "s@#L1-2", "s@2#L5-L7",
		"s#L9223372036854775807", "s#L9223372036854775802-9223372036854775807", "s#L100000000000000000000", "s@18446744073709551616#L1"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		c, err := ParseCitation(s)
		if err != nil {
			if len(err.Error()) > 1000 {
				t.Errorf("ParseCitation(%q): an error of %d bytes", s, len(err.Error()))
			}
			return
		}
		if c.From < 1 || c.To < c.From || c.Gen < 1 || c.Path == "" || c.To > MaxCitedLine || c.Gen > MaxCitedLine || c.To-c.From >= MaxCitedLines {
			t.Errorf("ParseCitation(%q) = %+v", s, c)
		}
		w := c.Widen(5)
		if w.From < 1 || w.To < w.From || w.To > MaxCitedLine || w.To-w.From >= MaxCitedLines || w.From > c.From || w.To < c.To {
			t.Errorf("%+v.Widen(5) = %+v", c, w)
		}
	})
}
