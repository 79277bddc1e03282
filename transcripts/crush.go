package transcripts

import (
	"context"
	"database/sql"
	"encoding/json"
	"strings"
	"time"

	"github.com/memwatch/memwatch/spool"
)

// Crush (0.x, github.com/charmbracelet/crush) keeps a project's
// conversations in <project>/.crush/crush.db (WAL; the projects it has
// run in are listed in ~/.local/share/crush/projects.json): table sessions
// (parent_session_id set for the sessions its sub-agents and tools run)
// and messages (id a UUID, session_id, role "user"|"assistant"|"tool",
// parts: a JSON array of {"type", "data"}: "text" {text}, "reasoning",
// "tool_call" {id, name, input (a JSON string)}, "tool_result"
// {tool_call_id, name, content, is_error}, "image_url", "binary" {path},
// "shell_command" {command, output}, "finish" {reason, time}; created_at
// in seconds; is_summary_message). A message is inserted, then updated as
// it streams (UPDATE keeps its rowid); it is done once its parts hold a
// "finish" part, which crush adds to a user's or a tool's message when it
// creates it, and to an assistant's when its step ends.
//
// A message's record is keyed by its rowid, which grows as crush inserts
// (ids are random UUIDs and created_at is in seconds: neither orders
// messages). Only a run of done messages is read, so a message is
// captured once, whole; a message left unfinished (crush stopped while it
// streamed) is read as it is once a later message of its session exists,
// since crush never goes back to it. A summary crush writes of the
// conversation so far, to carry on with (is_summary_message), is the
// agent talking to itself about what the records already hold: left out.
var crush = &Format{Name: "crush", Table: "messages", Column: "parts", Sessions: crushSessions, Records: crushRecords}

func crushSessions(ctx context.Context, db *sql.DB) ([]Session, error) {
	// A sub-agent's or a tool's session (agent, agentic_fetch, title) is
	// the agent talking to itself: its result is in the parent's tool
	// result.
	return childSessions(ctx, db, `SELECT id, coalesce(parent_session_id, '') FROM sessions ORDER BY created_at, id`)
}

// crushMessage is one row of messages.
type crushMessage struct {
	RowID   int64
	ID      string
	Role    string
	Parts   []byte
	Created int64
	Summary bool
	// Cut is how many bytes of its parts were not read (see Bounds).
	Cut int64
}

