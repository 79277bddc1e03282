// Package secrets finds the credentials in agents' text and masks them.
//
// Agents' transcripts are full of credentials no one typed: a cat of a
// .env, a failed deploy printing its connection string, a CLI echoing a
// token. memwatch keeps the agent's own files and its spool byte for
// byte; what it derives from them or serves (recall and show, the MCP
// tools, the review page, what it sends an LLM and what it writes into
// memory) carries a mask instead of a value: [REDACTED:aws-access-token].
//
// What a credential is, is decided by gitleaks' default rules (its
// config/gitleaks.toml, MIT: LICENSE.gitleaks, vendored as data, the
// revision in gitleaksRevision): each rule's keywords, its regular
// expression and secret group, its minimum entropy and its allowlists,
// and the global allowlist (placeholders, example keys). The rule ids are
// the kinds memwatch names.
//
// The cost. Most text holds no keyword of any rule: one pass over it,
// testing each pair of bytes against the pairs keywords start with
// (keywords.go), says so, and nothing else runs. Only the rules whose
// keywords occur run their expression, and most of them first where a
// keyword is (windows.go).
package secrets

import (
	_ "embed"
	"fmt"
	"math"
	"regexp"
	"regexp/syntax"
	"slices"
	"sort"
	"strings"
	"sync"
	"unicode/utf8"
	"unsafe"

	"github.com/cespare/xxhash/v2"
	toml "github.com/pelletier/go-toml/v2"
)

//go:embed gitleaks.toml
var gitleaksConfig []byte

// memwatchConfig holds memwatch's own rules, in the same format.
//
//go:embed memwatch.toml
var memwatchConfig []byte

// readingGeneration numbers how a line is read for credentials, beside
// the rules: 1, as its bytes; 2, a JSON line with its escapes unescaped
// (FindLine). Bump it when the same rules find other credentials in the
// same lines (TestFingerprintFollowsFindings says when): a count kept
// from before (the daemon's tally) is then counted again.
const readingGeneration = 2

// Fingerprint names what this detector finds: its rules and how it reads
// a line. A count made by a detector of another fingerprint is stale.
func Fingerprint() string {
	h := xxhash.New()
	h.Write(gitleaksConfig)
	h.Write([]byte{0})
	h.Write(memwatchConfig)
	fmt.Fprintf(h, "\x00%d", readingGeneration)
	return fmt.Sprintf("%016x", h.Sum64())
}

// gitleaksRevision is the revision of gitleaks whose config/gitleaks.toml
// this is.
const gitleaksRevision = "b58d3f102cf3a2c84cb7f923d05c25c9b1aed84b (2026-07-22)"

// Finding is a credential in a text: the rule that found it and where its
// value is (byte offsets).
type Finding struct {
	Rule       string
	Start, End int
}

// Detector finds credentials. Safe for concurrent use (it is immutable).
type Detector struct {
	rules  []rule
	kw     *keywords
	byWord map[string][]int // a keyword: the rules it triggers
	// rulesOf is byWord by the keyword's index in kw.words.
	rulesOf [][]int
	global  []allowlist
	// whole runs every rule on the whole text (the tests' reference for
	// windowed rules).
	whole bool
}

type rule struct {
	id          string
	re          *regexp.Regexp
	entropy     float64
	secretGroup int
	allow       []allowlist
	// near: the rule matches a name and the value that follows it
	// (gitleaks' rules built on [\w.-]{0,50}?(?:name)...), so it runs
	// only on the text around each keyword, not on the whole text: a
	// line of code holding "key" or "token" costs a window, not a pass.
	near bool
	// gate, when set, is what a value of the rule must be: a window of
	// the rule is read by mayHoldValue first (gate.go). Only gitleaks'
	// catch-all has one.
	gate *valueGate
	// windowed: the rule is first run around its keywords (windows.go);
	// longest bounds its matches.
	windowed bool
	prefix   bool
	longest  int
	anchored *regexp.Regexp // a prefix rule's expression, from the start only
	// needs are texts a match holds one of each of (windows.go): where
	// a windowed or prefix rule's text holds none of a set, the
	// expression is not run.
	needs [][]string
	// bounded: every match starts with \b, so a keyword with a word's
	// byte before it starts none ("os." for vault's "s.", "key" for
	// jwt's "ey").
	bounded bool
	// prep makes the fields above from the rule's source when the rule
	// is first run (Default's): a process that checks one query for a
	// credential compiles the rules its keywords name, not all 200 (40 ms
	// of every memwatchd recall was compiling them).
	prep *rulePrep
}

