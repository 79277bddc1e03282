// Package session reads the conversation logs agents write (JSONL): one
// decoder for the shapes they use, so every layout sees the same messages.
package session

import (
	"bytes"
	"encoding/json"

	gojson "github.com/goccy/go-json"
	"strings"
	"time"
	"unicode/utf8"
)

// Message is one decoded line of a conversation log.
type Message struct {
	Role  string    `json:"role"`            // user, assistant, system, tool; "" for metadata or raw lines
	Text  string    `json:"text"`            // the text, tool calls rendered as [tool: name]
	Tools []string  `json:"tools,omitempty"` // tools used in this message
	Time  time.Time `json:"time,omitzero"`
	// Raw is true when the line could not be decoded; Text then holds it as is.
	Raw bool `json:"raw,omitempty"`
	// Meta is true for lines that carry no message (session metadata, summaries).
	Meta bool `json:"meta,omitempty"`
}

// lineShape covers the shapes agents really write: {"role","content"},
// OpenAI chat messages and Claude Code transcript lines.
type lineShape struct {
	Type      string          `json:"type"`
	Role      string          `json:"role"`
	Content   json.RawMessage `json:"content"`
	Message   *lineShape      `json:"message"`
	Timestamp string          `json:"timestamp"`
	CreatedAt string          `json:"createdAt"`
	ToolCalls []struct {
		Function struct {
			Name      string `json:"name"`
			Arguments string `json:"arguments"`
		} `json:"function"`
	} `json:"tool_calls"`
	Name      string   `json:"name"`
	ToolsUsed []string `json:"toolsUsed"`
	Summary   string   `json:"summary"`
}

type part struct {
	Type    string          `json:"type"`
	Text    string          `json:"text"`
	Name    string          `json:"name"`
	Input   json.RawMessage `json:"input"`
	Content json.RawMessage `json:"content"`
}

// maxToolInput bounds how much of a tool call's input goes into a
// message's text (a file written by a tool can be long).
const maxToolInput = 4000

// toolCall renders a tool call with its input, so what a tool was asked
// to do (the command run, the pattern searched) is part of the text.
func toolCall(name string, input []byte) string {
	s := "[tool: " + name + "]"
	in := strings.TrimSpace(string(input))
	if in == "" || in == "null" || in == "{}" {
		return s
	}
	var compact bytes.Buffer
	if json.Compact(&compact, []byte(in)) == nil {
		in = compact.String()
	}
	if len(in) > maxToolInput {
		in = strings.ToValidUTF8(in[:maxToolInput], "") + "…"
	}
	return s + " " + in
}

// Decode decodes one JSONL line. It never fails: a line it cannot
// decode comes back as a Raw message holding the text (made valid UTF-8), so
// nothing an agent wrote is dropped.
func Decode(line []byte) Message { return decode(line, gojson.Unmarshal) }

// decode decodes with unmarshal: github.com/goccy/go-json, three times as
// fast as encoding/json on these lines (capture and indexing decode every
// line); a fuzz target checks the two agree.
func decode(line []byte, unmarshal func([]byte, any) error) Message {
	var l lineShape
	if err := unmarshal(line, &l); err != nil {
		return Message{Raw: true, Text: strings.ToValidUTF8(string(line), "\uFFFD")}
	}
	ts := l.Timestamp
	inner := &l
	if l.Message != nil { // Claude Code: {"type":"user","message":{...}}
		inner = l.Message
		if inner.Role == "" {
			inner.Role = l.Type
		}
	}
	m := Message{Role: inner.Role}
	if t, err := time.Parse(time.RFC3339Nano, ts); err == nil {
		m.Time = t
	}
	text, tools := contentText(inner.Content, unmarshal)
	for _, tc := range inner.ToolCalls {
		tools = append(tools, tc.Function.Name)
		text = joinText(text, toolCall(tc.Function.Name, []byte(tc.Function.Arguments)))
	}
	m.Tools = append(tools, inner.ToolsUsed...)
	m.Text = text
	if m.Role == "" {
		switch {
		case l.Summary != "":
			m.Meta, m.Text = true, l.Summary
		case l.Type != "" || l.CreatedAt != "":
			m.Meta = true
		default:
			// Valid JSON of a shape we do not know: keep it whole.
			m.Raw, m.Text = true, strings.ToValidUTF8(string(line), "\uFFFD")
		}
	}
	if !utf8.ValidString(m.Text) {
		m.Text = strings.ToValidUTF8(m.Text, "\uFFFD")
	}
	return m
}

func contentText(raw json.RawMessage, unmarshal func([]byte, any) error) (string, []string) {
	if len(raw) == 0 || string(raw) == "null" {
		return "", nil
	}
	var s string
	if err := unmarshal(raw, &s); err == nil {
		return s, nil
	}
	var parts []part
	if err := unmarshal(raw, &parts); err != nil {
		return string(raw), nil
	}
	var text string
	var tools []string
	for _, p := range parts {
		switch p.Type {
		case "text", "input_text", "output_text", "":
			text = joinText(text, p.Text)
		case "tool_use":
			tools = append(tools, p.Name)
			text = joinText(text, toolCall(p.Name, p.Input))
		case "tool_result":
			inner, _ := contentText(p.Content, unmarshal)
			text = joinText(text, "[tool result] "+inner)
		case "thinking":
			// The model's private reasoning is not conversation content.
		default:
			if p.Text != "" {
				text = joinText(text, p.Text)
			}
		}
	}
	return text, tools
}

