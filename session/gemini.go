package session

import (
	"encoding/json"
	"strings"
)

// Gemini CLI (@google/gemini-cli 0.3x to 0.61, tested with 0.61.0) keeps
// each chat in ~/.gemini/tmp/<project>/chats/session-<time>-<id>.jsonl,
// written by its ChatRecordingService (packages/core/src/services/
// chatRecordingService.ts):
//   - a first line with the session's metadata (sessionId, projectHash,
//     startTime, kind);
//   - message records {id, timestamp, type, content, toolCalls, thoughts,
//     tokens, model}: type "user" or "gemini" (the model), or "info",
//     "error", "warning" (the CLI's own notices); content is a string or a
//     list of parts ({text}, {functionCall}, {functionResponse});
//     toolCalls carry each call's name, args and result;
//   - a record is appended again, whole, each time it changes (its tokens
//     arrive, a tool call completes): the last record with an id is the
//     message, the earlier ones are superseded (Message.ID lets readers
//     keep one);
//   - {"$set": {...}} metadata updates and {"$rewindTo": id} rewinds.

// geminiTypes maps Gemini CLI's record types to roles; the CLI's notices
// are not conversation.
var geminiTypes = map[string]string{"user": "user", "gemini": "assistant", "info": "", "error": "", "warning": ""}

// geminiRecord is the part of a Gemini CLI message record that memwatch reads.
type geminiRecord struct {
	ToolCalls []struct {
		Name string          `json:"name"`
		Args json.RawMessage `json:"args"`
	} `json:"toolCalls"`
}

// isGemini reports a Gemini CLI message record: a type of its own, a
// string id, no role and no inner message.
func isGemini(l *lineShape) bool {
	_, known := geminiTypes[l.Type]
	_, isString := stringOf(l.EntryID)
	return known && isString && l.Role == "" && len(l.Message) == 0 && len(l.Payload) == 0 && l.UUID == ""
}

// decodeGemini decodes a Gemini CLI message record.
func decodeGemini(line []byte, l *lineShape, unmarshal func([]byte, any) error) Message {
	id, _ := stringOf(l.EntryID)
	m := Message{Role: geminiTypes[l.Type], Time: l.Timestamp.Time, ID: id}
	text, tools, results := geminiParts(l.Content, unmarshal)
	if results && m.Role == "user" {
		// Function responses sent back to the model: tool results.
		m.Role, text = "tool", toolResult(text)
	}
	var r geminiRecord
	_ = unmarshal(line, &r)
	// A call's result is not rendered here: Gemini CLI records it twice,
	// in the call (toolCalls[].result) and as the function response it
	// sends back (the next "user" record, a tool message here), and one
	// result is one message.
	for _, tc := range r.ToolCalls {
		tools = append(tools, tc.Name)
		text = joinText(text, toolCall(tc.Name, tc.Args))
	}
	m.Text, m.Tools = text, tools
	if m.Role == "" {
		m.Meta = true
	}
	return m
}

// geminiParts renders a PartListUnion: a string, a part, or a list of
// parts (text, function calls, function responses); results is true when
// it holds function responses and nothing else.
func geminiParts(raw json.RawMessage, unmarshal func([]byte, any) error) (text string, tools []string, results bool) {
	if len(raw) == 0 || string(raw) == "null" {
		return "", nil, false
	}
	var s string
	if unmarshal(raw, &s) == nil {
		return s, nil, false
	}
	type gpart struct {
		Text         string `json:"text"`
		Thought      bool   `json:"thought"`
		FunctionCall *struct {
			Name string          `json:"name"`
			Args json.RawMessage `json:"args"`
		} `json:"functionCall"`
		FunctionResponse *struct {
			Name     string          `json:"name"`
			Response json.RawMessage `json:"response"`
		} `json:"functionResponse"`
	}
	var parts []gpart
	if unmarshal(raw, &parts) != nil {
		var one gpart
		if unmarshal(raw, &one) != nil {
			return "", nil, false
		}
		parts = []gpart{one}
	}
	results = len(parts) > 0
	for _, p := range parts {
		results = results && p.FunctionResponse != nil
		switch {
		case p.Thought:
			// The model's private reasoning is not conversation content.
		case p.FunctionCall != nil:
			tools = append(tools, p.FunctionCall.Name)
			text = joinText(text, toolCall(p.FunctionCall.Name, p.FunctionCall.Args))
		case p.FunctionResponse != nil:
			var out struct {
				Output string `json:"output"`
				Error  string `json:"error"`
			}
			res := strings.TrimSpace(string(p.FunctionResponse.Response))
			if unmarshal(p.FunctionResponse.Response, &out) == nil && out.Output+out.Error != "" {
				res = joinText(out.Output, out.Error)
			}
			text = joinText(text, res)
		default:
			text = joinText(text, p.Text)
		}
	}
	return text, tools, results
}
