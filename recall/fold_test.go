package recall

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestFoldCopies: a history entry written to HISTORY.md and to the
// month's mirror, and a message, are found once each whatever the query,
// the entry cited in the file the agent reads, the mirror's line folded
// into it; a line repeated in its own file is one result with its copy.
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
			f, a := folded["HISTORY.md#L5"]
			_, b := folded["HISTORY.md#L6"]
			if !a || b || len(f) != 1 || f[0] != "HISTORY.md#L6" {
				t.Errorf("%q: got %q (HISTORY.md#L5 folded %q), want a line said twice in one file once, with its copy", qs, cites, f)
			}
		}
	}
}

// TestFoldSaidTwice: the same words in two conversations of a root (the
// same tool call made again) are one result citing the other, whichever
// search finds them, its line counted right even when found from the end.
func TestFoldSaidTwice(t *testing.T) {
	dir := t.TempDir()
	for _, n := range []string{"s1.jsonl", "s2.jsonl"} {
		os.WriteFile(filepath.Join(dir, n), []byte(`{"role":"user","content":"hello"}`+"\n"+`{"role":"user","content":"where do we deploy the billing service?"}`+"\n"), 0o644)
	}
	root := openRoot(t, dir)
	for _, qs := range []string{"billing", "where do we deploy billing?"} {
		q, _ := ParseQuery(qs)
		res, _, err := Search(context.Background(), q, Options{Roots: []Root{{Root: root, Sources: []Source{{Glob: "*.jsonl", Kind: Log, Label: "messages"}}}}, Limit: 10})
		var hits []Result
		for _, r := range res {
			if strings.Contains(r.Text, "billing") {
				hits = append(hits, r)
			}
		}
		if err != nil || len(hits) != 1 || hits[0].Copies != 1 || len(hits[0].Folded) != 1 {
			t.Fatalf("%q: got %+v (%v), want one result with one copy", qs, res, err)
		}
		res = hits
		if got := []string{res[0].Citation, res[0].Folded[0]}; got[0][len(got[0])-3:] != "#L2" || got[1][len(got[1])-3:] != "#L2" || got[0] == got[1] {
			t.Errorf("%q: cited %q, want each file's line 2", qs, got)
		}
	}
}
