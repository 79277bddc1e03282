package secrets

import (
	"os"
	"reflect"
	"slices"
	"strings"
	"testing"
)

// wholeDetector runs every rule on the whole text: what the windows must
// find exactly.
func wholeDetector(t testing.TB) *Detector {
	d, err := newDetector(true, gitleaksConfig, memwatchConfig)
	if err != nil {
		t.Fatal(err)
	}
	d.whole = true
	return d
}

// TestWindowsFindWhatTheWholeTextHolds: running a rule around its
// keywords first finds exactly what running it over the whole text does,
// credentials at a line's start, end, inside words, after a false start,
// in source code full of keywords.
func TestWindowsFindWhatTheWholeTextHolds(t *testing.T) {
	whole := wholeDetector(t)
	var texts []string
	for _, s := range samples {
		texts = append(texts, s.text, "x"+s.text, s.text+"x", "they said "+s.text+"; then", strings.Repeat("s.", 40)+s.text)
	}
	src, _ := os.ReadFile("secrets.go")
	texts = append(texts, strings.Split(string(src), "\n")...)
	texts = append(texts,
		"jwt eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJzdWIiOiIxMjM0NTY3ODkwIiwibmFtZSI6IkpvaG4gRG9lIiwiaWF0IjoxNTE2MjM5MDIyfQ.SflKxwRJSMeKKF2QT4fwpMeJf36POk6yJV_adQssw5c end",
		"theyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJzdWIiOiIxMjM0NTY3ODkwIiwibmFtZSI6IkpvaG4gRG9lIiwiaWF0IjoxNTE2MjM5MDIyfQ.SflKxwRJSMeKKF2QT4fwpMeJf36POk6yJV_adQssw5c",
		"vault s.Xk3Rv9QmZ2Tn8Wb5Yc4JvR7k here, as.Xk3Rv9QmZ2Tn8Wb5Yc4JvR7k not",
	)
	texts = append(texts, gateTexts...)
	for _, text := range texts {
		got, want := Default().Find(text), whole.Find(text)
		if !reflect.DeepEqual(got, want) {
			t.Errorf("%.120q:\nwindows %+v\nwhole   %+v", text, got, want)
		}
	}
}

// gateTexts are what the generic rule's gate (gate.go) and the needs of
// the prefix rules read: every way between a name and its value, values
// that end and values that go on, the runes case folding adds, curl with
// and without a header or a user.
var gateTexts = []string{
	"api_key\n= Xk3Rv9QmZ2Tn8Wb5Yc4JvR7kq",
	"my secret\r\n: 'Xk3Rv9QmZ2Tn8Wb5Yc4JvR7kq'",
	"token\f:\f\"Xk3Rv9QmZ2Tn8Wb5Yc4JvR7kq\"",
	"auth :::= Xk3Rv9QmZ2Tn8Wb5Yc4JvR7kq;",
	"credential ?= =====Xk3Rv9QmZ2Tn8Wb5Yc4JvR7kq",
	"password => `Xk3Rv9QmZ2Tn8Wb5Yc4JvR7kq`",
	"access || Xk3Rv9QmZ2Tn8Wb5Yc4JvR7kq\\nnext",
	"creds, Xk3Rv9QmZ2Tn8Wb5Yc4JvR7kq\\r",
	"creds, Xk3Rv9QmZ2Tn8Wb5Yc4JvR7kq\\R",
	"creds, Xk3Rv9QmZ2Tn8Wb5Yc4JvR7kq\\N",
	"secretvalue_of-the.x  = Xk3Rv9QmZ2Tn8Wb5Yc4JvR7kq",
	"secretvalue_of-the.long.name = Xk3Rv9QmZ2Tn8Wb5Yc4JvR7kq",
	"key = Xk3Rv9QmZ2Tn8Wb5Yc4JvR7kq(x)",
	"key = Xk3Rv9QmZ2Tn8Wb5Yc4JvR7kq+abc/def==",
	"key = abcdefghij",
	"key = aaaaaaaaaaaaaaaaaaaaaaaaaaaaaa",
	"x.Key = binary.BigEndian.Uint64(b)",
	"token := os.Getenv(\"GITHUB_TOKEN\")",
	"\u017fecret = Xk3Rv9QmZ2Tn8Wb5Yc4JvR7kq",
	"\u212aey = Xk3Rv9QmZ2Tn8Wb5Yc4JvR7kq",
	"apikey=Xk3Rv9QmZ2Tn8Wb5Yc4JvR7kq",
	"API_KEY: " + strings.Repeat("Xk3Rv9QmZ2Tn8Wb5", 12),
	"key = a1b2c3d4e5f6",
	"key = a1b2c3d4e5f6a", // 3.547 bits a byte
	"key = a1b2c3d4e5f6aaaaaaaaaaaaaaaaaaaaaaaa",
	"key = abcdefghijklmnopq1",
	"key = abcdefghijklmnopqr",
	"key = -abcdefghijklmnopq",
	"authority := target.URL.Host;",
	"authority := target.URL.Host1;",
	"key = a1b2c3d4e5f",
	"secret12345678901234567890=Xk3Rv9QmZ2Tn8Wb5Yc4JvR7kq",
	"secret123456789012345678901=Xk3Rv9QmZ2Tn8Wb5Yc4JvR7kq",
	"token'\"\n=Xk3Rv9QmZ2Tn8Wb5Yc4JvR7kq",
	"key: \"'`\nXk3Rv9QmZ2Tn8Wb5Yc4JvR7kq",
	"key:=====Xk3Rv9QmZ2Tn8Wb5Yc4JvR7kq",
	"token = os.Getenv; \u017fecret = Xk3Rv9QmZ2Tn8Wb5Yc4JvR7kq",
	"token = os.Getenv; \u212aey = Xk3Rv9QmZ2Tn8Wb5Yc4JvR7kq",
	"token\u212a\u017f = Xk3Rv9QmZ2Tn8Wb5Yc4JvR7kq",
	"token = os.Getenv; acce\u017f\u017f = Xk3Rv9QmZ2Tn8Wb5Yc4JvR7kq",
	"key = os.Getenv; \u212a and s \u017f",
	"token " + strings.Repeat("x ", 200) + "acce\u017f\u017f = Xk3Rv9QmZ2Tn8Wb5Yc4JvR7kq",
	"token " + strings.Repeat("x ", 200) + "cred\u017f = Xk3Rv9QmZ2Tn8Wb5Yc4JvR7kq",
	"key = Xk3Rv9QmZ2\u212aTn8Wb5Yc4",
	"errors.Xk3Rv9QmZ2Tn8Wb5Yc4JvR7k; os.Getenv; s.Xk3Rv9QmZ2Tn8Wb5Yc4JvR7k",
	"(s.Xk3Rv9QmZ2Tn8Wb5Yc4JvR7k) _s.Xk3Rv9QmZ2Tn8Wb5Yc4JvR7k 9s.Xk3Rv9QmZ2Tn8Wb5Yc4JvR7k",
	"the key eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.SflKxwRJSMeKKF2QT4fw they",
	"curl https://api.example.com -H \"Authorization: Bearer Xk3Rv9QmZ2Tn8Wb5Yc4JvR7kq\"",
	"curl https://api.example.com\n  --header 'X-Api-Key: Xk3Rv9QmZ2Tn8Wb5Yc4JvR7kq'",
	"curl -u admin:Xk3Rv9QmZ2Tn8Wb5 https://example.com",
	"curl --user=\"admin:Xk3Rv9QmZ2Tn8Wb5\" https://example.com",
	"curl https://example.com -o out.txt; echo key = Xk3Rv9QmZ2Tn8Wb5Yc4JvR7kq",
}

