package secrets

import (
	"strings"
	"testing"

	toml "github.com/pelletier/go-toml/v2"
)

// gitleaksStopwords is every stop word of the vendored config, lowercase.
func gitleaksStopwords(t testing.TB) []string {
	t.Helper()
	var c tomlConfig
	if err := toml.Unmarshal(gitleaksConfig, &c); err != nil {
		t.Fatal(err)
	}
	words := c.Allowlist.StopWords
	for _, r := range c.Rules {
		for _, a := range r.Allowlists {
			words = append(words, a.StopWords...)
		}
	}
	for i, w := range words {
		words[i] = strings.ToLower(w)
	}
	if len(words) < 100 {
		t.Fatalf("got %d stop words in gitleaks' config, want its hundreds", len(words))
	}
	return words
}

// containsAny is what stopwords.in stands for.
func containsAny(words []string, text string) bool {
	for _, w := range words {
		if strings.Contains(text, w) {
			return true
		}
	}
	return false
}

func TestStopwordsAsContains(t *testing.T) {
	words := gitleaksStopwords(t)
	texts := []string{"", "x", "zq", "zzqqxxjjvvkk", "aws_secret_9f8e7d6c5b4a", "\xff\xfe", "sk-proj-Xk3Rv9QmZ2Tn8Wb5Yc4J"}
	lists := [][]string{words, {"ab"}, {"", "ab"}, {"a", "xyz"}, {"xyz", "ab", "abc"}, nil}
	for _, list := range lists {
		for _, w := range list {
			texts = append(texts, w, "zq"+w, w+"zq", "q"+w[:len(w)/2], w[len(w)/2:]+"j")
		}
	}
	for _, list := range lists {
		s := newStopwords(list)
		for _, text := range texts {
			if got, want := s.in(text), containsAny(list, text); got != want {
				t.Errorf("%d words: got %v for %q, want %v", len(list), got, text, want)
			}
		}
	}
}

func FuzzStopwords(f *testing.F) {
	words := gitleaksStopwords(f)
	s := newStopwords(words)
	for _, seed := range []string{"", "example", "xxEXAMPLExx", "0123456789abcdef", "tOkEn"} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, text string) {
		text = strings.ToLower(text)
		if got, want := s.in(text), containsAny(words, text); got != want {
			t.Errorf("got %v for %q, want %v", got, text, want)
		}
	})
}
