package transcripts

import (
	"bytes"
	"encoding/json"
	"strings"
)

// Cline's CLI (cline 3.x on @cline/core, recorded with 3.0.65) keeps each
// session in ~/.cline/data/sessions/<id>/<id>.messages.json, written whole
// in place on every change, beside <id>.json (its manifest: prompt, model,
// status, no messages) and data/db/sessions.db (the list of sessions):
// {"version": 1, "updated_at", "agent", "sessionId", "origin", "messages":
// [{"id", "role": "user"|"assistant", "content": [{"type": "text", "text"} |
// {"type": "tool_use", "id", "name", "input"} | {"type": "tool_result",
// "tool_use_id", "name", "content": a string or a list} | {"type":
// "thinking"} | {"type": "image"}], "ts": epoch ms}], "system_prompt"}.
// What the user typed is wrapped in <user_input mode="act">…</user_input>
// (unwrapped here); tool results come back in a user message (a message
// of role tool here); the model's thinking and the system prompt are left
// out.
var clineCLI = &Document{Name: "cline", Messages: clineMessages}

// clineMessage is one message of a Cline session.
type clineMessage struct {
	Role    string          `json:"role"`
	Content json.RawMessage `json:"content"`
	TS      json.RawMessage `json:"ts"`
}

// clineBlock is one block of a message's content.
type clineBlock struct {
	Type    string          `json:"type"`
	Text    string          `json:"text"`
	Name    string          `json:"name"`
	Input   json.RawMessage `json:"input"`
	Content json.RawMessage `json:"content"`
	IsError bool            `json:"is_error"`
}

func clineMessages(doc []byte) (string, []map[string]any, bool) {
	var s struct {
		SessionID string          `json:"sessionId"`
		Messages  []clineMessage  `json:"messages"`
		Origin    json.RawMessage `json:"origin"`
	}
	if json.Unmarshal(doc, &s) != nil || s.SessionID == "" || s.Messages == nil || len(s.Origin) == 0 {
		return "", nil, false
	}
	var out []map[string]any
	for _, m := range s.Messages {
		if m.Role != "user" && m.Role != "assistant" {
			continue
		}
		var blocks []contentBlock
		var results []string
		var parts []clineBlock
		if json.Unmarshal(m.Content, &parts) != nil {
			// A string, as the SDK's message type also allows.
			var text string
			if json.Unmarshal(m.Content, &text) != nil {
				continue
			}
			parts = []clineBlock{{Type: "text", Text: text}}
		}
		for _, p := range parts {
			switch p.Type {
			case "text":
				text := p.Text
				if m.Role == "user" {
					text = unwrapUserInput(text)
				}
				if strings.TrimSpace(text) != "" {
					blocks = append(blocks, contentBlock{Type: "text", Text: text})
				}
			case "tool_use":
				in := p.Input
				if len(in) == 0 || !json.Valid(in) {
					in = json.RawMessage(`{}`)
				}
				blocks = append(blocks, contentBlock{Type: "tool_use", Name: p.Name, Input: in})
			case "tool_result":
				r := clineResult(p.Content)
				if p.IsError {
					r = "error: " + r
				}
				results = append(results, r)
			}
		}
		line := map[string]any{"role": m.Role}
		if ts := bytes.TrimSpace(m.TS); len(ts) > 0 && ts[0] >= '0' && ts[0] <= '9' {
			line["timestamp"] = json.RawMessage(ts)
		}
		if len(blocks) > 0 {
			line["content"] = blocks
			out = append(out, line)
		}
		if len(results) > 0 {
			t := map[string]any{"role": "tool", "content": strings.Join(results, "\n")}
			if ts, ok := line["timestamp"]; ok {
				t["timestamp"] = ts
			}
			out = append(out, t)
		}
	}
	return s.SessionID, out, true
}

// unwrapUserInput takes what the user typed out of the tag Cline wraps it
// in: <user_input mode="act">text</user_input>.
func unwrapUserInput(s string) string {
	t := strings.TrimSpace(s)
	if !strings.HasPrefix(t, "<user_input") || !strings.HasSuffix(t, "</user_input>") {
		return s
	}
	open := strings.IndexByte(t, '>')
	if open < 0 || open > len(t)-len("</user_input>") {
		return s
	}
	return t[open+1 : len(t)-len("</user_input>")]
}

// clineResult is a tool result's text: a string, or the text of each
// element of a list (text blocks; a command's {"query", "result",
// "success"}; anything else as compact JSON).
func clineResult(raw json.RawMessage) string {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return orNoOutput(s)
	}
	var items []json.RawMessage
	if json.Unmarshal(raw, &items) != nil {
		return orNoOutput(strings.TrimSpace(string(raw)))
	}
	var b []string
	for _, it := range items {
		var str string
		if json.Unmarshal(it, &str) == nil {
			b = append(b, str)
			continue
		}
		var o struct {
			Type    string          `json:"type"`
			Text    *string         `json:"text"`
			Result  *string         `json:"result"`
			Error   string          `json:"error"`
			Success *bool           `json:"success"`
			Query   json.RawMessage `json:"query"`
		}
		if json.Unmarshal(it, &o) != nil {
			continue
		}
		switch {
		case o.Type == "image":
		case o.Text != nil:
			b = append(b, *o.Text)
		case o.Result != nil:
			r := *o.Result
			if o.Success != nil && !*o.Success || o.Error != "" {
				r = strings.TrimSpace(r + "\nerror: " + o.Error)
			}
			b = append(b, r)
		default:
			var c bytes.Buffer
			if json.Compact(&c, it) == nil {
				b = append(b, c.String())
			}
		}
	}
	return orNoOutput(strings.TrimSpace(strings.Join(b, "\n")))
}

func orNoOutput(s string) string {
	if strings.TrimSpace(s) == "" {
		return "(no output)"
	}
	return s
}
