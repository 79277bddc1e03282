package recall

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestRankedByDateAndSpeaker: a question naming a month finds the message
// said that month though its words do not say when; a question naming a
// speaker ranks what they said over what others said of them.
func TestRankedByDateAndSpeaker(t *testing.T) {
	dir := t.TempDir()
	os.MkdirAll(filepath.Join(dir, "sessions"), 0o755)
	lines := []string{
		`{"role":"user","content":"Ana: I went hiking in the hills yesterday.","timestamp":"2022-03-10T10:00:00Z"}`,
		`{"role":"assistant","content":"Ben: Ana told me about hiking, she loves it.","timestamp":"2022-07-10T10:00:00Z"}`,
		`{"role":"user","content":"Ana: Went hiking again, the lake this time.","timestamp":"2022-07-11T10:00:00Z"}`,
		`{"role":"assistant","content":"Ben: hiking with Ana sounds fun, hiking is great.","timestamp":"2022-09-11T10:00:00Z"}`,
	}
	for i, l := range lines {
		os.WriteFile(filepath.Join(dir, "sessions", "s"+string(rune('1'+i))+".jsonl"), []byte(l+"\n"+`{"role":"user","content":"filler words about nothing","timestamp":"2022-01-01T10:00:00Z"}`+"\n"), 0o644)
	}
	root := openRoot(t, dir)
	srcs := []Source{{Glob: "sessions/*.jsonl", Kind: Log, Label: "messages"}}
	first := func(qs string) string {
		t.Helper()
		q, _ := ParseQuery(qs)
		res, _, err := Search(context.Background(), q, Options{Roots: []Root{{Root: root, Sources: srcs}}, Limit: 3, Explain: true})
		if err != nil || len(res) == 0 {
			t.Fatalf("%q: %v, %d results", qs, err, len(res))
		}
		return res[0].Text + " | " + res[0].Why
	}
	if got := first("where did Ana go hiking in March 2022?"); !strings.Contains(got, "hills") || !strings.Contains(got, "said in March 2022") {
		t.Errorf("March 2022: got %q, want the hills (said then)", got)
	}
	if got := first("where did Ana go hiking in July 2022?"); !strings.Contains(got, "lake") {
		t.Errorf("July 2022: got %q, want the lake (Ana's, said then)", got)
	}
	if got := first("what does Ana think of hiking?"); !strings.HasPrefix(got, "user: Ana:") || !strings.Contains(got, "said by someone the question names") {
		t.Errorf("Ana: got %q, want what Ana said", got)
	}
}

// FuzzSpeakerName: any text is read as a message's speaker prefix
// without a panic.
func FuzzSpeakerName(f *testing.F) {
	for _, s := range []string{"Melanie: hi", "\xff\xfe: x", ":", "a b c d e: f"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, q string) {
		isSpeakerName([]byte(q))
	})
}