func FuzzWindows(f *testing.F) {
	for _, s := range samples {
		f.Add(s.text)
	}
	for _, s := range gateTexts {
		f.Add(s)
	}
	f.Add("s.Xk3Rv9QmZ2Tn8Wb5Yc4JvR7k")
	whole := wholeDetector(f)
	f.Fuzz(func(t *testing.T, text string) {
		if got, want := Default().Find(text), whole.Find(text); !reflect.DeepEqual(got, want) {
			t.Fatalf("%q: windows %+v, whole %+v", text, got, want)
		}
	})
}

// TestGenericGateReadsTheRule: the gate of gitleaks' catch-all rule is on
// (the vendored rule still reads as the gate does: a change of it turns
// the gate off, and this fails), and a value is told by its distinct
// bytes as the rule's entropy needs.
func TestGenericGateReadsTheRule(t *testing.T) {
	d := Default()
	for i := range d.rules {
		r := &d.rules[i]
		if r.id != genericRule {
			continue
		}
		r.ready()
		if r.gate == nil || *r.gate != (valueGate{distinct: 12, entropy: 3.5, letters: true}) {
			t.Fatalf("%s: gate %+v, want 12 distinct bytes, 3.5 bits, letters allowed (its expression, entropy or allowlist changed: read gate.go again)", r.id, r.gate)
		}
	}
	for _, c := range []struct {
		entropy float64
		want    int
	}{{0, 1}, {3, 9}, {3.5, 12}, {4, 17}, {4.5, 23}} {
		if got := minDistinct(c.entropy); got != c.want {
			t.Errorf("minDistinct(%v) = %d, want %d", c.entropy, got, c.want)
		}
	}
	// Whatever finds a value of 12 distinct bytes or more finds one of 11.
	for _, v := range []string{"abcdefghijkl", "abcdefghijk"} {
		if h := entropy(v); (h > 3.5) != (len(v) >= 12) {
			t.Errorf("entropy(%q) = %v", v, h)
		}
	}
}

// TestNeedsHeldByMatches: every match of a rule with needs holds one of
// each set, and curl's rules need the option that names what they find.
func TestNeedsHeldByMatches(t *testing.T) {
	d := wholeDetector(t)
	var texts []string
	for _, s := range samples {
		texts = append(texts, s.text)
	}
	texts = append(texts, gateTexts...)
	held := 0
	for i := range d.rules {
		r := &d.rules[i]
		if len(r.needs) == 0 {
			continue
		}
		for _, text := range texts {
			for _, m := range r.re.FindAllString(text, -1) {
				held++
				if !holdsNeeds(m, r.needs) {
					t.Errorf("%s: match %q holds none of a set of %q", r.id, m, r.needs)
				}
			}
		}
		if r.id == "curl-auth-user" && !slices.ContainsFunc(r.needs, func(set []string) bool { return slices.Contains(set, " --user") }) {
			t.Errorf("%s: needs %q, want a set with \" --user\"", r.id, r.needs)
		}
	}
	if held < 5 {
		t.Errorf("%d matches of rules with needs, want the samples' and curl's", held)
	}
}
