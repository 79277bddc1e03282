package session

import (
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"
	"unsafe"
)

// TestFastFieldsKnown: the fast decoder knows every field of the structs
// it fills, so a key it skips is never one encoding/json would decode.
func TestFastFieldsKnown(t *testing.T) {
	for _, c := range []struct {
		typ  reflect.Type
		keys []string
	}{{reflect.TypeFor[lineShape](), shapeKeys}, {reflect.TypeFor[part](), partKeys}} {
		var tags []string
		for f := range c.typ.Fields() {
			tags = append(tags, strings.Split(f.Tag.Get("json"), ",")[0])
		}
		slices.Sort(tags)
		keys := slices.Sorted(slices.Values(c.keys))
		if !slices.Equal(tags, keys) {
			t.Errorf("%v: the fast decoder knows %v, the struct's tags are %v", c.typ, keys, tags)
		}
	}
}

// TestFastUnmarshal reads the values decode asks for as encoding/json does,
// across the cases the fast path takes and those it leaves to go-json.
func TestFastUnmarshal(t *testing.T) {
	for _, in := range fastCases {
		compareUnmarshal(t, []byte(in))
	}
}

var fastCases = []string{
	`{"type":"user","message":{"role":"user","content":"a\nb \"q\" \\ \/ \u00e9 \u20ac"},"uuid":"u1","parentUuid":null,"timestamp":"2026-01-15T10:00:00Z"}`,
	`{"role":"assistant","content":[{"type":"text","text":"x"},null,{"type":"tool_use","name":"Bash","input":{"command":"ls"},"id":"t1"}]}`,
	`{"content":[{"type":"tool_result","content":"r","is_error":false}],"role":"user"}`,
	` { "role" : "user" , "content" : "hi" } `, `{}`, `[]`, `[ ]`, `null`, ` null `, `"s"`, `""`, `"\u0000"`, `"a\u00e9\ud83d\ude00"`, `"\ud800"`, `"\udc00x"`,
	"\"caf\xc3\xa9\"", "\"\xff\"", "\"a\x01\"", `"a\x"`, `"a\u12"`, `"abc`, `"abc"x`, `"abc" "d"`, `1`, `-0.5e+3`, `01`, `1.`, `-`, `1e`, `true`, `nul`, `nullx`, `[1,]`, `{"a":1,}`, `{"a" 1}`, `{,}`,
	`{"Type":"user"}`, `{"TYPE":"user","type":"x"}`, `{"type":1}`, `{"type":null}`, `{"isMeta":"true"}`, `{"isMeta":null,"_command":true,"isCompactSummary":false}`,
	`{"content":null,"message":null,"id":5,"timestamp":null}`, `{"timestamp":1700000000000}`, `{"timestamp":"x\u0031"}`, `{"toolsUsed":["a"],"role":"assistant"}`,
	`{"tool_calls":[{"function":{"name":"f","arguments":"{}"}}],"role":"assistant"}`, `{"action":{"command":["ls"]}}`, `{"\u0074ype":"user"}`, "{\"ty\xc3\xa9\":1}",
	"{\"\u212aey\":1}", `{"a":{"b":[1,{"c":"d"}]},"role":"tool"}`, `{"role":"user"}garbage`, `{"role":"user"`, `[{"type":"text","text":"a"},{"type":"text","text":1}]`,
	`[{"Text":"a"}]`, `[1]`, `["a"]`, `[{"type":"text"}`, `{"role":"user","content":"` + strings.Repeat("x", 100) + `\n` + strings.Repeat("é", 30) + `"}`,
	strings.Repeat("[", 600) + strings.Repeat("]", 600), `{"a":` + strings.Repeat("[", 600) + strings.Repeat("]", 600) + `}`, "{\"role\":\"user\",\"content\":\"tab\there\"}",
	"{\"role\":\"user\"}\n", "\t{\"role\":\"user\"}\r\n",
	// Long strings (bigStrings keeps their ends), nested as a tool's result
	// is, with escapes, beyond ASCII, invalid UTF-8, surrogates.
	`{"type":"user","message":{"role":"user","content":[{"type":"tool_result","content":"` + long + `"},{"type":"text","text":"` + long + `"}]},"toolUseResult":{"file":{"content":"` + long + `"}},"uuid":"` + strings.Repeat("u", 130) + `"}`,
	`{"role":"assistant","content":[{"type":"tool_use","name":"Read","input":{"file_path":"` + strings.Repeat("p/", 80) + `"}}],"summary":"` + long + `\ud83d\ude00"}`,
	`{"role":"user","content":"` + strings.Repeat("é→", 60) + "\xff" + `"}`, `{"role":"user","content":"` + long + `\ud800"}`, `{"role":"user","content":"` + long + `\x"}`, `{"role":"user","content":"` + long,
}