type rulePrep struct {
	once     sync.Once
	regex    string
	keywords []string // lowercase
	allow    []tomlAllowlist
	err      error
}

// ready makes the rule's expressions; on an error (never for the vendored
// configs: TestEveryRuleCompiles) the rule matches nothing.
func (r *rule) ready() {
	r.prep.once.Do(func() {
		p := r.prep
		re, err := regexp.Compile(p.regex)
		if err != nil {
			p.err = err
			r.re, r.near, r.windowed = regexp.MustCompile(`[^\x00-\x{10FFFF}]`), false, false
			return
		}
		r.re = re
		for _, a := range p.allow {
			al, err := compileAllowlist(a)
			if err != nil {
				p.err = err
				continue
			}
			r.allow = append(r.allow, al)
		}
		if r.gate != nil {
			r.gate.letters = allowsLetters(r.allow)
		}
		if parsed, err := syntax.Parse(p.regex, syntax.Perl); err == nil {
			r.needs = needs(parsed)
			r.bounded = startsBounded(parsed)
		}
		if !r.near {
			r.longest, r.windowed, r.prefix = windowable(p.regex, p.keywords)
			if r.prefix {
				if r.anchored, err = anchoredOf(p.regex); err != nil {
					p.err, r.prefix, r.windowed = err, false, false
				}
			}
		}
	})
}

type allowlist struct {
	target    string // "" (the secret), "match" or "line"
	and       bool
	regexes   []*regexp.Regexp
	stopwords stopwords
}

// The config's shape (the fields memwatch uses).
type tomlConfig struct {
	Allowlist tomlAllowlist `toml:"allowlist"`
	Rules     []struct {
		ID          string          `toml:"id"`
		Regex       string          `toml:"regex"`
		Path        string          `toml:"path"`
		Entropy     float64         `toml:"entropy"`
		SecretGroup int             `toml:"secretGroup"`
		Keywords    []string        `toml:"keywords"`
		Allowlists  []tomlAllowlist `toml:"allowlists"`
	} `toml:"rules"`
}

type tomlAllowlist struct {
	Regexes     []string `toml:"regexes"`
	StopWords   []string `toml:"stopwords"`
	RegexTarget string   `toml:"regexTarget"`
	Condition   string   `toml:"condition"`
	Paths       []string `toml:"paths"`
}

// Default is the detector of gitleaks' default rules, read once; each
// rule is compiled when first run (TestEveryRuleCompiles compiles them all).
var Default = sync.OnceValue(func() *Detector {
	d, err := newDetector(false, gitleaksConfig, memwatchConfig)
	if err != nil {
		panic(fmt.Sprintf("secrets: the vendored gitleaks config does not load: %v", err)) // caught by every test
	}
	return d
})

// newDetector reads gitleaks configs (TOML), their rules and global
// allowlists together; compile makes every rule's expressions now
// (and says which does not compile), else each when first run.
func newDetector(compile bool, configs ...[]byte) (*Detector, error) {
	var c tomlConfig
	d := &Detector{byWord: map[string][]int{}}
	for _, config := range configs {
		var one tomlConfig
		if err := toml.Unmarshal(config, &one); err != nil {
			return nil, fmt.Errorf("read gitleaks config: %w", err)
		}
		if len(one.Allowlist.Regexes)+len(one.Allowlist.StopWords) > 0 {
			g, err := compileAllowlist(one.Allowlist)
			if err != nil {
				return nil, fmt.Errorf("global allowlist: %w", err)
			}
			d.global = append(d.global, g)
		}
		c.Rules = append(c.Rules, one.Rules...)
	}
	var words []string
	for _, r := range c.Rules {
		if r.Regex == "" || r.Path != "" {
			continue // a rule of file names alone, or of some files only: not text's
		}
		var kws []string
		for _, k := range r.Keywords {
			kws = append(kws, strings.ToLower(k))
		}
		ru := rule{id: r.ID, entropy: r.Entropy, secretGroup: r.SecretGroup, near: strings.Contains(r.Regex, `[\w.-]{0,50}?(?:`),
			prep: &rulePrep{regex: r.Regex, keywords: kws, allow: r.Allowlists}}
		if r.ID == genericRule && r.Regex == genericNames+genericTemplate && r.SecretGroup <= 1 {
			ru.gate = &valueGate{distinct: minDistinct(r.Entropy), entropy: r.Entropy}
		}
		if compile {
			if ru.ready(); ru.prep.err != nil {
				return nil, fmt.Errorf("rule %s: %w", r.ID, ru.prep.err)
			}
		}
		d.rules = append(d.rules, ru)
		if len(r.Keywords) == 0 {
			return nil, fmt.Errorf("rule %s has no keyword: every text would run it", r.ID)
		}
		for _, k := range r.Keywords {
			k = strings.ToLower(k)
			if _, ok := d.byWord[k]; !ok {
				words = append(words, k)
			}
			d.byWord[k] = append(d.byWord[k], len(d.rules)-1)
		}
	}
	for _, w := range words {
		if len(w) < 2 || !isASCII(w) {
			return nil, fmt.Errorf("keyword %q: every keyword must be two ASCII bytes or more", w)
		}
	}
	d.kw = newKeywords(words)
	d.rulesOf = make([][]int, len(words))
	for i, w := range words {
		d.rulesOf[i] = d.byWord[w]
	}
	return d, nil
}

