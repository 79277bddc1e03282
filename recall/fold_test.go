package recall

import (
	"context"
	"os"
	"path/filepath"
	"testing"
)

// TestFoldCopies: a history entry written to HISTORY.md and to the
// month's mirror, and a message, are found once each whatever the query,
// the entry cited in the file the agent reads, the mirror's line folded
// into it; a line repeated in its own file is two results.
func TestFoldCopies(t *testing.T) {
	dir := t.TempDir()
	entry := "[2026-11-26 10:00] decided: the zanzibar deploy waits for the quokka migration\n"
	os.WriteFile(filepath.Join(dir, "HISTORY-2026-11.md"), []byte("# 2026-11\n\n"+entry), 0o644)
	os.WriteFile(filepath.Join(dir, "HISTORY.md"), []byte("# History\n\n"+entry+"\nzanzibar again\nzanzibar again\n"), 0o644)
	os.MkdirAll(filepath.Join(dir, "sessions"), 0o755)
	os.WriteFile(filepath.Join(dir, "sessions", "s1.jsonl"), []byte(`{"role":"user","content":"the zanzibar deploy waits for the quokka migration, ok?"}`+"\n"), 0o644)
	root := openRoot(t, dir)
	srcs := []Source{{Glob: "HISTORY*.md", Kind: Text, Label: "history"}, {Glob: "sessions/*.jsonl", Kind: Log, Label: "messages"}}
	for _, qs := range []string{"zanzibar", "zanzibar quokka migration"} {
		q, _ := ParseQuery(qs)
		res, _, err := Search(context.Background(), q, Options{Roots: []Root{{Root: root, Sources: srcs}}, Limit: 10, Explain: true})
		if err != nil {
			t.Fatal(err)
		}
		var cites []string
		folded := map[string][]string{}
		for _, r := range res {
			cites = append(cites, r.Citation)
			folded[r.Citation] = r.Folded
		}
		if f := folded["HISTORY.md#L3"]; len(f) != 1 || f[0] != "HISTORY-2026-11.md#L3" {
			t.Errorf("%q: got %q (HISTORY.md#L3 folded %q), want HISTORY.md#L3 with the mirror's line folded into it", qs, cites, f)
		}
		if _, ok := folded["HISTORY-2026-11.md#L3"]; ok {
			t.Errorf("%q: got %q, want the mirror's line folded", qs, cites)
		}
		if _, ok := folded["sessions/s1.jsonl#L1"]; !ok {
			t.Errorf("%q: got %q, want the message", qs, cites)
		}
		if qs == "zanzibar" {
			_, a := folded["HISTORY.md#L5"]
			_, b := folded["HISTORY.md#L6"]
			if !a || !b {
				t.Errorf("%q: got %q, want both of a line said twice in one file", qs, cites)
			}
		}
	}
}

// TestFoldKeepsTwoSayings: the same words in two conversations of a root
// are two messages, both found.
func TestFoldKeepsTwoSayings(t *testing.T) {
	dir := t.TempDir()
	for _, n := range []string{"s1.jsonl", "s2.jsonl"} {
		os.WriteFile(filepath.Join(dir, n), []byte(`{"role":"user","content":"where do we deploy the billing service?"}`+"\n"), 0o644)
	}
	root := openRoot(t, dir)
	q, _ := ParseQuery("billing")
	res, _, err := Search(context.Background(), q, Options{Roots: []Root{{Root: root, Sources: []Source{{Glob: "*.jsonl", Kind: Log, Label: "messages"}}}}, Limit: 10})
	if err != nil || len(res) != 2 {
		t.Errorf("got %+v (%v), want both messages", res, err)
	}
}