// long is a tool result's text: lines numbered as Claude Code's Read
// numbers them, quotes and tabs escaped.
var long = strings.Repeat(`     1\u2192func main() {\n\tfmt.Println(\"hello, world\")\n}\n`, 4)

func fastUnmarshal(data []byte, v any) error {
	var r jsonReader
	return r.unmarshal(data, v)
}

// compareUnmarshal checks fastUnmarshal against encoding/json for each
// type decode asks for.
func compareUnmarshal(t *testing.T, in []byte) {
	t.Helper()
	check := func(name string, got, want any, gotErr, wantErr error) {
		t.Helper()
		if (gotErr == nil) != (wantErr == nil) {
			t.Errorf("%s of %q: error %v, encoding/json's %v", name, in, gotErr, wantErr)
			return
		}
		if wantErr == nil && !reflect.DeepEqual(got, want) {
			t.Errorf("%s of %q:\n got  %+v\n want %+v (encoding/json)", name, in, got, want)
		}
	}
	var l1, l2 lineShape
	e1, e2 := fastUnmarshal(in, &l1), json.Unmarshal(in, &l2)
	check("lineShape", l1, l2, e1, e2)
	var s1, s2 string
	e1, e2 = fastUnmarshal(in, &s1), json.Unmarshal(in, &s2)
	check("string", s1, s2, e1, e2)
	var p1, p2 []part
	e1, e2 = fastUnmarshal(in, &p1), json.Unmarshal(in, &p2)
	check("[]part", p1, p2, e1, e2)
}

// FuzzFastUnmarshal: the fast decoder reads what encoding/json reads.
func FuzzFastUnmarshal(f *testing.F) {
	for _, s := range fastCases {
		f.Add([]byte(s))
	}
	addAgentLines(f)
	f.Fuzz(func(t *testing.T, in []byte) { compareUnmarshal(t, in) })
}

// TestFastUnmarshalAgentLines: every line of the agents' recorded sessions
// reads as encoding/json reads it, and most take the fast path.
func TestFastUnmarshalAgentLines(t *testing.T) {
	files, _ := filepath.Glob(filepath.Join("testdata", "agents", "*.jsonl"))
	more, _ := filepath.Glob(filepath.Join("testdata", "agents", "*", "*.jsonl"))
	files = append(files, more...)
	if len(files) == 0 {
		t.Fatal("no agent fixtures")
	}
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for line := range strings.Lines(string(data)) {
			compareUnmarshal(t, []byte(strings.TrimSuffix(line, "\n")))
		}
	}
}

// TestFastPathTaken: the lines agents write most take the fast path (the
// comparison above holds either way).
func TestFastPathTaken(t *testing.T) {
	var r jsonReader
	var l lineShape
	for _, in := range []string{fastCases[0], fastCases[1], fastCases[2], `{"isMeta":null,"_command":true,"isCompactSummary":false}`, `{"content":null,"message":null,"id":5,"timestamp":null}`} {
		if !validJSON([]byte(in)) || !r.decodeShape([]byte(in), &l) {
			t.Errorf("%s: not on the fast path", in)
		}
	}
	if in := []byte(`[{"type":"text","text":"a\n"},null,{"type":"tool_use","input":{"a":[1,2.5e3,true,false,null]}}]`); !validJSON(in) {
		t.Error("parts: not valid")
	} else if _, ok := r.decodeParts(in); !ok {
		t.Error("parts: not on the fast path")
	}
	if _, _, ok := (*bigStrings)(nil).unquote([]byte(`"a\nb \u00e9 \"q\""`), 0); !ok {
		t.Error("string: not on the fast path")
	}
}

