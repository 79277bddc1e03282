package control

import (
	"regexp"
	"strings"
	"unicode"
	"unicode/utf8"
)

// MarkWords is what recall's results mark of a query (a terminal in
// colour, the page with <mark>): each of its words of three letters or
// more, but question words, and the words they start (deploy: deployed,
// deploys), case-insensitively. Nil when there is none.
func MarkWords(query string) *regexp.Regexp {
	var words []string
	seen := map[string]bool{}
	for _, w := range strings.FieldsFunc(strings.ToLower(query), func(r rune) bool { return !unicode.IsLetter(r) && !unicode.IsDigit(r) && r != '-' && r != '_' }) {
		w = strings.Trim(w, "-_")
		if utf8.RuneCountInString(w) < 3 || unmarked[w] || seen[w] {
			continue
		}
		seen[w] = true
		words = append(words, regexp.QuoteMeta(w))
	}
	if len(words) == 0 {
		return nil
	}
	return regexp.MustCompile(`(?i)\b(?:` + strings.Join(words, "|") + `)[\pL\pN]*`)
}

// unmarked are question words not worth marking.
var unmarked = map[string]bool{"the": true, "and": true, "what": true, "which": true, "who": true, "how": true, "does": true, "did": true,
	"was": true, "were": true, "are": true, "for": true, "with": true, "that": true, "this": true, "when": true, "where": true, "why": true, "about": true, "from": true, "have": true, "has": true}
