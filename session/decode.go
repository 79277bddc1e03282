// Package session reads the conversation logs agents write (JSONL): one
// decoder for the shapes they use, so every layout sees the same messages.
package session

import (
	"bytes"
	"encoding/json"

	"slices"
	"strconv"
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
	// ID and Parent place the message in the conversation's tree, for
	// agents that write one (Claude Code's uuid/parentUuid, OpenClaw's
	// id/parentId): a rewind starts a new branch from an earlier message,
	// and the file keeps the abandoned one.
	ID     string `json:"id,omitempty"`
	Parent string `json:"parent,omitempty"`
	// RewindTo, on a meta line, abandons the message with this ID and
	// every message after it (Gemini CLI's {"$rewindTo": id}).
	RewindTo string `json:"rewind_to,omitempty"`
}

// lineShape covers the shapes agents really write, with one field map per
// agent rather than a parser per agent. Upstream definitions:
//   - {"role","content"} and OpenAI chat messages with tool_calls: memory-history's
//     agent, nanobot (nanobot/session/manager.py: a "_type":"metadata" first
//     line, naive ISO timestamps);
//   - Claude Code transcripts (~/.claude/projects/<cwd>/<session>.jsonl):
//     {"type":"user"|"assistant","message":{role,content[text|tool_use|
//     tool_result|thinking]},"timestamp"}, plus summary, system,
//     queue-operation, attachment, last-prompt and file-history-snapshot
//     lines; isMeta marks command caveats, isCompactSummary the summary
//     that replaces a compacted conversation;
//   - OpenClaw (pi-coding-agent's session-manager.ts): {"type":"message",
//     "message":{role: user|assistant|toolResult, content[text|toolCall|
//     thinking], timestamp: epoch ms}} and session/model_change/custom lines;
//   - Codex CLI rollouts (codex-rs/protocol/src/protocol.rs RolloutLine,
//     models.rs ResponseItem): {"timestamp","type":"response_item",
//     "payload":{type: message|function_call|function_call_output|
//     custom_tool_call|custom_tool_call_output|local_shell_call|reasoning}};
//     session_meta, turn_context, event_msg and compacted lines are meta
//     (event_msg repeats what response_item lines hold), and so are the
//     harness's developer messages;
//   - Gemini CLI (gemini.go) and GitHub Copilot CLI (copilot.go), a file
//     each;
//   - Qwen Code (0.24, ~/.qwen/projects/<cwd>/chats/<session>.jsonl,
//     recorded): Claude Code's envelope (type user|assistant|tool_result|
//     system, uuid, parentUuid) around Gemini API content ({"role":
//     "user"|"model","parts":[text|functionCall|functionResponse]}).
type lineShape struct {
	Type      string          `json:"type"`
	Role      string          `json:"role"`
	Content   json.RawMessage `json:"content"`
	Parts     json.RawMessage `json:"parts"`   // Qwen Code: Gemini API parts inside a Claude Code-like envelope
	Message   json.RawMessage `json:"message"` // an object (Claude Code, OpenClaw) or a string (Codex events)
	Payload   json.RawMessage `json:"payload"`
	Data      json.RawMessage `json:"data"` // Copilot CLI's events: copilot.go
	Timestamp stamp           `json:"timestamp"`
	CreatedAt json.RawMessage `json:"createdAt"`
	ToolCalls []struct {
		Function struct {
			Name      string          `json:"name"`
			Arguments json.RawMessage `json:"arguments"`
		} `json:"function"`
	} `json:"tool_calls"`
	Name      string          `json:"name"`
	ToolsUsed []string        `json:"toolsUsed"`
	Summary   json.RawMessage `json:"summary"` // a string (Claude Code), an array (Codex reasoning)
	MetaType  string          `json:"_type"`
	UUID      string          `json:"uuid"`
	ParentUID string          `json:"parentUuid"`
	EntryID   json.RawMessage `json:"id"`
	ParentID  string          `json:"parentId"`
	IsMeta    bool            `json:"isMeta"`
	Command   bool            `json:"_command"` // nanobot: a slash command (/new, /dream) and the harness's answer to it
	Compact   bool            `json:"isCompactSummary"`
	Arguments json.RawMessage `json:"arguments"`
	Input     json.RawMessage `json:"input"`
	Output    json.RawMessage `json:"output"`
	Shell     json.RawMessage `json:"command"`   // Pi's bashExecution: the command the user ran
	Set       json.RawMessage `json:"$set"`      // Gemini CLI: a metadata update
	RewindTo  string          `json:"$rewindTo"` // Gemini CLI: a rewind
	SessionID string          `json:"sessionId"` // Gemini CLI: the first line
	Action    *struct {
		Command json.RawMessage `json:"command"`
	} `json:"action"`
}