func compileAllowlist(t tomlAllowlist) (allowlist, error) {
	a := allowlist{target: t.RegexTarget, and: strings.EqualFold(t.Condition, "AND")}
	for _, r := range t.Regexes {
		re, err := regexp.Compile(r)
		if err != nil {
			return a, err
		}
		a.regexes = append(a.regexes, re)
	}
	words := make([]string, 0, len(t.StopWords))
	for _, w := range t.StopWords {
		words = append(words, strings.ToLower(w))
	}
	a.stopwords = newStopwords(words)
	if len(t.Paths) > 0 && a.and {
		// An allowlist of some files AND of some text: it never applies to
		// text of no file.
		a.regexes, a.stopwords = nil, stopwords{}
	}
	return a, nil
}

// lower is text with its ASCII letters lowercased, every byte where it
// was (the keywords' places are the text's), without a copy when it has
// no upper case letter.
func lower(text string) string {
	for i := 0; i < len(text); i++ {
		if c := text[i]; 'A' <= c && c <= 'Z' {
			b := []byte(text)
			for j := i; j < len(b); j++ {
				if c := b[j]; 'A' <= c && c <= 'Z' {
					b[j] = c + 32
				}
			}
			return string(b)
		}
	}
	return text
}

// FindBytes is Find of b, without a copy of it: the findings hold
// offsets only, and b is not kept (it must not change during the call).
func (d *Detector) FindBytes(b []byte) []Finding {
	if len(b) == 0 {
		return nil
	}
	return d.Find(unsafe.String(unsafe.SliceData(b), len(b)))
}

