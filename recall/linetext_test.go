package recall

import (
	"bytes"
	"testing"
)

// FuzzLineText: a line decoded once reads, as the ranked search's
// document, as docTextTime reads it on its own, and its search text is
// the role (or raw, meta) then the document's text, whatever its bytes.
func FuzzLineText(f *testing.F) {
	for _, s := range []string{
		`{"type":"user","message":{"role":"user","content":"hello"},"timestamp":"2026-11-20T10:00:00Z"}`,
		`{"type":"summary","summary":"x"}`,
		"not json at all\r",
		"   ",
		`{"role":"assistant","content":[{"type":"text","text":"a"},{"type":"tool_use","name":"Read","input":{"file_path":"/x"}}]}`,
		"",
	} {
		f.Add([]byte(s), false)
		f.Add([]byte(s), true)
	}
	f.Fuzz(func(t *testing.T, raw []byte, text bool) {
		k := Log
		if text {
			k = Text
		}
		lt := decodeLineText(k, raw)
		if k == Log && !bytes.Contains(lt.search, []byte(": ")) {
			t.Fatalf("search text %q has no role", lt.search)
		}
		doc, when, ok := docTextTime(k, raw)
		if (lt.doc >= 0) != ok {
			t.Fatalf("a document: %v, want %v", lt.doc >= 0, ok)
		}
		if ok && (!bytes.Equal(lt.search[lt.doc:], doc) || !lt.when.Equal(when)) {
			t.Fatalf("document %q at %v, want %q at %v", lt.search[lt.doc:], lt.when, doc, when)
		}
	})
}