// stamp is a timestamp as agents write it: RFC 3339, ISO 8601 without a
// zone (local time, as Python's datetime.now().isoformat() writes it), or
// epoch seconds or milliseconds as a number. Anything else is no time,
// never an error: a line is not lost over its timestamp.
type stamp struct{ time.Time }

var naiveLayouts = []string{"2006-01-02T15:04:05.999999999", "2006-01-02 15:04:05.999999999", "2006-01-02T15:04", "2006-01-02"}

// UnmarshalJSON implements json.Unmarshaler.
func (s *stamp) UnmarshalJSON(b []byte) error {
	s.Time = parseStamp(b)
	return nil
}

func parseStamp(b []byte) time.Time {
	b = bytes.TrimSpace(b)
	if len(b) == 0 || string(b) == "null" {
		return time.Time{}
	}
	if b[0] == '"' {
		if len(b) >= 2 && b[len(b)-1] == '"' && bytes.IndexByte(b[1:len(b)-1], '\\') < 0 && bytes.IndexByte(b[1:len(b)-1], '"') < 0 {
			return ParseTime(string(b[1 : len(b)-1])) // nothing escaped: most timestamps
		}
		var v string
		if json.Unmarshal(b, &v) != nil {
			return time.Time{}
		}
		return ParseTime(v)
	}
	f, err := strconv.ParseFloat(string(b), 64)
	if err != nil || f <= 0 || f > 1e17 {
		return time.Time{}
	}
	if f >= 1e11 { // milliseconds: 1e11 s is the year 5138
		return time.UnixMilli(int64(f)).UTC()
	}
	return time.Unix(int64(f), int64((f-float64(int64(f)))*1e9)).UTC()
}

// ParseTime parses a timestamp string in the forms agents write; zero
// when it is none of them.
func ParseTime(v string) time.Time {
	if t, err := time.Parse(time.RFC3339Nano, v); err == nil {
		return t
	}
	for _, l := range naiveLayouts {
		if t, err := time.ParseInLocation(l, v, time.Local); err == nil {
			return t
		}
	}
	return time.Time{}
}

type part struct {
	Type      string          `json:"type"`
	Text      string          `json:"text"`
	Name      string          `json:"name"`
	Input     json.RawMessage `json:"input"`
	Arguments json.RawMessage `json:"arguments"`
	Content   json.RawMessage `json:"content"`
}

// maxToolInput bounds how much of a tool call's input goes into a
// message's text (a file written by a tool can be long).
const maxToolInput = 4000

