// Package session reads the conversation logs agents write (JSONL): one
// decoder for the shapes they use, so every layout sees the same messages.
package session

import (
	"encoding/json"
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
			Name string `json:"name"`
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
	Content json.RawMessage `json:"content"`
}

// Decode decodes one JSONL line. It never fails: a line it cannot
// decode comes back as a Raw message holding the text (made valid UTF-8), so
// nothing an agent wrote is dropped.
func Decode(line []byte) Message {
	var l lineShape
	if err := json.Unmarshal(line, &l); err != nil {
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
	text, tools := contentText(inner.Content)
	for _, tc := range inner.ToolCalls {
		tools = append(tools, tc.Function.Name)
		text = joinText(text, "[tool: "+tc.Function.Name+"]")
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

func contentText(raw json.RawMessage) (string, []string) {
	if len(raw) == 0 || string(raw) == "null" {
		return "", nil
	}
	var s string
	if err := json.Unmarshal(raw, &s); err == nil {
		return s, nil
	}
	var parts []part
	if err := json.Unmarshal(raw, &parts); err != nil {
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
			text = joinText(text, "[tool: "+p.Name+"]")
		case "tool_result":
			inner, _ := contentText(p.Content)
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
	m := Decode(line)
	return m.Role != "" && !m.Meta && !m.Raw
}