func crushRecords(ctx context.Context, db *sql.DB, session string, after int64, b Bounds) ([]spool.Record, error) {
	// is_summary_message came with crush 0.4 (2025-08); older databases
	// have no summaries.
	summary := "0"
	var n int
	if err := db.QueryRowContext(ctx, `SELECT COUNT(*) FROM pragma_table_info('messages') WHERE name='is_summary_message'`).Scan(&n); err != nil {
		return nil, err
	}
	if n > 0 {
		summary = "is_summary_message"
	}
	// One row more than a batch: whether a later message exists decides
	// whether an unfinished one is still streaming.
	rows, err := db.QueryContext(ctx, `SELECT rowid, id, role, `+bounded("parts", b.value())+`, coalesce(created_at, 0), `+summary+` FROM messages WHERE session_id=? AND rowid>? ORDER BY rowid LIMIT ?`, session, after, Batch+1)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var msgs []crushMessage
	var total int64
	for rows.Next() {
		var m crushMessage
		var parts []byte
		var size int64
		var role sql.NullString
		var sum sql.NullInt64
		if err := rows.Scan(&m.RowID, &m.ID, &role, &parts, &size, &m.Created, &sum); err != nil {
			return nil, err
		}
		m.Role, m.Parts, m.Summary = role.String, parts, sum.Int64 != 0
		if size > int64(len(parts)) {
			m.Cut = size - int64(len(parts))
		}
		msgs = append(msgs, m)
		if total += int64(len(parts)); total > b.batch() && len(msgs) < Batch+1 {
			// The batch is full. Whether a message follows says whether
			// the last one is still streaming (the next read has it).
			limit := len(msgs)
			if rows.Next() {
				msgs = append(msgs, crushMessage{})
			}
			return crushMessageRecords(msgs, limit), nil
		}
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	return crushMessageRecords(msgs, Batch), nil
}

// crushPart is one element of a message's parts.
type crushPart struct {
	Type string `json:"type"`
	Data struct {
		Text       string `json:"text"`
		Name       string `json:"name"`
		Input      string `json:"input"`
		Content    string `json:"content"`
		IsError    bool   `json:"is_error"`
		Path       string `json:"path"`
		URL        string `json:"url"`
		Command    string `json:"command"`
		Output     string `json:"output"`
		ToolCallID string `json:"tool_call_id"`
	} `json:"data"`
}

// crushMessageRecords turns messages (in rowid order) into records,
// stopping at the last message when it is not done yet. Messages from
// index limit on are only there to say a later message exists (more than
// a batch).
func crushMessageRecords(msgs []crushMessage, limit int) []spool.Record {
	var out []spool.Record
	for i, m := range msgs {
		if i == limit {
			break
		}
		var parts []crushPart
		switch {
		case m.Cut > 0:
			// Read in part: its start, as text (its finish part, at the
			// end, was not read: it is taken as done).
			_, text := salvage(m.Parts)
			var p crushPart
			p.Type, p.Data.Text = "text", fitTo(text, len(m.Parts))+cutNote(int64(len(m.Parts))+m.Cut)
			parts = []crushPart{p, {Type: "finish"}}
		case json.Unmarshal(m.Parts, &parts) != nil:
			parts = nil // not JSON (being written?): read as it is below when done
		}
		done := false
		for _, p := range parts {
			done = done || p.Type == "finish"
		}
		if !done && i == len(msgs)-1 {
			break // still being written: it comes later
		}
		if m.Summary {
			continue
		}
		r := spool.Record{Key: m.RowID, Data: crushLine(m, parts)}
		if m.Cut > 0 {
			r.Size = int64(len(r.Data)) + m.Cut
		}
		out = append(out, r)
	}
	return out
}

// crushLine is a message as the JSON line session.Decode reads: its role,
// its text and tool calls as content blocks; a tool's message its
// results' text.
func crushLine(m crushMessage, parts []crushPart) []byte {
	var blocks []contentBlock
	var results []string
	for _, p := range parts {
		d := p.Data
		switch p.Type {
		case "text":
			if strings.TrimSpace(d.Text) != "" {
				blocks = append(blocks, contentBlock{Type: "text", Text: d.Text})
			}
		case "tool_call":
			in := json.RawMessage(`{}`)
			if v, ok := jsonString(d.Input); ok {
				in = v
			}
			blocks = append(blocks, contentBlock{Type: "tool_use", Name: d.Name, Input: in})
		case "tool_result":
			switch {
			case d.IsError:
				results = append(results, "error: "+d.Content)
			case d.Content != "":
				results = append(results, d.Content)
			}
		case "binary":
			if d.Path != "" {
				blocks = append(blocks, contentBlock{Type: "text", Text: "[file: " + d.Path + "]"})
			}
		case "shell_command":
			// A command the user ran from crush's prompt, with its output.
			if d.Command != "" {
				blocks = append(blocks, contentBlock{Type: "text", Text: "$ " + d.Command + "\n" + d.Output})
			}
		}
	}
	role := m.Role
	if role == "" {
		role = "unknown"
	}
	line := map[string]any{"role": role, "id": m.ID}
	switch {
	case role == "tool":
		line["content"] = strings.Join(results, "\n")
	case len(blocks) == 0:
		line["content"] = ""
	default:
		line["content"] = blocks
	}
	if m.Created > 0 {
		t := time.Unix(m.Created, 0)
		if m.Created > 1e11 { // milliseconds, as the schema's comments say
			t = time.UnixMilli(m.Created)
		}
		line["timestamp"] = t.UTC().Format(time.RFC3339Nano)
	}
	return marshal(line)
}