// toolCall renders a tool call with its input, so what a tool was asked
// to do (the command run, the pattern searched) is part of the text.
func toolCall(name string, input []byte) string {
	if OwnTool(name) {
		return ownMark // memwatch's own traffic: own.go
	}
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
func Decode(line []byte) Message {
	var r jsonReader
	return withoutOwn(decode(line, r.unmarshal, &r))
}

// decode decodes with unmarshal: jsonReader (fastjson.go) over
// github.com/goccy/go-json, many times as fast as encoding/json on these
// lines (capture and indexing decode every line); a fuzz target checks
// that they agree.
//
// r, when given, is unmarshal's reader: a line it validated whole (JSON
// and UTF-8) gives text valid as it is, never checked again.
func decode(line []byte, unmarshal func([]byte, any) error, r *jsonReader) Message {
	var l lineShape
	if err := unmarshal(line, &l); err != nil {
		return Message{Raw: true, Text: strings.ToValidUTF8(string(line), "\uFFFD")}
	}
	if isGemini(&l) {
		return decodeGemini(line, &l, unmarshal)
	}
	if isCopilot(&l) {
		return decodeCopilot(line, &l, unmarshal)
	}
	ts := l.Timestamp.Time
	inner := &l
	switch {
	case isObject(l.Message): // Claude Code, OpenClaw: {"type":...,"message":{...}}
		var msg lineShape
		if err := unmarshal(l.Message, &msg); err != nil {
			return Message{Raw: true, Text: strings.ToValidUTF8(string(line), "\uFFFD")}
		}
		inner = &msg
		if inner.Role == "" && (l.Type == "user" || l.Type == "assistant") {
			inner.Role = l.Type
		}
	case l.Type == "response_item" && isObject(l.Payload): // Codex
		var p lineShape
		if err := unmarshal(l.Payload, &p); err != nil {
			return Message{Raw: true, Text: strings.ToValidUTF8(string(line), "\uFFFD")}
		}
		inner = codexItem(&p)
	}
	if ts.IsZero() {
		ts = inner.Timestamp.Time
	}
	m := Message{Role: inner.Role, Time: ts, ID: l.UUID, Parent: l.ParentUID}
	switch {
	case m.ID == "" && l.Type == "message": // OpenClaw's entries: id, parentId
		if id, ok := stringOf(l.EntryID); ok {
			m.ID, m.Parent = id, l.ParentID
		}
	case m.ID == "" && l.Type == "" && inner == &l && l.Role != "":
		// The records memwatch makes of agents' databases and documents
		// (the transcripts package): {"role", "content", "id"}.
		if id, ok := stringOf(l.EntryID); ok {
			m.ID = id
		}
	}
	text, tools := contentText(inner.Content, unmarshal)
	switch m.Role {
	case "toolResult": // OpenClaw, Pi
		m.Role = "tool"
	case "bashExecution":
		// Pi: a command the user ran (!cmd) and its output, which the
		// model is shown.
		cmd, _ := stringOf(inner.Shell)
		out, _ := stringOf(inner.Output)
		m.Role, text, tools = "tool", joinText(toolCall("bash", []byte(cmd)), "[tool result] "+out), []string{"bash"}
	case "custom", "branchSummary", "compactionSummary":
		// Pi: what an extension adds to the model's context, and the
		// summaries of a branch left or of a compacted conversation: not
		// said by anyone in this conversation.
		if sum, ok := stringOf(inner.Summary); ok && text == "" {
			text = sum
		}
		m.Meta, m.Role = true, ""
	}
	if len(inner.Content) == 0 && len(inner.Parts) > 0 && inner != &l {
		// Qwen Code: {"type":"user"|"assistant"|"tool_result","message":
		// {"role":"user"|"model","parts":[...]}}.
		var results bool
		text, tools, results = geminiParts(inner.Parts, unmarshal)
		switch {
		case l.Type == "tool_result" || results:
			m.Role = "tool"
			if text != "" {
				text = toolResult(text)
			}
		case m.Role == "model":
			m.Role = "assistant"
		}
	}
	for _, tc := range inner.ToolCalls {
		tools = append(tools, tc.Function.Name)
		text = joinText(text, toolCall(tc.Function.Name, argText(tc.Function.Arguments)))
	}
	if inner.Name != "" && inner != &l && l.Type == "response_item" && m.Role == "assistant" {
		tools = append(tools, inner.Name)
	}
	if m.Role == "tool" && text != "" && !strings.HasPrefix(text, "[tool result]") && text != ownMark && inner.Role != "bashExecution" {
		text = toolResult(text)
	}
	m.Tools = append(tools, inner.ToolsUsed...)
	m.Text = text
	switch {
	case l.IsMeta || l.Compact || l.Command || l.MetaType != "" && l.Role == "":
		// Claude Code's command caveats and compact summaries, nanobot's
		// metadata and state lines and its slash commands with the
		// harness's reply ("/dream", "Dreaming..."): not conversation.
		m.Meta, m.Role = true, ""
	case m.Role == "user" && wrapper(text):
		m.Meta, m.Role = true, ""
		if onlyReminders(strings.TrimSpace(text)) {
			m.Text = "" // the harness's reminders: never found by a search
		}
	case m.Role == "":
		switch {
		case l.Type == "queue-operation":
			// Claude Code's queued prompt: the user line that follows holds
			// it; searched here too, each prompt would be found twice.
			m.Meta, m.Text = true, ""
		case len(l.Summary) > 0 && l.Summary[0] == '"':
			var sum string
			_ = unmarshal(l.Summary, &sum)
			m.Meta, m.Text = true, sum
		case l.Type != "" || len(l.CreatedAt) > 0 || len(l.Set) > 0 || l.RewindTo != "" || l.SessionID != "":
			m.Meta, m.RewindTo = true, l.RewindTo
		default:
			// Valid JSON of a shape we do not know: keep it whole.
			m.Raw, m.Text = true, strings.ToValidUTF8(string(line), "\uFFFD")
		}
	}
	if (r == nil || !r.known(line)) && !utf8.ValidString(m.Text) {
		m.Text = strings.ToValidUTF8(m.Text, "\uFFFD")
	}
	return m
}

// isObject reports a JSON object value.
func isObject(raw json.RawMessage) bool {
	raw = bytes.TrimLeft(raw, " \t\r\n")
	return len(raw) > 0 && raw[0] == '{'
}

// codexItem maps a Codex response item onto the common shape: messages as
// they are, tool calls as an assistant's tool call, their outputs as tool
// results; reasoning and anything else is meta (no role).
func codexItem(p *lineShape) *lineShape {
	out := &lineShape{Timestamp: p.Timestamp, Type: "response_item"}
	switch p.Type {
	case "message":
		// developer messages are the harness's instructions (permissions,
		// skills, collaboration mode), not the conversation.
		if p.Role != "developer" {
			out.Role = p.Role
		}
		out.Content = p.Content
	case "function_call", "custom_tool_call", "local_shell_call":
		args := p.Arguments
		if len(args) == 0 {
			args = p.Input
		}
		name := p.Name
		if p.Type == "local_shell_call" && p.Action != nil {
			name, args = "shell", p.Action.Command
		}
		out.Role, out.Name = "assistant", name
		out.Content, _ = json.Marshal(toolCall(name, argText(args)))
	case "function_call_output", "custom_tool_call_output":
		out.Role = "tool"
		text := string(argText(p.Output))
		var o struct {
			Output string `json:"output"`
		}
		if json.Unmarshal([]byte(text), &o) == nil && o.Output != "" {
			text = o.Output // {"output": ..., "metadata": ...}
		}
		out.Content, _ = json.Marshal(toolResult(text))
	}
	return out
}

// argText is a tool call's input as text: a JSON string holding JSON (the
// OpenAI arguments field) is unwrapped.
func argText(raw json.RawMessage) []byte {
	raw = bytes.TrimSpace(raw)
	if len(raw) > 0 && raw[0] == '"' {
		var s string
		if json.Unmarshal(raw, &s) == nil {
			return []byte(s)
		}
	}
	return raw
}

// wrapper reports a user line that an agent wrote around a command rather
// than a request: Claude Code's slash-command and local-command wrappers,
// Codex's environment context and instructions.
func wrapper(text string) bool {
	t := strings.TrimSpace(text)
	if strings.HasPrefix(t, "<system-reminder>") && onlyReminders(t) {
		// Factory Droid's context message: the harness's reminders (tools,
		// skills, the environment), no word of the user's.
		return true
	}
	for _, p := range []string{"<command-name>", "<command-message>", "<local-command-stdout>", "<local-command-caveat>", "<environment_context>", "<user_instructions>", "# AGENTS.md instructions"} {
		if strings.HasPrefix(t, p) {
			return true
		}
	}
	return false
}

// onlyReminders reports text made of <system-reminder> blocks alone.
func onlyReminders(t string) bool {
	for t != "" {
		rest, ok := strings.CutPrefix(t, "<system-reminder>")
		if !ok {
			return false
		}
		_, after, ok := strings.Cut(rest, "</system-reminder>")
		if !ok {
			return false
		}
		t = strings.TrimSpace(after)
	}
	return true
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
		case "tool_use", "toolCall":
			in := p.Input
			if len(in) == 0 {
				in = argText(p.Arguments)
			}
			tools = append(tools, p.Name)
			text = joinText(text, toolCall(p.Name, in))
		case "tool_result":
			inner, _ := contentText(p.Content, unmarshal)
			text = joinText(text, toolResult(inner))
		case "thinking", "reasoning":
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
		for _, p := range []string{`"role":"user"`, `"role":"assistant"`, `"role": "user"`, `"role": "assistant"`, `"type":"user"`, `"type":"assistant"`, `"type":"gemini"`, `"type":"user.message"`, `"type":"assistant.message"`, `"type":"tool.execution_complete"`} {
			if strings.Contains(string(head), p) {
				return true
			}
		}
		return false
	}
	if msg, sure := classify(line); sure && !mayBeOwn(line) {
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
	top, ok := readKeys(line, true)
	if !ok {
		return false, false
	}
	role := top.role
	if top.message != nil {
		// Claude Code, OpenClaw: {"type":...,"message":{...}}: the inner
		// message's role decides, or the outer type when it has none.
		if top.message[0] != '{' {
			return false, false // a string (Codex events): decode to tell
		}
		inner, ok := readKeys(top.message, false) // valid: read whole above
		if !ok || inner.parts {
			return false, false // Qwen Code's parts, or unsure: decode to tell
		}
		role = inner.role
		if role == "" && (top.typ == "user" || top.typ == "assistant") {
			role = top.typ
		}
		if role == "" {
			return false, false
		}
	}
	switch {
	case role == "user" && wrapperHint(line):
		return false, false // a command wrapper is no request: decode to tell
	case role == "user" || role == "assistant" || role == "system" || role == "tool":
		return true, true
	case top.message != nil:
		return false, false // another role (OpenClaw's toolResult, Pi's custom): decode to tell
	case role == "" && (top.typ == "user" || top.typ == "gemini"):
		return false, false // Gemini CLI's records: decode to tell
	case role == "" && copilotRoles[top.typ] != "":
		return false, false // Copilot CLI's events: decode to tell
	case role == "":
		return false, true // metadata, state, summaries: no role
	}
	return false, false
}

// keysRead is what classify reads of an object's keys.
type keysRead struct {
	role, typ string
	message   []byte // the "message" value, the last one given
	parts     bool   // a "parts" key
}

// readKeys reads the keys of the JSON object b holds; false when a decode
// must tell (a value that would not decode into lineShape, a key that
// folds onto one classify reads, escapes, invalid JSON). With validate,
// b is checked to be that object and white space alone, valid JSON as
// json.Valid has it (values deeper than maxFastDepth: not sure): telling a
// message then reads the line once. Without, b must be valid JSON already
// (a value of a line read with validate).
func readKeys(b []byte, validate bool) (keysRead, bool) {
	var k keysRead
	i := skipSpace(b, 0)
	if i >= len(b) || b[i] != '{' {
		return k, false
	}
	end := func(i int) (keysRead, bool) { return k, !validate || skipSpace(b, i+1) == len(b) }
	i = skipSpace(b, i+1)
	if i < len(b) && b[i] == '}' {
		return end(i)
	}
	for {
		key, j, ok := readString(b, i)
		if !ok {
			return k, false
		}
		j = skipSpace(b, j)
		if j >= len(b) || b[j] != ':' {
			return k, false
		}
		j = skipSpace(b, j+1)
		if foldsToKnownKey(key) {
			return k, false // encoding/json matches keys without case
		}
		switch key {
		case "payload", "_type", "isMeta", "isCompactSummary", "_command":
			return k, false // Codex items and meta markers: decode to tell
		case "role", "type":
			v, end, ok := readString(b, j)
			if !ok {
				return k, false
			}
			if key == "role" {
				k.role = v
			} else {
				k.typ = v
			}
			j = end
		default:
			var end int
			if validate {
				end, ok = skipJSON(b, j, 1, nil)
			} else {
				end, ok = valueEnd(b, j, nil), true // b is valid JSON: its ends need no check
			}
			if !ok || !typedOK(key, b[j:end]) {
				return k, false
			}
			switch key {
			case "message":
				k.message = b[j:end]
			case "parts":
				k.parts = true
			}
			j = end
		}
		next, more, ok := afterItem(b, j, '}')
		switch {
		case !ok:
			return k, false
		case !more:
			return end(next - 1)
		}
		i = next
	}
}

// The keys of lineShape whose values decode types: a value of another
// kind fails the whole decode (the line is then raw, no message), so the
// fast path must see it too. Keys are matched as encoding/json matches
// them, without case.
var (
	stringKeys  = []string{"type", "role", "name", "_type", "uuid", "parentUuid", "parentId", "$rewindTo", "sessionId"}
	boolKeys    = []string{"isMeta", "_command", "isCompactSummary"}
	complexKeys = []string{"tool_calls", "toolsUsed", "action"} // decode to tell
)

// typedOK reports whether a value of key decodes into lineShape: a string
// or null for a string field, a boolean or null for a boolean one; any
// value for the others.
func typedOK(key string, v []byte) bool {
	null := string(v) == "null"
	for _, k := range stringKeys {
		if strings.EqualFold(key, k) {
			return null || len(v) > 0 && v[0] == '"'
		}
	}
	for _, k := range boolKeys {
		if strings.EqualFold(key, k) {
			return null || string(v) == "true" || string(v) == "false"
		}
	}
	for _, k := range complexKeys {
		if strings.EqualFold(key, k) {
			return false
		}
	}
	return true
}

// wrapperHint reports a line that may hold a wrapper (see wrapper), or
// escapes that could spell one.
func wrapperHint(line []byte) bool {
	return bytes.Contains(line, []byte("<command-")) || bytes.Contains(line, []byte("<local-command-")) ||
		bytes.Contains(line, []byte("<environment_context>")) || bytes.Contains(line, []byte("<user_instructions>")) ||
		bytes.Contains(line, []byte("AGENTS.md instructions")) || bytes.Contains(line, []byte("<system-reminder>")) || bytes.Contains(line, []byte(`\u`))
}

// foldsToKnownKey reports a key that encoding/json would take for role,
// type or message without being spelled so (other case, or non-ASCII bytes
// that its folding may map onto ASCII).
func foldsToKnownKey(key string) bool {
	known := []string{"role", "type", "message", "parts", "payload", "_type", "isMeta", "isCompactSummary", "_command"}
	if slices.Contains(known, key) {
		return false
	}
	for i := 0; i < len(key); i++ {
		if key[i] >= 0x80 {
			return true
		}
	}
	return slices.ContainsFunc(known, func(k string) bool { return strings.EqualFold(key, k) })
}

func skipSpace(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\r' || b[i] == '\n') {
		i++
	}
	return i
}

// readString reads a JSON string without escapes of interest (keys and
// role values); one with escapes or control bytes is not sure.
func readString(b []byte, i int) (string, int, bool) {
	if i >= len(b) || b[i] != '"' {
		return "", i, false
	}
	for j := i + 1; j < len(b); j++ {
		switch c := b[j]; {
		case c == '\\' || c < 0x20: // an escape, or invalid
			return "", j, false
		case c == '"':
			return string(b[i+1 : j]), j + 1, true
		}
	}
	return "", i, false
}

// stringOf reads a JSON string; false for any other value.
func stringOf(raw json.RawMessage) (string, bool) {
	if len(raw) == 0 || raw[0] != '"' {
		return "", false
	}
	var s string
	return s, json.Unmarshal(raw, &s) == nil
}
