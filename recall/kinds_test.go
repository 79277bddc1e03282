package recall

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestSearchByKind: what memwatch serves holds a credential as its kind's
// mask, so the kind's name finds the lines holding one (in notes and in
// logs), written as the id or as the mask; the value never shows. A word
// that is a one-word id ("jwt") is still the word.
func TestSearchByKind(t *testing.T) {
	dir := t.TempDir()
	s := filepath.Join(dir, "sess-1")
	os.MkdirAll(filepath.Join(s, "working-memory", "detail"), 0o755)
	os.WriteFile(filepath.Join(s, "working-memory", "detail", "deploy.md"), []byte("# Deploy\n\nAWS_ACCESS_KEY_ID=AKIAQYLPMN5HFIQR7XQZ\nthe akia prefix is AWS's\nJWT for sessions\n"), 0o644)
	os.WriteFile(filepath.Join(s, "messages.jsonl"), []byte(strings.Join([]string{
		`{"role":"user","content":"cat .env"}`,
		`{"role":"user","content":[{"type":"tool_result","content":"GITHUB_TOKEN=ghp_R3vQy8NcLkZt0WmPb2XsJd7HfAe5Ug9KiOqY"}]}`,
		`{"role":"assistant","content":"a ghp_ token is GitHub's"}`,
		`{"role":"assistant","content":"the [REDACTED:github-pat] above must be rotated"}`,
	}, "\n")+"\n"), 0o644)
	opts := Options{Roots: []Root{{Root: openRoot(t, s), Sources: sessionSources}}, Limit: 10}
	for _, tc := range []struct {
		query string
		want  []string // citations, newest first not asserted
		not   string
	}{
		{"aws-access-token", []string{"detail/deploy.md#L3"}, "AKIAQYLPMN5HFIQR7XQZ"},
		{"[REDACTED:github-pat]", []string{"messages.jsonl#L2", "messages.jsonl#L4"}, "ghp_R3vQ"},
		{"redacted:GITHUB-PAT", []string{"messages.jsonl#L2", "messages.jsonl#L4"}, "ghp_R3vQ"},
		{"jwt", []string{"detail/deploy.md#L5"}, ""},
	} {
		q, err := ParseQuery(tc.query)
		if err != nil {
			t.Fatal(err)
		}
		rs, _, err := Search(context.Background(), q, opts)
		if err != nil {
			t.Fatalf("%s: %v", tc.query, err)
		}
		var got []string
		for _, r := range rs {
			got = append(got, r.Citation)
			if tc.not != "" && strings.Contains(r.Text, tc.not) {
				t.Errorf("%s: %s shows the value: %q", tc.query, r.Citation, r.Text)
			}
		}
		slices.Sort(got)
		if !slices.Equal(got, tc.want) {
			t.Errorf("recall %s: got %v, want %v", tc.query, got, tc.want)
		}
	}
}