// Find returns the credentials in text, in order, not overlapping.
func (d *Detector) Find(text string) []Finding {
	if len(text) < 8 {
		return nil
	}
	var buf [32]kwMatch
	ms := d.kw.find(text, buf[:0])
	if len(ms) == 0 {
		return nil
	}
	// The rules to run over the whole text (a rule with no window, or a
	// windowed one whose window matched), and the windows of the others.
	var whole []int
	type win struct {
		rule int
		w    [2]int
		ke   int // where its keyword ends
	}
	var wins []win
	folding := 0 // 1: no name in text is spelled with a rune that folds to ASCII, 2: one may be
	folded := func() bool {
		if folding == 0 {
			folding = 1
			if d.foldedName(text) {
				folding = 2
			}
		}
		return folding == 2
	}
	for _, m := range ms {
		start := int(m.pos)
		end := start + len(d.kw.words[m.word])
		for _, ri := range d.rulesOf[m.word] {
			r := &d.rules[ri]
			r.ready()
			switch {
			case slices.Contains(whole, ri):
			case r.near && !d.whole && !folded():
				if assigned(text, end) { // else a name with no value after it: "the token", "a key"
					wins = append(wins, win{ri, window(text, start, end), end})
				}
			case !r.windowed || d.whole:
				whole = append(whole, ri)
			case r.prefix:
				if r.bounded && start > 0 && isWordByte(text[start-1]) && isWordByte(text[start]) {
					break // no \b here: a match of the rule starts elsewhere
				}
				if t := r.fromKeyword(text, start); holdsNeeds(t, r.needs) && r.anchored.MatchString(t) {
					whole = append(whole, ri)
				}
			default:
				wins = append(wins, win{ri, r.windowAround(text, start, end), end})
			}
		}
	}
	if len(whole) == 0 && len(wins) == 0 {
		return nil
	}
	var out []Finding
	// Windows by rule, in the order the rules first had one.
	for len(wins) > 0 {
		ri := wins[0].rule
		r := &d.rules[ri]
		var ws [][2]int
		rest := wins[:0]
		for _, w := range wins {
			switch {
			case w.rule != ri:
				rest = append(rest, w)
			case r.gate == nil || mayHoldValue(text, w.w, w.ke, r.gate):
				// A gated rule reads only the windows whose name may
				// have a value after it: merged with the others, a
				// source file naming a key on every line was one window,
				// read whole for one name.
				ws = append(ws, w.w)
			}
		}
		wins = rest
		if !r.near {
			for _, w := range merge(ws) {
				if t := text[w[0]:w[1]]; holdsNeeds(t, r.needs) && r.re.MatchString(t) {
					whole = append(whole, ri)
					break
				}
			}
			continue
		}
		last := -1
		for _, w := range merge(ws) {
			for _, f := range r.find(text[w[0]:w[1]], w[0], d.global) {
				if f.Start >= last {
					out = append(out, f)
					last = f.End
				}
			}
		}
	}
	for _, ri := range whole {
		out = append(out, d.rules[ri].find(text, 0, d.global)...)
	}
	if len(out) == 0 {
		return nil
	}
	// A specific rule names the kind better than gitleaks' catch-all
	// (generic-api-key, from a name like token= and a value's entropy).
	if len(out) > 1 {
		kept := out[:0]
		for i, f := range out {
			if f.Rule == genericRule && overlapsOther(out, i) {
				continue
			}
			kept = append(kept, f)
		}
		out = kept
	}
	// In order; of overlapping findings, the first (the longest at a tie).
	sort.Slice(out, func(i, j int) bool {
		if out[i].Start != out[j].Start {
			return out[i].Start < out[j].Start
		}
		if out[i].End != out[j].End {
			return out[i].End > out[j].End
		}
		return out[i].Rule < out[j].Rule
	})
	kept := out[:1]
	for _, f := range out[1:] {
		if f.Start >= kept[len(kept)-1].End {
			kept = append(kept, f)
		}
	}
	return kept
}

// foldedName reports whether text may hold a keyword spelled with a rune
// that case folding makes an ASCII letter (U+017F and U+212A: s and k to
// (?i)): no keyword is found there, so the near rules read such a text
// whole. The text is read again with those runes as their letters.
func (d *Detector) foldedName(text string) bool {
	if !strings.Contains(text, "\u212a") && !strings.Contains(text, "\u017f") {
		return false
	}
	var b strings.Builder
	var at []int // where a rune was read as its letter
	for i := 0; i < len(text); {
		switch {
		case strings.HasPrefix(text[i:], "\u212a"):
			at = append(at, b.Len())
			b.WriteByte('k')
			i += len("\u212a")
		case strings.HasPrefix(text[i:], "\u017f"):
			at = append(at, b.Len())
			b.WriteByte('s')
			i += len("\u017f")
		default:
			b.WriteByte(text[i])
			i++
		}
	}
	for _, m := range d.kw.find(b.String(), nil) {
		start, end := int(m.pos), int(m.pos)+len(d.kw.words[m.word])
		if k := sort.SearchInts(at, start); k < len(at) && at[k] < end {
			return true
		}
	}
	return false
}

// genericRule is gitleaks' catch-all rule.
const genericRule = "generic-api-key"

// overlapsOther reports whether finding i overlaps another of another rule.
func overlapsOther(fs []Finding, i int) bool {
	for j, g := range fs {
		if j != i && g.Rule != fs[i].Rule && g.Start < fs[i].End && fs[i].Start < g.End {
			return true
		}
	}
	return false
}

// window is the text a near rule reads around a keyword at [start, end):
// 64 bytes before it (the rules allow 50 of a name before the keyword),
// 256 after, and on to the end of a value that goes on (a long base64).
func window(text string, start, end int) [2]int {
	a := max(0, start-64)
	b := min(len(text), end+256)
	for b < len(text) && valueByte(text[b]) {
		b++
	}
	return [2]int{a, b}
}

