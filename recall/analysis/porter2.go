package analysis

import "github.com/kljensen/snowball/english"

// english2 is english.Stem(w, false) for a word that is no stopword (stem
// asks of those first): the same Porter2 steps, as the snowball package
// takes them (its order of suffixes, its regions), on the bytes of a word
// of lowercase ASCII letters. The package makes each word a slice of
// runes and each suffix too, a microsecond a word; a home's first start
// stems a few hundred thousand distinct words, half of which no step
// changes (stemmable). A word holding anything else (an apostrophe) goes
// to the package. TestEnglish2 and FuzzEnglish2 hold it to the package.
func english2(w string) string {
	if !stemmable(w) {
		return w
	}
	for i := 0; i < len(w); i++ {
		if w[i] < 'a' || w[i] > 'z' {
			return english.Stem(w, false)
		}
	}
	if s, ok := specialStems[w]; ok {
		return s
	}
	p := porter{b: append(make([]byte, 0, len(w)+1), w...)}
	p.prelude()
	p.step1a()
	p.step1b()
	p.step1c()
	p.step2()
	p.step3()
	p.step4()
	p.step5()
	for i, c := range p.b {
		if c == 'Y' {
			p.b[i] = 'y'
		}
	}
	return string(p.b)
}

// specialStems are the words Porter2 stems by a list, not by its steps.
var specialStems = map[string]string{
	"skis": "ski", "skies": "sky", "dying": "die", "lying": "lie", "tying": "tie",
	"idly": "idl", "gently": "gentl", "ugly": "ugli", "early": "earli", "only": "onli",
	"singly": "singl", "sky": "sky", "news": "news", "howe": "howe", "atlas": "atlas",
	"cosmos": "cosmos", "bias": "bias", "andes": "andes", "inning": "inning",
	"innings": "inning", "outing": "outing", "outings": "outing", "canning": "canning",
	"cannings": "canning", "herring": "herring", "herrings": "herring",
	"earring": "earring", "earrings": "earring", "proceed": "proceed",
	"proceeds": "proceed", "proceeded": "proceed", "proceeding": "proceed",
	"exceed": "exceed", "exceeds": "exceed", "exceeded": "exceed",
	"exceeding": "exceed", "succeed": "succeed", "succeeds": "succeed",
	"succeeded": "succeed", "succeeding": "succeed",
}

// porter is a word being stemmed: its bytes ('Y' a y that is a
// consonant) and where its regions R1 and R2 start.
type porter struct {
	b      []byte
	r1, r2 int
}

func vowel(c byte) bool {
	switch c {
	case 'a', 'e', 'i', 'o', 'u', 'y':
		return true
	}
	return false
}

func (p *porter) prelude() {
	b := p.b
	for i, c := range b {
		if c == 'y' && (i == 0 || vowel(b[i-1])) {
			b[i] = 'Y'
		}
	}
	p.r1 = len(b)
	switch {
	case hasPrefix(b, "gener"), hasPrefix(b, "arsen"):
		p.r1 = 5
	case hasPrefix(b, "commun"):
		p.r1 = 6
	default:
		p.r1 = vnv(b, 0)
	}
	p.r2 = vnv(b, p.r1)
}

func hasPrefix(b []byte, s string) bool { return len(b) >= len(s) && string(b[:len(s)]) == s }

// vnv is where the region after the first non-vowel following a vowel
// from start begins (the word's length when there is none).
func vnv(b []byte, start int) int {
	for j := start + 1; j < len(b); j++ {
		if vowel(b[j-1]) && !vowel(b[j]) {
			return j + 1
		}
	}
	return len(b)
}

// first is the first of suffixes the word ends with, "" if none.
func (p *porter) first(suffixes ...string) string {
	n := len(p.b)
	if n == 0 {
		return ""
	}
	last := p.b[n-1]
	for _, s := range suffixes {
		if s[len(s)-1] == last && n >= len(s) && string(p.b[n-len(s):]) == s {
			return s
		}
	}
	return ""
}

// replace replaces the word's last n bytes with repl, the regions kept
// within it.
func (p *porter) replace(n int, repl string) {
	p.b = append(p.b[:len(p.b)-n], repl...)
	p.r1, p.r2 = min(p.r1, len(p.b)), min(p.r2, len(p.b))
}

func (p *porter) step1a() {
	switch s := p.first("sses", "ied", "ies", "us", "ss", "s"); s {
	case "sses":
		p.replace(4, "ss")
	case "ies", "ied":
		if len(p.b) > 4 {
			p.replace(3, "i")
		} else {
			p.replace(3, "ie")
		}
	case "s":
		for i := 0; i < len(p.b)-2; i++ {
			if vowel(p.b[i]) {
				p.replace(1, "")
				break
			}
		}
	}
}

