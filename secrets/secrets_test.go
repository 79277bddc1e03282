package secrets

import (
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/memwatch/memwatch/recall/locomo"
)

// Credentials of many kinds as they show up in agents' transcripts: tool
// output (a cat of .env, a deploy's error, a CLI's config) and an
// assistant repeating one. Made up, in each kind's real shape.
var samples = []struct{ kind, text, value string }{
	{"aws-access-token", "AWS_ACCESS_KEY_ID=AKIAQYLPMN5HFIQR7XQZ", "AKIAQYLPMN5HFIQR7XQZ"},
	{"github-pat", "export GITHUB_TOKEN=ghp_R3vQy8NcLkZt0WmPb2XsJd7HfAe5Ug9KiOqY", "ghp_R3vQy8NcLkZt0WmPb2XsJd7HfAe5Ug9KiOqY"},
	{"gitlab-pat", "token: glpat-Xk3Rv9QmZ2Tn8Wb5Yc4J", "glpat-Xk3Rv9QmZ2Tn8Wb5Yc4J"},
	{"slack-bot-token", "SLACK_BOT_TOKEN=xoxb-2839471625-4820193847562-Qx7RmZk2Vt9NbWc4Lp8Jd3Hs", "xoxb-2839471625-4820193847562-Qx7RmZk2Vt9NbWc4Lp8Jd3Hs"},
	{"stripe-access-token", `stripe.api_key = "sk_live_51Hx9QmZ2Tn8Wb5Yc4JvR7kLpQ"`, "sk_live_51Hx9QmZ2Tn8Wb5Yc4JvR7kLpQ"},
	{"gcp-api-key", "key=AIzaSyD3kQ8vRm2Tn9WxB4Lp7Zc5Yh1Jf6Gs0Qe", "AIzaSyD3kQ8vRm2Tn9WxB4Lp7Zc5Yh1Jf6Gs0Qe"},
	{"openai-api-key", "OPENAI_API_KEY=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", "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"},
	{"anthropic-api-key", "ANTHROPIC_API_KEY=sk-ant-api03-ORS-6ilI8ihN5KXSc7Tvo-hBKqFYY-kv5ZJr3J1TWDtkwtDDb_xHKas1VOqg6YYZYn9ZhyiA4uoRgnatmUdjAWtGSU8poAA", "sk-ant-api03-ORS-6ilI8ihN5KXSc7Tvo-hBKqFYY-kv5ZJr3J1TWDtkwtDDb_xHKas1VOqg6YYZYn9ZhyiA4uoRgnatmUdjAWtGSU8poAA"},
	{"npm-access-token", "//registry.npmjs.org/:_authToken=npm_Xk3Rv9QmZ2Tn8Wb5Yc4JvR7kLpQxZ2Tn8Wb5", "npm_Xk3Rv9QmZ2Tn8Wb5Yc4JvR7kLpQxZ2Tn8Wb5"},
	{"sendgrid-api-token", "SENDGRID_API_KEY=SG.Xk3Rv9QmZ2Tn8Wb5Yc4JvR.7kLpQxZ2Tn8Wb5Yc4JvR7kLpQxZ2Tn8Wb5Yc4JvR7kL", "SG.Xk3Rv9QmZ2Tn8Wb5Yc4JvR.7kLpQxZ2Tn8Wb5Yc4JvR7kLpQxZ2Tn8Wb5Yc4JvR7kL"},
	{"huggingface-access-token", "HF_TOKEN=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", "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"},
	{"database-url-password", "DATABASE_URL=postgres://billing:Tr0ub4dor-3x@db.internal:5432/billing", "Tr0ub4dor-3x"},
	{"private-key", "-----BEGIN RSA PRIVATE KEY-----\nMIIEpAIBAAKCAQEAx3Rv9QmZ2Tn8Wb5Yc4JvR7kLpQxZ2Tn8Wb5Yc4JvR7kLpQxZ2Tn8Wb5Yc4Jv\nR7kLpQxZ2Tn8Wb5Yc4JvR7kLpQxZ2Tn8Wb5Yc4JvR7kLpQxZ2Tn8Wb5Yc4JvR7kLpQxZ2Tn8Wb5Yc4\n-----END RSA PRIVATE KEY-----", ""},
}

