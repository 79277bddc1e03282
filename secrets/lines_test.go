package secrets

import (
	"encoding/json"
	"strings"
	"testing"
	"unicode/utf8"
)

// TestMaskLine: a JSONL line keeps parsing and keeps every byte outside
// the strings that held a value; the value is gone, its kind named. A PEM
// key written with \n escapes is masked whole.
func TestMaskLine(t *testing.T) {
	pem := "-----BEGIN RSA PRIVATE KEY-----\n" + strings.Repeat("MIIEowIBAAKCAQEAx4UbaDzY8vN2qT5rWcL0pJ3mYhB7nK1sEoXfG9dQzR6uVtAi\n", 4) + "-----END RSA PRIVATE KEY-----"
	content, _ := json.Marshal(map[string]any{"type": "tool_result", "content": "AWS_ACCESS_KEY_ID=AKIAQYLPMN5HFIQR7XQZ\n" + pem})
	for _, tc := range []struct {
		name, line string
		kinds      []string
		keep       []string
	}{
		{"jsonl", `{"type":"user","message":{"role":"user","content":[` + string(content) + `]},"uuid":"u1"}`, []string{"aws-access-token", "private-key"}, []string{`"uuid":"u1"`, `{"type":"user","message":{"role":"user","content":[{"content":"`}},
		{"text", "export GITHUB_TOKEN=ghp_R3vQy8NcLkZt0WmPb2XsJd7HfAe5Ug9KiOqY\n", []string{"github-pat"}, []string{"export GITHUB_TOKEN="}},
		{"plain", `{"type":"user","message":{"content":"nothing to see"}}`, nil, []string{`{"type":"user","message":{"content":"nothing to see"}}`}},
		{"escaped quote", `{"a":"say \"hi\"","b":"AKIAQYLPMN5HFIQR7XQZ"}`, []string{"aws-access-token"}, []string{`{"a":"say \"hi\"","b":"`}},
	} {
		got, kinds := Default().MaskLine([]byte(tc.line))
		if strings.Join(kinds, ",") != strings.Join(tc.kinds, ",") {
			t.Errorf("%s: kinds %v, want %v", tc.name, kinds, tc.kinds)
		}
		for _, k := range tc.keep {
			if !strings.Contains(string(got), k) {
				t.Errorf("%s: %q lost %q", tc.name, got, k)
			}
		}
		for _, v := range []string{"AKIAQYLPMN5HFIQR7XQZ", "MIIEowIBAAKCAQEA", "ghp_R3vQ"} {
			if strings.Contains(string(got), v) {
				t.Errorf("%s: %q still holds %s", tc.name, got, v)
			}
		}
		if strings.HasPrefix(tc.line, "{") && !json.Valid(got) {
			t.Errorf("%s: masked line does not parse: %s", tc.name, got)
		}
	}
}

func FuzzMaskLine(f *testing.F) {
	f.Add([]byte(`{"a":"AKIAQYLPMN5HFIQR7XQZ","b":[1,"x\"y"]}`))
	f.Add([]byte("token=ghp_R3vQy8NcLkZt0WmPb2XsJd7HfAe5Ug9KiOqY"))
	f.Fuzz(func(t *testing.T, line []byte) {
		got, kinds := Default().MaskLine(line)
		if len(kinds) == 0 && string(got) != string(line) {
			t.Fatalf("no kind, yet changed: %q -> %q", line, got)
		}
		if json.Valid(line) && !json.Valid(got) {
			t.Fatalf("a JSON line no longer parses: %q -> %q", line, got)
		}
	})
}

// TestMaskedLine: a line shown as written is masked inside a JSON line's
// strings (a name and its value on two lines, an escape between them in
// the raw bytes) and as it is; a note's line as text.
func TestMaskedLine(t *testing.T) {
	for _, c := range []struct{ line, value string }{
		{`{"content":"api_key\n= Xk3Rv9QmZ2Tn8Wb5Yc4JvR7kq"}`, "Xk3Rv9QmZ2Tn8Wb5Yc4JvR7kq"},
		{`{"a":1, "b":"AWS_ACCESS_KEY_ID=AKIAQYLPMN5HFIQR7XQZ"}`, "AKIAQYLPMN5HFIQR7XQZ"},
		{`{"cut":"AWS_ACCESS_KEY_ID=AKIAQYLPMN5HFIQR7XQZ`, "AKIAQYLPMN5HFIQR7XQZ"},
		{"export GITHUB_TOKEN=ghp_R3vQy8NcLkZt0WmPb2XsJd7HfAe5Ug9KiOqY", "ghp_R3vQy8NcLkZt0WmPb2XsJd7HfAe5Ug9KiOqY"},
		// A JSON file written out on many lines (opencode's, a config):
		// a line is no JSON alone; its strings are read unescaped.
		{`    "text": "export OKAPI_SECRET=\"Xk3Rv9QmZ2Tn8Wb5Yc4JvR7kq\"\n",`, "Xk3Rv9QmZ2Tn8Wb5Yc4JvR7kq"},
		{`      "output": "{\"api_key\": \"Xk3Rv9QmZ2Tn8Wb5Yc4JvR7kq\"}"`, "Xk3Rv9QmZ2Tn8Wb5Yc4JvR7kq"},
		{`  "password:\tXk3Rv9QmZ2Tn8Wb5Yc4JvR7kq",`, "Xk3Rv9QmZ2Tn8Wb5Yc4JvR7kq"},
		// A JSON line cut short inside a string.
		{`{"content":"cat .env\nOKAPI_SECRET=\"Xk3Rv9QmZ2Tn8Wb5Yc4JvR7kq\"\nPORT=80`, "Xk3Rv9QmZ2Tn8Wb5Yc4JvR7kq"},
	} {
		got := string(MaskedLine([]byte(c.line)))
		if strings.Contains(got, c.value) || !strings.Contains(got, "[REDACTED:") {
			t.Errorf("MaskedLine(%q) = %q, want its value masked", c.line, got)
		}
	}
	if got, want := string(MaskedLine([]byte(`{"content":"nothing here"}`))), `{"content":"nothing here"}`; got != want {
		t.Errorf("a line with no credential: got %q, want it as it was", got)
	}
}

