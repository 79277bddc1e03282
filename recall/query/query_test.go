package query

import (
	"bytes"
	"testing"
)

// FuzzParseQuery: any query parses into non-empty terms that a line
// made of them matches.
func FuzzParseQuery(f *testing.F) {
	for _, s := range []string{"jwt", `"refresh token"`, "ü", `"`, `""`, "a b c", "\xff"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		q, err := ParseQuery(s)
		if err != nil {
			return
		}
		for _, term := range q.Terms {
			if len(term) == 0 {
				t.Errorf("ParseQuery(%q) has an empty term", s)
			}
		}
		// A line made of the query's own terms always matches it.
		text := bytes.Join(q.Terms, []byte(" "))
		if _, ok := q.Matches(text); !ok {
			t.Errorf("%q does not match its own text", s)
		}
	})
}