func TestFindsEveryKind(t *testing.T) {
	d := Default()
	for _, s := range samples {
		fs := d.Find(s.text)
		if len(fs) == 0 {
			t.Errorf("%s: nothing found in %q", s.kind, s.text)
			continue
		}
		if fs[0].Rule != s.kind {
			t.Errorf("%s: found as %s", s.kind, fs[0].Rule)
		}
		got := s.text[fs[0].Start:fs[0].End]
		if s.value != "" && got != s.value {
			t.Errorf("%s: the value %q, want %q", s.kind, got, s.value)
		}
		masked, n := d.Mask(s.text)
		if n == 0 || s.value != "" && strings.Contains(masked, s.value) || !strings.Contains(masked, MaskOf(s.kind)) {
			t.Errorf("%s: masked %q", s.kind, masked)
		}
	}
}

// Placeholders and the examples of the docs are no credentials.
func TestAllowlists(t *testing.T) {
	d := Default()
	for _, text := range []string{
		"AWS_ACCESS_KEY_ID=AKIAIOSFODNN7EXAMPLE",
		"DATABASE_URL=postgres://user:${DB_PASSWORD}@localhost:5432/app",
		"DATABASE_URL=postgres://user:password@localhost/app",
		"export GITHUB_TOKEN=$GITHUB_TOKEN",
		"the deploy failed: connection refused by db.internal:5432",
		"token = {{ secrets.NPM_TOKEN }}",
	} {
		if fs := d.Find(text); len(fs) > 0 {
			t.Errorf("%q: found %+v", text, fs)
		}
	}
}

// Plain conversations hold no credential: every turn of LoCoMo's.
func TestNoFalseAlarmsOnConversations(t *testing.T) {
	convs, err := locomo.Read("../../shared/recall/locomo10.zip")
	if err != nil {
		t.Skipf("LoCoMo is not here: %v", err)
	}
	d := Default()
	turns := 0
	for _, c := range convs {
		for _, s := range c.Sessions {
			for _, turn := range s {
				turns++
				if fs := d.Find(turn.Text); len(fs) > 0 {
					t.Errorf("%+v in %q", fs, turn.Text)
				}
			}
		}
	}
	if turns == 0 {
		t.Fatal("LoCoMo has no turn")
	}
}

func BenchmarkFindPlain(b *testing.B) {
	src, _ := os.ReadFile("secrets.go")
	d := Default()
	b.SetBytes(int64(len(src)))
	for b.Loop() {
		for _, l := range strings.Split(string(src), "\n") {
			d.Find(l)
		}
	}
}

func FuzzMask(f *testing.F) {
	for _, s := range samples {
		f.Add(s.text)
	}
	f.Add("postgres://a:b@c")
	f.Fuzz(func(t *testing.T, text string) {
		d := Default()
		masked, n := d.Mask(text)
		if n == 0 && masked != text {
			t.Fatalf("nothing found, text changed")
		}
		for _, fi := range d.Find(text) {
			if fi.Start < 0 || fi.End > len(text) || fi.Start >= fi.End {
				t.Fatalf("finding out of range: %+v", fi)
			}
		}
	})
}

// TestEveryRuleCompiles: Default compiles a rule when first run; every
// rule of the vendored configs compiles (newDetector with compile set
// compiles them all and says which does not), and a detector that
// compiles them late finds what one that compiled them at once finds.
func TestEveryRuleCompiles(t *testing.T) {
	eager, err := newDetector(true, gitleaksConfig, memwatchConfig)
	if err != nil {
		t.Fatal(err)
	}
	lazy, err := newDetector(false, gitleaksConfig, memwatchConfig)
	if err != nil {
		t.Fatal(err)
	}
	text := "export AWS_ACCESS_KEY_ID=AKIAQ3EGRUF6NXPZ7K4M and the token ghp_" + strings.Repeat("a1B2c3D4e5", 3) + "123456 in a line of code"
	if got, want := fmt.Sprint(lazy.Find(text)), fmt.Sprint(eager.Find(text)); got != want || want == "[]" {
		t.Errorf("late: %s\nat once: %s", got, want)
	}
	if _, err := newDetector(true, []byte("[[rules]]\nid = \"bad\"\nregex = \"(\"\nkeywords = [\"bad\"]\n")); err == nil {
		t.Error("a rule that does not compile: no error")
	}
}