// TestFindLine: a credential written inside a JSONL line's string (a tool
// result's text) is found as in the text itself, whatever the escapes
// between its name and its value (quotes, a tab, a newline, \u escapes);
// a line that is not JSON is read as it is. Each of these is missed in
// the line's raw bytes, where \" and \t are no quote and no space.
func TestFindLine(t *testing.T) {
	d := Default()
	texts := []string{
		`{"api_key": "Xk3Rv9QmZ2Tn8Wb5Yc4JvR7kq", "n": 1}`,
		"config:\napi_key\n  = Xk3Rv9QmZ2Tn8Wb5Yc4JvR7kq\n",
		"export OKAPI_SECRET=\"Xk3Rv9QmZ2Tn8Wb5Yc4JvR7kq\"\n",
		"password:\tXk3Rv9QmZ2Tn8Wb5Yc4JvR7kq\n",
		`aws = "AKIAQYLPMN5HFIQR7XQZ"`,
		"api_key = \"Xk3Rv9QmZ2Tn8Wb5Yc4JvR7kq\" <\u00e9> & \U0001F511",
	}
	for _, s := range samples {
		texts = append(texts, s.text, `"`+s.text+`"`, "\t"+s.text+"\n")
	}
	var buf []byte
	for _, text := range texts {
		want := kindsOf(d.Find(text))
		if len(want) == 0 {
			t.Fatalf("the text itself holds no credential: %q", text)
		}
		content, _ := json.Marshal(text) // escapes <, > and & as \u003c too
		line := `{"type":"user","message":{"role":"user","content":[{"type":"tool_result","content":` + string(content) + `}]}}` + "\n"
		if got := kindsOf(d.FindLine([]byte(line), &buf)); strings.Join(got, ",") != strings.Join(want, ",") {
			t.Errorf("in a JSON line %s: found %v, want %v", content, got, want)
		}
	}
	// A line of a JSON file written out on many lines.
	if got := kindsOf(d.FindLine([]byte(`    "text": "export OKAPI_SECRET=\"Xk3Rv9QmZ2Tn8Wb5Yc4JvR7kq\"\n",`), &buf)); len(got) != 1 {
		t.Errorf("a pretty-printed JSON file's line: found %v, want one", got)
	}
	// Not JSON: its backslashes are its own.
	if got := d.FindLine([]byte(`password:\tXk3Rv9QmZ2Tn8Wb5Yc4JvR7kq`), &buf); len(got) != 0 {
		t.Errorf("a line that is no JSON read unescaped: %v", got)
	}
}

// FuzzUnescapeJSON: a string encoded as JSON reads back as itself, and
// any line is read without a panic.
func FuzzUnescapeJSON(f *testing.F) {
	f.Add("say \"hi\"\n\tto <you> & \u2028 \U0001F511", []byte(`{"a":"\ud83d\udd11 \ud800 \u00zz \q \"`))
	f.Fuzz(func(t *testing.T, s string, line []byte) {
		unescapeJSON(nil, line)
		if !utf8.ValidString(s) {
			return
		}
		b, _ := json.Marshal(s)
		if got := string(unescapeJSON(nil, b)); got != `"`+s+`"` {
			t.Fatalf("unescapeJSON(%s) = %q, want %q", b, got, `"`+s+`"`)
		}
	})
}

// FuzzMaskedLine: any line is shown without a panic, and a line holding
// no rule's keyword is shown as it is.
func FuzzMaskedLine(f *testing.F) {
	f.Add([]byte(`    "text": "export OKAPI_SECRET=\"Xk3Rv9QmZ2Tn8Wb5Yc4JvR7kq\"\n",`))
	f.Add([]byte(`{"cut":"a \"b\" \u00e9 \ud83d`))
	f.Fuzz(func(t *testing.T, line []byte) {
		got := MaskedLine(line)
		if !Default().mentions(line) && string(got) != string(line) {
			t.Fatalf("no keyword, yet changed: %q -> %q", line, got)
		}
	})
}

// TestUnescapeJSON: what is no valid escape is kept as written; a lone
// surrogate reads as U+FFFD, as encoding/json reads it.
func TestUnescapeJSON(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{`a\nb\t\tc\"d\\e\/f`, "a\nb\t\tc\"d\\e/f"},
		{`\q\u00zz\u12`, `\q\u00zz\u12`},
		{`end\`, `end\`},
		{`\ud83d\udd11 \ud83d x \udd11 \ud83d\u0041`, "\U0001F511 \uFFFD x \uFFFD \uFFFDA"},
		{`\u00e9\u2028`, "\u00e9\u2028"},
	} {
		if got := string(unescapeJSON([]byte("kept:"), []byte(c.in))); got != "kept:"+c.want {
			t.Errorf("unescapeJSON(%q) = %q, want %q", c.in, got, "kept:"+c.want)
		}
	}
}
