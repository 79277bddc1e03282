package spool

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestMaskLeavesNoTextAnywhere: masking a log's lines (the scrub of
// credentials) replaces their text in every generation, inline or packed,
// and takes the old text out of the blocks; the other lines read back as
// they were, and the log masked the same way on disk is read as the same
// lines (no new generation's worth of lines captured again).
func TestMaskLeavesNoTextAnywhere(t *testing.T) {
	ctx := context.Background()
	s := newSpool(t)
	dir := t.TempDir()
	root := openRoot(t, dir)
	ls := toolSession(200, "mask")
	ls[20] = `{"role":"user","content":"key VALUE-okapi-1 here"}`
	ls[150] = `{"role":"user","content":"and VALUE-okapi-2 there"}`
	os.WriteFile(filepath.Join(dir, "s.jsonl"), []byte(lines(ls...)), 0o644)
	if _, err := s.Capture(ctx, root, "s.jsonl", opts); err != nil {
		t.Fatal(err)
	}
	// One more line, appended, inline.
	f, _ := os.OpenFile(filepath.Join(dir, "s.jsonl"), os.O_APPEND|os.O_WRONLY, 0)
	f.WriteString(`{"role":"user","content":"late VALUE-okapi-3"}` + "\n")
	f.Close()
	s.Capture(ctx, root, "s.jsonl", opts)
	st, _, _ := s.Find(ctx, root.ID(), "s.jsonl")
	mask := func(l []byte) ([]byte, bool) {
		if !bytes.Contains(l, []byte("VALUE-okapi")) {
			return l, false
		}
		return bytes.ReplaceAll(l, []byte("VALUE-okapi"), []byte("[REDACTED:okapi]")), true
	}
	n, err := s.Mask(ctx, st.ID, mask)
	if err != nil || n != 3 {
		t.Fatalf("Mask: %d lines, %v; want 3", n, err)
	}
	blocks := blockText(t, s)
	var inline []byte
	s.db.QueryRow(`SELECT group_concat(data, '') FROM lines`).Scan(&inline)
	if bytes.Contains(blocks, []byte("VALUE-okapi")) || bytes.Contains(inline, []byte("VALUE-okapi")) {
		t.Errorf("after Mask the spool still holds a value: blocks %v, inline %v", bytes.Contains(blocks, []byte("VALUE-okapi")), bytes.Contains(inline, []byte("VALUE-okapi")))
	}
	got := captured(t, s, root, "s.jsonl")
	if len(got) != 201 || got[0] != ls[0] || got[199] != ls[199] || !strings.Contains(got[20], "[REDACTED:okapi]-1") || !strings.Contains(got[200], "[REDACTED:okapi]-3") {
		t.Fatalf("after Mask: %d lines, L21 %q, L201 %q", len(got), got[20], got[200])
	}
	// The file masked the same way: its lines are the spool's.
	b, _ := os.ReadFile(filepath.Join(dir, "s.jsonl"))
	os.WriteFile(filepath.Join(dir, "s.jsonl"), bytes.ReplaceAll(b, []byte("VALUE-okapi"), []byte("[REDACTED:okapi]")), 0o644)
	s.Capture(ctx, root, "s.jsonl", opts)
	after, _, _ := s.Find(ctx, root.ID(), "s.jsonl")
	if after.Seq != st.Seq {
		t.Errorf("the masked file was captured as %d new lines, want none: its lines are the masked ones", after.Seq-st.Seq)
	}
}
