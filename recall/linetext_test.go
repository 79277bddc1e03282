package recall

import (
	"bytes"
	"testing"
)

// FuzzLineText: a line decoded once for both indexes reads as each
// reads it on its own (searchText, docTextTime), whatever its bytes.
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
		if got, want := lt.search, searchText(k, raw); !bytes.Equal(got, want) {
			t.Fatalf("search text %q, want %q", got, want)
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
