package hostname

import (
	"regexp"
	"strings"
	"testing"
)

// reference is the expression Valid replaced.
var reference = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$`)

func TestValid(t *testing.T) {
	for _, tc := range []struct {
		s    string
		want bool
	}{
		{"web-1", true},
		{"a", true},
		{"host.example.com", true},
		{"A_b-9", true},
		{strings.Repeat("h", Max), true},
		{strings.Repeat("h", Max+1), false},
		{"", false},
		{".", false},
		{"..", false},
		{"-x", false},
		{"_x", false},
		{"a/b", false},
		{"a:b", false},
		{"a b", false},
		{"a\n", false},
		{"hôte", false},
	} {
		if got := Valid(tc.s); got != tc.want {
			t.Errorf("Valid(%q) = %v, want %v", tc.s, got, tc.want)
		}
	}
}

func FuzzValid(f *testing.F) {
	for _, s := range []string{"web-1", "", ".", "a\n", strings.Repeat("x", Max+1), "hôte"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if got, want := Valid(s), reference.MatchString(s); got != want {
			t.Errorf("Valid(%q) = %v, the expression says %v", s, got, want)
		}
	})
}