// assigned reports whether a value is given after a name ending at end:
// an operator of the near rules (=, :, >, ||, ?=, ",") within the 24
// bytes they allow between the name and it.
//
// And the value is long enough to be one (every near rule wants 8 bytes
// and more): x := f(y) gives no credential. A quick look, not a match:
// the rule's expression decides. It looks for more than the expression
// could match, never less: a byte beyond ASCII between the name and the
// operator may be a letter to the expressions' (?i) (U+017F and U+212A
// fold to s and k), and then the expression decides.
func assigned(text string, end int) bool {
	i, lim := end, min(len(text), end+24)
	for ; i < lim && text[i] != '='; i++ {
		if text[i] >= utf8.RuneSelf {
			return true
		}
		if !valueByte(text[i]) && text[i] != ' ' && text[i] != '\t' {
			break
		}
	}
	for k := 0; k < 3 && i < len(text) && strings.IndexByte(" \t\n\f\r'\"", text[i]) >= 0; k++ {
		i++
	}
	op := i
	for i < len(text) && i < op+3 && strings.IndexByte("=:>|?,", text[i]) >= 0 {
		i++
	}
	if i == op {
		return false
	}
	for k := 0; k < 5 && i < len(text) && strings.IndexByte("`'\" \t\n\f\r=", text[i]) >= 0; k++ {
		i++
	}
	n := 0
	for i < len(text) && (valueByte(text[i]) || text[i] >= utf8.RuneSelf) {
		i++
		n++
	}
	return n >= 8
}

// valueByte reports a byte a credential's value may hold.
func valueByte(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || strings.IndexByte("_.=+/-", c) >= 0
}

// merge joins overlapping windows, in order.
func merge(ws [][2]int) [][2]int {
	sort.Slice(ws, func(i, j int) bool { return ws[i][0] < ws[j][0] })
	var out [][2]int
	for _, w := range ws {
		if n := len(out); n > 0 && w[0] <= out[n-1][1] {
			out[n-1][1] = max(out[n-1][1], w[1])
			continue
		}
		out = append(out, w)
	}
	return out
}

// find runs one rule over text, which starts at byte off of the whole.
func (r *rule) find(text string, off int, global []allowlist) []Finding {
	r.ready()
	var out []Finding
	for _, m := range r.re.FindAllStringSubmatchIndex(text, -1) {
		start, end := m[0], m[1]
		// The secret: the secret group, else the first group that matched,
		// else the whole match (as gitleaks takes it).
		if r.secretGroup > 0 && 2*r.secretGroup+1 < len(m) && m[2*r.secretGroup] >= 0 {
			start, end = m[2*r.secretGroup], m[2*r.secretGroup+1]
		} else if r.secretGroup == 0 {
			for g := 1; 2*g+1 < len(m); g++ {
				if m[2*g] >= 0 && m[2*g+1] > m[2*g] {
					start, end = m[2*g], m[2*g+1]
					break
				}
			}
		}
		secret := strings.Trim(text[start:end], "\n")
		if secret == "" {
			continue
		}
		if r.entropy != 0 && entropy(secret) <= r.entropy {
			continue
		}
		match := text[m[0]:m[1]]
		line := lineOf(text, m[0], m[1])
		if allowed(global, secret, match, line) || allowed(r.allow, secret, match, line) {
			continue
		}
		lead := len(text[start:end]) - len(strings.TrimLeft(text[start:end], "\n"))
		out = append(out, Finding{Rule: r.id, Start: off + start + lead, End: off + start + lead + len(secret)})
	}
	return out
}

// lineOf is the line of text holding [start, end).
func lineOf(text string, start, end int) string {
	a := strings.LastIndexByte(text[:start], '\n') + 1
	b := strings.IndexByte(text[end:], '\n')
	if b < 0 {
		return text[a:]
	}
	return text[a : end+b]
}

// allowed reports whether one of the allowlists lets a finding be.
func allowed(lists []allowlist, secret, match, line string) bool {
	for _, a := range lists {
		target := secret
		switch a.target {
		case "match":
			target = match
		case "line":
			target = line
		}
		re := false
		for _, r := range a.regexes {
			if r.MatchString(target) {
				re = true
				break
			}
		}
		sw := a.stopwords.n > 0 && a.stopwords.in(strings.ToLower(secret))
		switch {
		case a.and:
			ok := len(a.regexes) > 0 || a.stopwords.n > 0
			if len(a.regexes) > 0 {
				ok = ok && re
			}
			if a.stopwords.n > 0 {
				ok = ok && sw
			}
			if ok {
				return true
			}
		case re || sw:
			return true
		}
	}
	return false
}

// stopwords tells whether a text holds one of an allowlist's words.
// gitleaks' lists hold hundreds, and each finding is tested against them:
// a Contains a word was a tenth of counting a home's credentials. The
// words are kept by their first two bytes, so a text is read once, a
// table look-up a place.
type stopwords struct {
	n     int                 // the words
	short []string            // the words of fewer than two bytes
	pairs map[uint16][]string // the others, by their first two bytes
	has   *[1 << 16 / 64]uint64
}

