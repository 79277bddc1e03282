package recall

import (
	"context"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

func TestDateTerms(t *testing.T) {
	for _, c := range []struct {
		q    string
		want []string
	}{
		{"Where did Joanna travel to in July 2022?", []string{"\x002022-07"}},
		{"What movie did Joanna watch on 1 May, 2022?", []string{"\x002022-05"}},
		{"When did Melanie go camping in June?", []string{"\x00m06"}},
		{"what did we decide in 2023 about the deploy", []string{"\x002023"}},
		{"may I ask what we said about march madness", nil},
		{"When did they march in the parade?", nil},
		{"What happened on 3 march 2021 and in Sep 2020?", []string{"\x002021-03", "\x002020-09"}},
		{"the 12345 tokens and version 1.2", nil},
	} {
		if got := dateTerms(c.q); !reflect.DeepEqual(got, c.want) {
			t.Errorf("dateTerms(%q) = %q, want %q", c.q, got, c.want)
		}
	}
}

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

// FuzzDateTerms: any question (and any message text's speaker prefix)
// is read without a panic, into well-formed date terms.
func FuzzDateTerms(f *testing.F) {
	for _, s := range []string{"in July 2022", "on 1 May, 2022", "March 3 2021", "\xff\xfe may 9999", "Melanie: hi"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, q string) {
		for _, term := range dateTerms(q) {
			if _, date := dateTermText(term); !date {
				t.Errorf("dateTerms(%q): %q is no date term", q, term)
			}
		}
		isSpeakerName([]byte(q))
	})
}
