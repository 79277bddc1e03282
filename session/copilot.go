package session

import (
	"encoding/json"
	"strings"
)

// GitHub Copilot CLI (@github/copilot 1.x, tested with 1.0.102) keeps each
// session in ~/.copilot/session-state/<session id>/events.jsonl, appended
// (O_APPEND) one event a line: {"type", "data", "id", "timestamp",
// "parentId"}. The conversation is in
//   - "user.message": data.content (what the user typed; transformedContent
//     is it with the harness's additions, left out);
//   - "assistant.message": data.content and data.toolRequests [{name,
//     arguments: an object, or a string}];
//   - "tool.execution_complete": data.result.content, or data.error when
//     data.success is false;
// and every other event is the harness's (session.start, session.resume,
// session.shutdown, assistant.turn_start, session.usage_record,
// tool.execution_start, system.message: the system prompt, ...). The
// session's database (~/.copilot/session-store.db) repeats the turns for
// its own search: not read.

// copilotRoles maps Copilot CLI's conversation events to roles.
var copilotRoles = map[string]string{"user.message": "user", "assistant.message": "assistant", "tool.execution_complete": "tool"}

// copilotEvent is the part of a Copilot CLI event that memwatch reads.
type copilotEvent struct {
	Data struct {
		Content      json.RawMessage `json:"content"`
		ToolRequests []struct {
			Name      string          `json:"name"`
			Arguments json.RawMessage `json:"arguments"`
		} `json:"toolRequests"`
		Success *bool `json:"success"`
		Result  struct {
			Content json.RawMessage `json:"content"`
		} `json:"result"`
		Error json.RawMessage `json:"error"`
	} `json:"data"`
}

// isCopilot reports a Copilot CLI event: a dotted type, a data object, no
// role and no inner message.
func isCopilot(l *lineShape) bool {
	return strings.Contains(l.Type, ".") && isObject(l.Data) && l.Role == "" && len(l.Message) == 0 && len(l.Payload) == 0
}

// decodeCopilot decodes a Copilot CLI event.
func decodeCopilot(line []byte, l *lineShape, unmarshal func([]byte, any) error) Message {
	m := Message{Role: copilotRoles[l.Type], Time: l.Timestamp.Time}
	m.ID, _ = stringOf(l.EntryID)
	if m.Role == "" {
		m.Meta = true
		return m
	}
	var e copilotEvent
	if err := unmarshal(line, &e); err != nil {
		return Message{Raw: true, Text: strings.ToValidUTF8(string(line), "\uFFFD")}
	}
	switch m.Role {
	case "tool":
		text, _ := contentText(e.Data.Result.Content, unmarshal)
		if e.Data.Success != nil && !*e.Data.Success {
			text = joinText(text, "error: "+errorText(e.Data.Error, unmarshal))
		}
		m.Text = toolResult(strings.TrimSpace(text))
	default:
		m.Text, m.Tools = contentText(e.Data.Content, unmarshal)
		for _, r := range e.Data.ToolRequests {
			m.Tools = append(m.Tools, r.Name)
			m.Text = joinText(m.Text, toolCall(r.Name, argText(r.Arguments)))
		}
	}
	m.Text = strings.ToValidUTF8(m.Text, "\uFFFD")
	return m
}

// errorText is a failed tool's error: a string, or an object's message.
func errorText(raw json.RawMessage, unmarshal func([]byte, any) error) string {
	var s string
	if unmarshal(raw, &s) == nil {
		return s
	}
	var e struct {
		Message string `json:"message"`
	}
	if unmarshal(raw, &e) == nil && e.Message != "" {
		return e.Message
	}
	return string(raw)
}