func joinText(a, b string) string {
	switch {
	case b == "":
		return a
	case a == "":
		return b
	}
	return a + "\n" + b
}

// IsMessage reports whether a log line is a conversation message, as
// opposed to metadata, agent state or an invalid line: only messages
// count in windows and identify a log's content. A line cut short (cut),
// which no longer parses, is a message when its start names a role.
func IsMessage(line []byte, cut bool) bool {
	if cut {
		head := line[:min(len(line), 4096)]
		for _, p := range []string{`"role":"user"`, `"role":"assistant"`, `"role": "user"`, `"role": "assistant"`, `"type":"user"`, `"type":"assistant"`} {
			if strings.Contains(string(head), p) {
				return true
			}
		}
		return false
	}
	if msg, sure := classify(line); sure && json.Valid(line) {
		return msg
	}
	m := Decode(line)
	return m.Role != "" && !m.Meta && !m.Raw
}

// classify reads the top-level keys of a JSON object line without decoding
// it: whether it names a role (or a Claude Code message type) that makes it
// a conversation message. sure is false when the line needs a real decode
// to tell (an unusual shape, invalid JSON).
func classify(line []byte) (msg, sure bool) {
	i := skipSpace(line, 0)
	if i >= len(line) || line[i] != '{' {
		return false, false
	}
	var role, typ string
	hasMessage := false
	i++
	for {
		i = skipSpace(line, i)
		if i < len(line) && line[i] == '}' {
			break
		}
		key, j, ok := readString(line, i)
		if !ok {
			return false, false
		}
		j = skipSpace(line, j)
		if j >= len(line) || line[j] != ':' {
			return false, false
		}
		j = skipSpace(line, j+1)
		if foldsToKnownKey(key) {
			return false, false // encoding/json matches keys without case
		}
		switch key {
		case "role", "type":
			v, k, ok := readString(line, j)
			if !ok {
				return false, false
			}
			if key == "role" {
				role = v
			} else {
				typ = v
			}
			j = k
		case "message":
			hasMessage = true
			fallthrough
		default:
			k, ok := skipValue(line, j)
			if !ok {
				return false, false
			}
			j = k
		}
		j = skipSpace(line, j)
		if j < len(line) && line[j] == ',' {
			i = j + 1
			continue
		}
		if j < len(line) && line[j] == '}' {
			break
		}
		return false, false
	}
	switch {
	case role == "user" || role == "assistant" || role == "system" || role == "tool":
		return true, true
	case hasMessage && (typ == "user" || typ == "assistant"):
		return false, false // Claude Code: the inner message decides (it may be empty)
	case role == "" && !hasMessage:
		return false, true // metadata, state, summaries: no role
	}
	return false, false
}

// foldsToKnownKey reports a key that encoding/json would take for role,
// type or message without being spelled so (other case, or non-ASCII bytes
// that its folding may map onto ASCII).
func foldsToKnownKey(key string) bool {
	switch key {
	case "role", "type", "message":
		return false
	}
	for i := 0; i < len(key); i++ {
		if key[i] >= 0x80 {
			return true
		}
	}
	return strings.EqualFold(key, "role") || strings.EqualFold(key, "type") || strings.EqualFold(key, "message")
}

func skipSpace(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\r' || b[i] == '\n') {
		i++
	}
	return i
}

// readString reads a JSON string without escapes of interest (keys and
// role values); one with escapes is not sure.
func readString(b []byte, i int) (string, int, bool) {
	if i >= len(b) || b[i] != '"' {
		return "", i, false
	}
	for j := i + 1; j < len(b); j++ {
		switch b[j] {
		case '\\':
			return "", j, false
		case '"':
			return string(b[i+1 : j]), j + 1, true
		}
	}
	return "", i, false
}

// skipValue skips one JSON value (not validating it deeply).
func skipValue(b []byte, i int) (int, bool) {
	if i >= len(b) {
		return i, false
	}
	switch b[i] {
	case '"':
		for j := i + 1; j < len(b); j++ {
			switch b[j] {
			case '\\':
				j++
			case '"':
				return j + 1, true
			}
		}
		return i, false
	case '{', '[':
		depth := 0
		for j := i; j < len(b); j++ {
			switch b[j] {
			case '"':
				k, ok := skipValue(b, j)
				if !ok {
					return i, false
				}
				j = k - 1
			case '{', '[':
				depth++
			case '}', ']':
				depth--
				if depth == 0 {
					return j + 1, true
				}
			}
		}
		return i, false
	}
	j := i
	for j < len(b) && b[j] != ',' && b[j] != '}' && b[j] != ']' && b[j] != ' ' && b[j] != '\n' {
		j++
	}
	return j, j > i
}