func (p *porter) step1b() {
	s := p.first("eedly", "ingly", "edly", "ing", "eed", "ed")
	switch s {
	case "":
		return
	case "eed", "eedly":
		if len(s) <= len(p.b)-p.r1 {
			p.replace(len(s), "ee")
		}
		return
	}
	has := false
	for _, c := range p.b[:len(p.b)-len(s)] {
		if vowel(c) {
			has = true
			break
		}
	}
	if !has {
		return
	}
	r1, r2 := p.r1, p.r2
	p.replace(len(s), "")
	switch t := p.first("at", "bl", "iz", "bb", "dd", "ff", "gg", "mm", "nn", "pp", "rr", "tt"); t {
	case "":
		if p.r1 >= len(p.b) && p.shortSyllable(len(p.b)) {
			p.b = append(p.b, 'e')
			p.r1, p.r2 = len(p.b), len(p.b)
			return
		}
	case "at", "bl", "iz":
		p.b = append(p.b, 'e')
	default:
		p.replace(1, "")
	}
	p.r1, p.r2 = min(r1, len(p.b)), min(r2, len(p.b))
}

// shortSyllable says whether the word's first i bytes end in a short
// syllable.
func (p *porter) shortSyllable(i int) bool {
	b := p.b
	switch {
	case i == 2:
		return vowel(b[0]) && !vowel(b[1])
	case i >= 3:
		s1, s2, s3 := b[i-1], b[i-2], b[i-3]
		return !vowel(s1) && s1 != 'w' && s1 != 'x' && s1 != 'Y' && vowel(s2) && !vowel(s3)
	}
	return false
}

func (p *porter) step1c() {
	n := len(p.b)
	if n > 2 && (p.b[n-1] == 'y' || p.b[n-1] == 'Y') && !vowel(p.b[n-2]) {
		p.b[n-1] = 'i'
	}
}

// suffixRepl is a suffix of steps 2 and 3 and what it becomes.
type suffixRepl struct{ s, repl string }

// step2s are step 2's suffixes, in the order they are tried ("li" and
// "ogi" are decided apart).
var step2s = []suffixRepl{
	{"ational", "ate"}, {"fulness", "ful"}, {"iveness", "ive"}, {"ization", "ize"}, {"ousness", "ous"},
	{"biliti", "ble"}, {"lessli", "less"}, {"tional", "tion"}, {"alism", "al"}, {"aliti", "al"}, {"ation", "ate"},
	{"entli", "ent"}, {"fulli", "ful"}, {"iviti", "ive"}, {"ousli", "ous"}, {"anci", "ance"}, {"abli", "able"},
	{"alli", "al"}, {"ator", "ate"}, {"enci", "ence"}, {"izer", "ize"}, {"bli", "ble"}, {"ogi", ""}, {"li", ""},
}

// step3s are step 3's ("ative" is decided apart).
var step3s = []suffixRepl{
	{"ational", "ate"}, {"tional", "tion"}, {"alize", "al"}, {"icate", "ic"}, {"ative", ""},
	{"iciti", "ic"}, {"ical", "ic"}, {"ful", ""}, {"ness", ""},
}

// inR1 is the first of table the word ends with, when that one is in R1
// (a later one is not tried: the snowball package's way).
func (p *porter) inR1(table []suffixRepl) (suffixRepl, bool) {
	n := len(p.b)
	if n == 0 {
		return suffixRepl{}, false
	}
	last := p.b[n-1]
	for _, x := range table {
		if x.s[len(x.s)-1] == last && n >= len(x.s) && string(p.b[n-len(x.s):]) == x.s {
			return x, len(x.s) <= n-p.r1
		}
	}
	return suffixRepl{}, false
}

func (p *porter) step2() {
	x, ok := p.inR1(step2s)
	if !ok {
		return
	}
	n := len(p.b)
	switch x.s {
	case "li":
		if n >= 3 {
			switch p.b[n-3] {
			case 'c', 'd', 'e', 'g', 'h', 'k', 'm', 'n', 'r', 't':
				p.replace(2, "")
			}
		}
	case "ogi":
		if n >= 4 && p.b[n-4] == 'l' {
			p.replace(3, "og")
		}
	default:
		p.replace(len(x.s), x.repl)
	}
}

func (p *porter) step3() {
	x, ok := p.inR1(step3s)
	switch {
	case !ok:
	case x.s == "ative":
		if len(p.b)-p.r2 >= 5 {
			p.replace(5, "")
		}
	default:
		p.replace(len(x.s), x.repl)
	}
}

func (p *porter) step4() {
	s := p.first("ement", "ance", "ence", "able", "ible", "ment", "ent", "ant", "ism", "ate", "iti", "ous", "ive", "ize", "ion", "al", "er", "ic")
	n := len(p.b)
	if s == "" || len(s) > n-p.r2 {
		return
	}
	if s == "ion" {
		if n >= 4 && (p.b[n-4] == 's' || p.b[n-4] == 't') {
			p.replace(3, "")
		}
		return
	}
	p.replace(len(s), "")
}

func (p *porter) step5() {
	last := len(p.b) - 1
	if p.r1 > last {
		return
	}
	switch {
	case p.b[last] == 'e':
		if p.r2 <= last || !p.shortSyllable(last) {
			p.replace(1, "")
		}
	case p.r2 <= last && p.b[last] == 'l' && last >= 1 && p.b[last-1] == 'l':
		p.replace(1, "")
	}
}
