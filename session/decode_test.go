package session

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"
	"unicode/utf8"
)

func TestDecode(t *testing.T) {
	tests := []struct {
		name, line string
		want       Message
	}{
		{"plain", `{"role":"user","content":"hello"}`, Message{Role: "user", Text: "hello"}},
		{"parts", `{"role":"assistant","content":[{"type":"text","text":"a"},{"type":"tool_use","name":"Read","input":{}}]}`,
			Message{Role: "assistant", Text: "a\n[tool: Read]", Tools: []string{"Read"}}},
		{"tool result", `{"role":"user","content":[{"type":"tool_result","content":[{"type":"text","text":"ok"}]}]}`,
			Message{Role: "user", Text: "[tool result] ok"}},
		{"openai tool calls", `{"role":"assistant","content":null,"tool_calls":[{"id":"1","type":"function","function":{"name":"grep","arguments":"{}"}}]}`,
			Message{Role: "assistant", Text: "[tool: grep]", Tools: []string{"grep"}}},
		{"claude code", `{"type":"user","message":{"role":"user","content":"fix it"},"timestamp":"2026-02-27T14:30:00.000Z","uuid":"x"}`,
			Message{Role: "user", Text: "fix it"}},
		{"metadata", `{"type":"metadata","createdAt":"2026-02-27T14:30:00Z"}`, Message{Meta: true}},
		{"broken json", `{"role":"user","content":"unterminated`, Message{Raw: true, Text: `{"role":"user","content":"unterminated`}},
		{"unknown shape", `[1,2,3]`, Message{Raw: true, Text: `[1,2,3]`}},
		{"tools used", `{"role":"assistant","content":"done","toolsUsed":["Edit"]}`, Message{Role: "assistant", Text: "done", Tools: []string{"Edit"}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := Decode([]byte(tt.line))
			got.Time = got.Time.UTC()
			if got.Role != tt.want.Role || got.Text != tt.want.Text || got.Raw != tt.want.Raw || got.Meta != tt.want.Meta ||
				strings.Join(got.Tools, ",") != strings.Join(tt.want.Tools, ",") {
				t.Errorf("Decode(%s)\n got  %+v\n want %+v", tt.line, got, tt.want)
			}
		})
	}
	if m := Decode([]byte(`{"type":"user","message":{"role":"user","content":"x"},"timestamp":"2026-02-27T14:30:00.000Z"}`)); m.Time.IsZero() {
		t.Error("Claude Code timestamp not decoded")
	}
}

func FuzzDecode(f *testing.F) {
	addAgentLines(f)
	for _, s := range []string{`{"role":"user","content":"hi"}`, `{"type":"assistant","message":{"content":[{"type":"text","text":"x"}]}}`, "\xff\xfe", `{"content":[{"type":"tool_result","content":"r"}]}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, line []byte) {
		m := Decode(line)
		if !utf8.ValidString(m.Text) {
			t.Errorf("invalid UTF-8 in decoded text %q", m.Text)
		}
		if m.Role == "" && !m.Raw && !m.Meta {
			t.Errorf("line %q decoded to nothing: %+v", line, m)
		}
	})
}

// FuzzDecodeLikeTheStandardLibrary: the fast JSON decoder reads every line
// as encoding/json does.
func FuzzDecodeLikeTheStandardLibrary(f *testing.F) {
	addAgentLines(f)
	for _, s := range []string{`{"role":"user","content":"hi"}`, `{"type":"assistant","message":{"content":[{"type":"text","text":"x"}]}}`, "\xff\xfe", `{"content":[{"type":"tool_result","content":"r"}]}`,
		`{"role":"assistant","content":[{"type":"tool_use","name":"Bash","input":{"command":"ls"}}]}`, `{"ROLE":"user","Content":"x"}`, `{"role":"user","content":"caf\u00e9 \ud800"}`, `{"role":"user","role":"tool"}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, line []byte) {
		got, want := Decode(line), decode(line, json.Unmarshal, nil)
		if !reflect.DeepEqual(got, want) {
			t.Errorf("Decode(%q)\n got  %+v\n want %+v (encoding/json)", line, got, want)
		}
	})
}

