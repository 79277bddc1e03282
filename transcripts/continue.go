package transcripts

import (
	"encoding/json"
	"strings"
)

// Continue's CLI (cn, @continuedev/cli 1.x) keeps each session in
// ~/.continue/sessions/<session id>.json, written whole (O_TRUNC, in
// place) on every change, beside sessions.json (a list of the sessions,
// no messages): {"sessionId", "title", "workspaceDirectory", "history":
// [{"message": {"role": "user"|"assistant"|"thinking"|"tool", "content":
// a string or [{"type": "text", "text"} | {"type": "imageUrl", ...}],
// "toolCalls": [{"id", "function": {"name", "arguments": a JSON string}}]},
// "contextItems", "editorState", "toolCallStates": [{"toolCallId",
// "status", "output": [{"content", "name"}]}], "conversationSummary"}],
// "usage"} (continuedev/continue: core's ChatHistoryItem, extensions/cli
// src/session.ts). A compaction replaces the history with one assistant
// message holding the summary (conversationSummary): the agent talking to
// itself about what the records already hold, left out, as is the model's
// "thinking". A message's tools' results (toolCallStates) follow it as a
// message of role tool. The history carries no times.
var continueCLI = &Document{Name: "continue-cli", Messages: continueMessages}

// cnItem is one element of a session's history.
type cnItem struct {
	Message struct {
		Role      string          `json:"role"`
		Content   json.RawMessage `json:"content"`
		ToolCalls []struct {
			Function struct {
				Name      string `json:"name"`
				Arguments string `json:"arguments"`
			} `json:"function"`
		} `json:"toolCalls"`
	} `json:"message"`
	ToolCallStates []struct {
		Status string `json:"status"`
		Output []struct {
			Content string `json:"content"`
		} `json:"output"`
	} `json:"toolCallStates"`
	ConversationSummary *string `json:"conversationSummary"`
}

func continueMessages(doc []byte) (string, []map[string]any, bool) {
	var s struct {
		SessionID string   `json:"sessionId"`
		History   []cnItem `json:"history"`
	}
	if json.Unmarshal(doc, &s) != nil || s.SessionID == "" || s.History == nil {
		return "", nil, false
	}
	var out []map[string]any
	for _, it := range s.History {
		m := it.Message
		if it.ConversationSummary != nil || m.Role == "thinking" || m.Role == "system" || m.Role == "" {
			continue
		}
		var blocks []contentBlock
		if text := cnText(m.Content); strings.TrimSpace(text) != "" {
			blocks = append(blocks, contentBlock{Type: "text", Text: text})
		}
		for _, c := range m.ToolCalls {
			in := json.RawMessage(`{}`)
			if v, ok := jsonString(c.Function.Arguments); ok {
				in = v
			}
			blocks = append(blocks, contentBlock{Type: "tool_use", Name: c.Function.Name, Input: in})
		}
		line := map[string]any{"role": m.Role, "content": blocks}
		if m.Role == "tool" || len(blocks) == 0 {
			line["content"] = cnText(m.Content)
		}
		out = append(out, line)
		var results []string
		for _, st := range it.ToolCallStates {
			for _, o := range st.Output {
				switch {
				case st.Status == "errored":
					results = append(results, "error: "+o.Content)
				case o.Content != "":
					results = append(results, o.Content)
				}
			}
		}
		if len(it.ToolCallStates) > 0 {
			if len(results) == 0 {
				results = []string{"(no output)"}
			}
			out = append(out, map[string]any{"role": "tool", "content": strings.Join(results, "\n")})
		}
	}
	return s.SessionID, out, true
}

// cnText is a message's text: its content string, or its text parts.
func cnText(raw json.RawMessage) string {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s
	}
	var parts []struct {
		Type string `json:"type"`
		Text string `json:"text"`
	}
	if json.Unmarshal(raw, &parts) != nil {
		return ""
	}
	var b []string
	for _, p := range parts {
		if p.Type == "text" && p.Text != "" {
			b = append(b, p.Text)
		}
	}
	return strings.Join(b, "\n")
}
