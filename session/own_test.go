package session

import (
	"strings"
	"testing"
)

// TestOwnTrafficIsNotMemory: an agent's calls of memwatch's tools and
// what its recall tools return are not messages, in every spelling the
// agents use; a message that says something besides keeps that.
func TestOwnTrafficIsNotMemory(t *testing.T) {
	result := `Found 2 result(s) for: \"where do we deploy billing\"\n\n[1] Source: messages\n    Line: 2\n    Content: assistant: We deploy billing to staging first.\n    Citation: s1.jsonl#L2\n`
	show := `/home/a/.claude/projects/-home-a-src-billing/s1.jsonl (lines 2 to 2; the cited ones marked >)\n> L2: assistant: We deploy billing to staging first.\n`
	for _, tc := range []struct {
		name, line string
		want       string // "" when the line is no message
	}{
		{"claude code call", `{"type":"assistant","message":{"role":"assistant","content":[{"type":"tool_use","id":"toolu_1","name":"mcp__memwatch__recall_memory","input":{"query":"where do we deploy billing"}}]}}`, ""},
		{"claude code result", `{"type":"user","message":{"role":"user","content":[{"type":"tool_result","tool_use_id":"toolu_1","content":[{"type":"text","text":"` + result + `"}]}]}}`, ""},
		{"claude code show result", `{"type":"user","message":{"role":"user","content":[{"type":"tool_result","tool_use_id":"toolu_2","content":"` + show + `"}]}}`, ""},
		{"claude code call with words", `{"type":"assistant","message":{"role":"assistant","content":[{"type":"text","text":"Let me look that up."},{"type":"tool_use","id":"toolu_3","name":"mcp__memwatch__recall_show","input":{"citation":"s1.jsonl#L2"}}]}}`, "Let me look that up."},
		{"codex call", `{"timestamp":"2026-11-20T10:00:00Z","type":"response_item","payload":{"type":"function_call","name":"memwatch__recall_memory","arguments":"{\"query\":\"deploy billing\"}","call_id":"c1"}}`, ""},
		{"codex result", `{"timestamp":"2026-11-20T10:00:01Z","type":"response_item","payload":{"type":"function_call_output","call_id":"c1","output":"` + result + `"}}`, ""},
		{"openai tool_calls", `{"role":"assistant","content":null,"tool_calls":[{"function":{"name":"recall_memory","arguments":"{\"query\":\"x\"}"}}]}`, ""},
		{"another tool stays", `{"type":"assistant","message":{"role":"assistant","content":[{"type":"tool_use","id":"t","name":"Bash","input":{"command":"make deploy"}}]}}`, `[tool: Bash] {"command":"make deploy"}`},
		{"another memory server stays", `{"type":"assistant","message":{"role":"assistant","content":[{"type":"tool_use","id":"t","name":"mcp__notes__memory_read","input":{}}]}}`, `[tool: mcp__notes__memory_read]`},
	} {
		m := Decode([]byte(tc.line))
		msg := IsMessage([]byte(tc.line), false)
		if tc.want == "" {
			if msg || !m.Meta || strings.Contains(m.Text, "deploy") {
				t.Errorf("%s: a message (IsMessage %v, meta %v): %q", tc.name, msg, m.Meta, m.Text)
			}
			continue
		}
		if !msg || m.Text != tc.want {
			t.Errorf("%s: IsMessage %v, text %q, want %q", tc.name, msg, m.Text, tc.want)
		}
	}
}

// FuzzOwnResult: the quick look before the expression never changes its
// answer.
func FuzzOwnResult(f *testing.F) {
	for _, s := range []string{"Found 3 result(s) for: x\n1. a", "  Found 12 result(s) for: q", "Found x result(s) for: q", "notes/a.md (lines 1 to 9; the cited ones marked >)\n>  1 a",
		"a (lines 1 to 2; the cited ones marked >)", "a (lines 1 to 2; the cited ones marked >)x\n", "\n\tFound 1 result(s) for: \n", "plain output\nFound 1 result(s) for: x"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, text string) {
		if got, want := OwnResult(text), ownResult.MatchString(strings.TrimSpace(text)); got != want {
			t.Errorf("OwnResult(%q) = %v, the expression says %v", text, got, want)
		}
	})
}

// FuzzMayBeOwn: eight windows at a time answer as one at a time does,
// whatever the line's length and wherever a mark falls.
func FuzzMayBeOwn(f *testing.F) {
	for _, s := range []string{"", "memw", "xxxxxxxMEMWATCHxxxxxxxx", "recall_memory", "recall_show", "result(s) for", "marked >", "\\u0077", "aaaaaaaaaa\\u",
		"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa", `{"name":"mcp__MemWatch__x"}`, "Found 1 result(s) for: q", "ed >", "(S) ", "l_Sh", "\x08S\x09\x00"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, line []byte) {
		for i := range min(len(line), 9) {
			// Every alignment of the marks against the eight lanes.
			if got, want := mayBeOwn(line[i:]), mayBeOwnFrom(line[i:], 0); got != want {
				t.Errorf("mayBeOwn(%q) = %v, one window at a time says %v", line[i:], got, want)
			}
		}
	})
}

// TestMayBeOwnEveryPlace puts each mark at every offset of a line of
// every length up to 40: found wherever it is, and nothing found in the
// same line without it.
func TestMayBeOwnEveryPlace(t *testing.T) {
	for _, mark := range []string{"memw", "MEMW", "l_me", "L_SH", "(s) ", "ed >", "\\u", "\x08S\x09\x00"} {
		for n := len(mark); n <= 40; n++ {
			for at := 0; at+len(mark) <= n; at++ {
				line := []byte(strings.Repeat("a", n))
				if mayBeOwn(line) {
					t.Fatalf("mayBeOwn(%q) = true, want false", line)
				}
				copy(line[at:], mark)
				if !mayBeOwn(line) {
					t.Fatalf("mayBeOwn(%q) = false, want true", line)
				}
			}
		}
	}
}

func BenchmarkMayBeOwn(b *testing.B) {
	// A tool result's JSON: escapes, code, no mark.
	line := []byte(`{"type":"user","message":{"role":"user","content":[{"type":"tool_result","tool_use_id":"toolu_01","content":"     1\u2192package main\n     2\u2192\n     3\u2192import (\n     4\u2192\t\"fmt\"\n     5\u2192)\n     6\u2192\n     7\u2192func main() {\n     8\u2192\tfmt.Println(\"hello, world\") // a comment\n     9\u2192}\n"}]}}`)
	line = []byte(strings.ReplaceAll(string(line), `\u2192`, "→"))
	line = []byte(strings.Repeat(string(line[:len(line)-5]), 20))
	b.SetBytes(int64(len(line)))
	for b.Loop() {
		if mayBeOwn(line) {
			b.Fatal("a mark in the benchmark's line")
		}
	}
}