// FuzzIsMessage: the fast classifier never disagrees with a full decode.
func FuzzIsMessage(f *testing.F) {
	addAgentLines(f)
	for _, s := range []string{`{"role":"user","content":"hi"}`, `{"_type":"metadata","updated_at":"x"}`, `{"type":"user","message":{"role":"user","content":"x"}}`,
		`{"type":"summary","summary":"s"}`, `{"role":"assistant","content":[{"type":"text","text":"a"}]}`, `{"role":"us\"er"}`, `[1]`, `{"a":{"role":"user"}}`, `{"role":"user"`,
		// Claude Code's envelope told without a decode, and what must not be.
		`{"type":"assistant","message":{"role":"assistant","content":[{"type":"text","text":"a"}]}}`, `{"type":"user","message":{},"uuid":0}`, `{"role":"user","uuid":0}`,
		`{"type":"user","message":{"role":"custom"}}`, `{"type":"user","message":{"role":"user","content":"<command-name>/x</command-name>"}}`,
		`{"type":"assistant","message":{"Role":"user"}}`, `{"type":"user","message":{"role":"user"},"UUID":5}`, `{"type":"user","message":{"role":"user","name":1}}`,
		`{"type":"user","message":{"role":"user"},"toolsUsed":["a"]}`, `{"type":"user","message":{"role":"user"},"isMeta":null}`,
		// The inner message told without a decode.
		`{"role":"user","message":{"role":"custom"}}`, `{"type":"assistant","message":{"type":"message","role":"assistant","content":[],"usage":{"input_tokens":1},"stop_reason":null}}`,
		`{"type":"user","message":{"role":"user","parts":[{"text":"x"}]}}`, `{"type":"user","message":{"role":"user","isMeta":"x"}}`, `{"type":"user","message":"hi"}`,
		`{"type":"user","message":{"role":"toolResult","content":"x"}}`, `{"type":"user","message":{"content":"x"}}`, `{"type":"x","message":{"content":"x"}}`,
		`{"type":"user","message":{"role":"user","content":"a"},"message":null}`, `{"type":"user","message":{"role":"user","name":"n","tool_calls":[]}}`,
		// memwatch's own tools as agents may spell them: any case, escaped.
		`{"role":"assistant","content":[{"type":"tool_use","name":"mcp__MemWatch__memory_list","input":{}}]}`,
		`{"role":"assistant","content":[{"type":"tool_use","name":"RECALL_MEMORY","input":{}}]}`,
		`{"role":"assistant","content":[{"type":"tool_use","name":"mcp__mem\u0077atch__memory_list","input":{}}]}`,
		`{"role":"tool","content":"Found 2 result(s) for: x"}`, `{"role":"tool","content":"a (lines 1 to 2; the cited ones marked \u003e)\nb"}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, line []byte) {
		m := Decode(line)
		want := m.Role != "" && !m.Meta && !m.Raw
		if got := IsMessage(line, false); got != want {
			t.Errorf("IsMessage(%q) = %v, a full decode says %v (%+v)", line, got, want, m)
		}
	})
}

func BenchmarkDecode(b *testing.B) {
	lines := [][]byte{
		[]byte(`{"role":"user","content":[{"type":"text","text":"the build failed because the migration script used an old schema, step 12 of the deploy; ok ok ok ok"}],"timestamp":"2026-01-15T10:00:00Z"}`),
		[]byte(`{"role":"assistant","content":[{"type":"tool_use","name":"Bash","input":{"command":"kubectl rollout status deploy/web-3"}}],"timestamp":"2026-01-15T10:00:00Z"}`),
		[]byte(`{"type":"user","message":{"role":"user","content":"please fix the failing test in handler_test.go"},"timestamp":"2026-01-15T10:00:00Z","uuid":"0f1e","cwd":"/src"}`),
	}
	var n int64
	for _, l := range lines {
		n += int64(len(l))
	}
	b.SetBytes(n)
	for b.Loop() {
		for _, l := range lines {
			Decode(l)
		}
	}
}

var updateGolden = flag.Bool("update", false, "rewrite testdata/agents/*.golden")

// TestAgentFormats decodes a session of each agent in its real format (see
// testdata/agents/SOURCES.md): the files written by hand to each format and
// the last turn of each recording made with the real program. Each line's
// reading (role or meta, time, tools and text) is compared with the golden
// file.
func TestAgentFormats(t *testing.T) {
	// Naive timestamps (nanobot) are local time: the golden files are in UTC.
	local := time.Local
	time.Local = time.UTC
	t.Cleanup(func() { time.Local = local })
	files, _ := filepath.Glob(filepath.Join("testdata", "agents", "*.jsonl"))
	recorded, _ := filepath.Glob(filepath.Join("testdata", "agents", "*", "where"))
	if len(files) < 4 || len(recorded) < 5 {
		t.Fatalf("fixtures: got %v and recordings %v", files, recorded)
	}
	for _, w := range recorded {
		files = append(files, filepath.Dir(w))
	}
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			lines := agentLines(t, f)
			if lines == nil {
				t.Skip("a database's rows or JSON documents: transcripts.TestRecordedDatabases and TestRecordedDocuments read them")
			}
			var b strings.Builder
			for i, line := range lines {
				m := Decode(line)
				kind := m.Role
				switch {
				case m.Raw:
					kind = "RAW"
				case m.Meta:
					kind = "meta"
				}
				when := "-"
				if !m.Time.IsZero() {
					when = m.Time.UTC().Format(time.RFC3339)
				}
				fmt.Fprintf(&b, "L%d %s %s %v message=%v: %q\n", i+1, kind, when, m.Tools, IsMessage(line, false), m.Text)
			}
			golden := strings.TrimSuffix(f, ".jsonl") + ".golden"
			if filepath.Ext(f) != ".jsonl" {
				golden = filepath.Join(f, "golden")
			}
			if *updateGolden {
				os.WriteFile(golden, []byte(b.String()), 0o644)
			}
			want, err := os.ReadFile(golden)
			if err != nil {
				t.Fatal(err)
			}
			if got := b.String(); got != string(want) {
				t.Errorf("got\n%s\nwant\n%s", got, want)
			}
		})
	}
}

// agentLines is a fixture's lines: a JSONL file's, or a recording's last
// turn (its session file, or the event of each of its database rows).
func agentLines(tb testing.TB, path string) [][]byte {
	tb.Helper()
	if filepath.Ext(path) == ".jsonl" {
		data, err := os.ReadFile(path)
		if err != nil {
			tb.Fatal(err)
		}
		return bytes.Split(bytes.TrimRight(data, "\n"), []byte("\n"))
	}
	if ms, _ := filepath.Glob(filepath.Join(path, "turn-*.tables.jsonl")); len(ms) > 0 {
		return nil // a database's rows: the transcripts package reads and checks them
	}
	if ms, _ := filepath.Glob(filepath.Join(path, "turn-*.json")); len(ms) > 0 {
		return nil // JSON documents: the transcripts package reads and checks them
	}
	for n := 9; n > 0; n-- {
		data, err := os.ReadFile(filepath.Join(path, fmt.Sprintf("turn-%d.jsonl", n)))
		if err == nil {
			return withRemoved(tb, path, n, bytes.Split(bytes.TrimRight(data, "\n"), []byte("\n")))
		}
		data, err = os.ReadFile(filepath.Join(path, fmt.Sprintf("turn-%d.rows.jsonl", n)))
		if err != nil {
			continue
		}
		var lines [][]byte
		for row := range bytes.SplitSeq(bytes.TrimRight(data, "\n"), []byte("\n")) {
			var r struct {
				EventJSON string `json:"event_json"`
			}
			if err := json.Unmarshal(row, &r); err != nil {
				tb.Fatalf("%s turn %d: %v", path, n, err)
			}
			lines = append(lines, []byte(r.EventJSON))
		}
		return lines
	}
	tb.Fatalf("%s: no turn-N.jsonl or turn-N.rows.jsonl", path)
	return nil
}

// withRemoved puts before the lines of a recording's last turn the
// messages an earlier turn held that the agent has since removed (nanobot's
// /new clears its session), so each message the agent wrote is read once.
func withRemoved(tb testing.TB, path string, last int, lines [][]byte) [][]byte {
	tb.Helper()
	kept := map[string]bool{}
	for _, l := range lines {
		kept[string(l)] = true
	}
	var removed [][]byte
	for n := 1; n < last; n++ {
		data, err := os.ReadFile(filepath.Join(path, fmt.Sprintf("turn-%d.jsonl", n)))
		if err != nil {
			tb.Fatal(err)
		}
		for l := range bytes.SplitSeq(bytes.TrimRight(data, "\n"), []byte("\n")) {
			if !kept[string(l)] && IsMessage(l, false) {
				kept[string(l)] = true
				removed = append(removed, l)
			}
		}
	}
	return append(removed, lines...)
}

// addAgentLines seeds a fuzz target with every line of the agent fixtures.
func addAgentLines(f *testing.F) {
	files, _ := filepath.Glob(filepath.Join("testdata", "agents", "*.jsonl"))
	recorded, _ := filepath.Glob(filepath.Join("testdata", "agents", "*", "where"))
	for _, w := range recorded {
		files = append(files, filepath.Dir(w))
	}
	for _, p := range files {
		for _, line := range agentLines(f, p) {
			if len(line) > 0 {
				f.Add(line)
			}
		}
	}
}

// FuzzStringEnd: the end of a string found by its quotes and the runs
// of backslashes before them is where a walk of its bytes ends it.
func FuzzStringEnd(f *testing.F) {
	for _, s := range []string{`"abc"`, `"a\"b"`, `"a\\"b`, `"a\\\"b"c`, `"\\\\"`, `"unterminated\"`, `"`, `{"a":"b\"}"}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		if len(b) == 0 || b[0] != '"' {
			return
		}
		want := len(b) // unterminated: the end of the input
		for j := 1; j < len(b); j++ {
			if b[j] == '\\' {
				j++
				continue
			}
			if b[j] == '"' {
				want = j + 1
				break
			}
		}
		if got := stringEnd(b, 0); got != want {
			t.Errorf("stringEnd(%q) = %d; a walk of its bytes says %d", b, got, want)
		}
	})
}