func newStopwords(words []string) stopwords {
	s := stopwords{n: len(words)}
	for _, w := range words {
		if len(w) < 2 {
			s.short = append(s.short, w)
			continue
		}
		if s.pairs == nil {
			s.pairs, s.has = map[uint16][]string{}, new([1 << 16 / 64]uint64)
		}
		p := uint16(w[0])<<8 | uint16(w[1])
		s.pairs[p] = append(s.pairs[p], w)
		s.has[p/64] |= 1 << (p % 64)
	}
	return s
}

// in reports whether text holds one of the words (strings.Contains).
func (s *stopwords) in(text string) bool {
	for _, w := range s.short {
		if strings.Contains(text, w) {
			return true
		}
	}
	if s.has == nil {
		return false
	}
	for i := 0; i+1 < len(text); i++ {
		p := uint16(text[i])<<8 | uint16(text[i+1])
		if s.has[p/64]&(1<<(p%64)) == 0 {
			continue
		}
		for _, w := range s.pairs[p] {
			if strings.HasPrefix(text[i:], w) {
				return true
			}
		}
	}
	return false
}

// entropy is the Shannon entropy of s, in bits per byte.
func entropy(s string) float64 {
	var counts [256]int
	for i := 0; i < len(s); i++ {
		counts[s[i]]++
	}
	var h float64
	n := float64(len(s))
	for _, c := range counts {
		if c > 0 {
			p := float64(c) / n
			h -= p * math.Log2(p)
		}
	}
	return h
}

// Keywords are the keywords of the rule of that kind (its id), lowercase:
// every text holding a credential of the kind holds one of them. None for
// a kind no rule has.
func (d *Detector) Keywords(kind string) []string {
	var out []string
	for w, rs := range d.byWord {
		for _, i := range rs {
			if d.rules[i].id == kind {
				out = append(out, w)
				break
			}
		}
	}
	sort.Strings(out)
	return out
}

// KindOf is the kind a search names: a mask as memwatch prints it
// ([REDACTED:aws-access-token], REDACTED:aws-access-token) or a rule's id
// of more than one word (aws-access-token; a one-word id such as "jwt" is
// a word people search for as such). "" when it names none.
func (d *Detector) KindOf(query string) string {
	q := strings.ToLower(strings.TrimSpace(query))
	q = strings.TrimSuffix(strings.TrimPrefix(q, "["), "]")
	masked := strings.HasPrefix(q, "redacted:")
	q = strings.TrimPrefix(q, "redacted:")
	if !masked && !strings.Contains(q, "-") {
		return ""
	}
	for _, r := range d.rules {
		if r.id == q {
			return r.id
		}
	}
	return ""
}

// MaskOf is what a credential of rule is replaced with.
func MaskOf(rule string) string { return "[REDACTED:" + rule + "]" }

// Mask returns text with each credential replaced by its mask, and how
// many it replaced.
func (d *Detector) Mask(text string) (string, int) {
	fs := d.Find(text)
	if len(fs) == 0 {
		return text, 0
	}
	var b strings.Builder
	last := 0
	for _, f := range fs {
		b.WriteString(text[last:f.Start])
		b.WriteString(MaskOf(f.Rule))
		last = f.End
	}
	b.WriteString(text[last:])
	return b.String(), len(fs)
}

// Masked is Default's Mask of text, the text alone.
func Masked(text string) string {
	s, _ := Default().Mask(text)
	return s
}

// Revision is the revision of gitleaks whose rules Default holds.
func Revision() string { return gitleaksRevision }

// Values masks texts and remembers the values it masked, so that one
// given again without what made it recognizable (a password without its
// URL, repeated by a model) is masked too. The zero value is ready; not
// safe for concurrent use.
type Values struct {
	seen map[string]string // a value: its rule
}

// Mask masks text's credentials (Default's rules), and every value masked
// before by v.
func (v *Values) Mask(text string) string {
	fs := Default().Find(text)
	for _, f := range fs {
		if v.seen == nil {
			v.seen = map[string]string{}
		}
		v.seen[text[f.Start:f.End]] = f.Rule
	}
	out, _ := Default().Mask(text)
	for value, rule := range v.seen {
		if len(value) >= 6 && strings.Contains(out, value) {
			out = strings.ReplaceAll(out, value, MaskOf(rule))
		}
	}
	return out
}
