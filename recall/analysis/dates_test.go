package analysis

import (
	"reflect"
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
		if got := DateTerms(c.q); !reflect.DeepEqual(got, c.want) {
			t.Errorf("DateTerms(%q) = %q, want %q", c.q, got, c.want)
		}
	}
}

// FuzzDateTerms: any question is read without a panic, into
// well-formed date terms.
func FuzzDateTerms(f *testing.F) {
	for _, s := range []string{"in July 2022", "on 1 May, 2022", "March 3 2021", "\xff\xfe may 9999", "Melanie: hi"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, q string) {
		for _, term := range DateTerms(q) {
			if _, date := DateTermText(term); !date {
				t.Errorf("DateTerms(%q): %q is no date term", q, term)
			}
		}
	})
}