// TestClassifyClaudeCode: Claude Code's envelope is told without a decode,
// its inner message's role deciding.
func TestClassifyClaudeCode(t *testing.T) {
	for _, c := range []struct {
		line      string
		msg, sure bool
	}{
		{`{"parentUuid":null,"type":"user","message":{"role":"user","content":"fix it"},"uuid":"u","timestamp":"2026-01-15T10:00:00Z"}`, true, true},
		{`{"type":"assistant","message":{"id":"m","type":"message","role":"assistant","content":[{"type":"tool_use","id":"t","name":"Read","input":{"file_path":"/a"}}],"usage":{"input_tokens":3}},"uuid":"a"}`, true, true},
		{`{"type":"user","message":{"role":"user","content":[{"type":"tool_result","tool_use_id":"t","content":"x"}]},"toolUseResult":{"file":{"content":"x"}}}`, true, true},
		{`{"type":"user","message":{"content":"no role"}}`, true, true},
		{`{"type":"user","message":{"role":"user","content":"<command-name>/clear</command-name>"}}`, false, false},
		{`{"type":"user","message":{"role":"custom","content":"x"}}`, false, false},
		{`{"type":"user","message":{"role":"user","content":"x"},"isMeta":true}`, false, false},
	} {
		msg, sure := classify([]byte(c.line))
		if msg != c.msg || sure != c.sure {
			t.Errorf("classify(%s) = %v, %v; want %v, %v", c.line, msg, sure, c.msg, c.sure)
		}
	}
}

// FuzzValidJSON: the one-pass validation agrees with encoding/json (and
// UTF-8), but for nesting beyond maxFastDepth, which it leaves to go-json.
func FuzzValidJSON(f *testing.F) {
	for _, s := range fastCases {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		got, want := validJSON(in), json.Valid(in) && utf8.Valid(in)
		if got && !want || !got && want && depth(in) <= maxFastDepth {
			t.Errorf("validJSON(%q) = %v, encoding/json and UTF-8 say %v", in, got, want)
		}
		if _, ok := readKeys(in, true); ok && !json.Valid(in) {
			t.Errorf("readKeys(%q) took invalid JSON", in)
		}
	})
}

// depth is how deep brackets nest in b, strings left out.
func depth(b []byte) int {
	d, most, in := 0, 0, false
	for i := 0; i < len(b); i++ {
		switch c := b[i]; {
		case in && c == '\\':
			i++
		case c == '"':
			in = !in
		case !in && (c == '[' || c == '{'):
			d++
			most = max(most, d)
		case !in && (c == ']' || c == '}'):
			d--
		}
	}
	return most
}

// TestBigStringsKept: the validation keeps the long strings of a line
// with the end and the escapes a walk of each finds, and the reads that
// use them (valueEnd, unquote) answer as the walks do.
func TestBigStringsKept(t *testing.T) {
	kept := 0
	for _, in := range fastCases {
		b := []byte(in)
		var e bigStrings
		if !validJSONKeeping(b, &e) {
			continue
		}
		for _, s := range e.s[:e.n] {
			i := int(uintptr(unsafe.Pointer(s.at)) - uintptr(unsafe.Pointer(&b[0])))
			end, esc, ok := scanString(b, i)
			if !ok || s.n != end-i || s.esc != esc || s.n < bigStringMin {
				t.Errorf("%.40q: kept the string at %d as %d bytes (escapes %v); a walk says %d (%v, %v)", in, i, s.n, s.esc, end-i, esc, ok)
			}
			if got, want := valueEnd(b, i, &e), stringEnd(b, i); got != want {
				t.Errorf("%.40q: valueEnd of the kept string at %d = %d, want %d", in, i, got, want)
			}
			got, gotEnd, gotOK := e.unquote(b, i)
			want, wantEnd, wantOK := (*bigStrings)(nil).unquote(b, i)
			if got != want || gotEnd != wantEnd || gotOK != wantOK {
				t.Errorf("%.40q: unquote of the kept string at %d = %q, %d, %v; want %q, %d, %v", in, i, got, gotEnd, gotOK, want, wantEnd, wantOK)
			}
			kept++
		}
		if got, want := valueEnd(b, skipSpace(b, 0), &e), valueEnd(b, skipSpace(b, 0), nil); got != want {
			t.Errorf("%.40q: valueEnd of the line = %d with its strings kept, %d without", in, got, want)
		}
	}
	if kept < 6 {
		t.Errorf("kept %d long strings in the cases, want at least 6", kept)
	}
}
