package transcripts

import (
	"context"
	"database/sql"
	"encoding/json"
	"strings"
	"time"

	"github.com/memwatch/memwatch/spool"
)

// opencode (1.x) keeps everything in ~/.local/share/opencode/opencode.db
// (WAL), and Kilo Code's CLI (7.x, a fork of opencode) the same tables in
// ~/.local/share/kilo/kilo.db: table session (one row a conversation; parent_id set for the
// sessions its sub-agents run), message (id, session_id, time_created,
// data: {"role": "user"|"assistant", "time": {"created", "completed"},
// ...}) and part (id, message_id, session_id, data: {"type": "text", "text"}
// | {"type": "tool", "tool", "callID", "state": {"status", "input",
// "output"}} | "reasoning" | "step-start" | "step-finish" | "file" | ...).
// Ids grow with time, so they order messages and parts. A part is written
// as it streams and rewritten until it is done; an assistant message is
// done when its time.completed is set.
//
// A session's records come from its messages in order: the k-th message
// is record 2k-1 (its text and tool calls, with its role), and its tools'
// results record 2k (role tool), when it has some. Only a run of done
// messages is read, so a message is captured once, whole.
var openCode = &Format{Name: "opencode", Table: "part", Sessions: openCodeSessions, Records: openCodeRecords}

func openCodeSessions(ctx context.Context, db *sql.DB) ([]Session, error) {
	// A sub-agent's session (a task the agent delegated) is the agent
	// talking to itself: its result is in the parent's tool output.
	// Each session's directory, where its table has one (a database of
	// an older schema, or a fork's, may not: its sessions are read
	// without it).
	dir, err := hasColumn(ctx, db, "session", "directory")
	if err != nil {
		return nil, err
	}
	if !dir {
		return childSessions(ctx, db, `SELECT id, coalesce(parent_id, '') FROM session ORDER BY id`)
	}
	return childSessions(ctx, db, `SELECT id, coalesce(parent_id, ''), coalesce(directory, '') FROM session ORDER BY id`)
}

// ocMessage is one message of a session, with its parts' data.
type ocMessage struct {
	ID    string
	Data  []byte
	Parts [][]byte
	// Cut is how many bytes of its values were not read (see Bounds).
	Cut int64
}

func openCodeRecords(ctx context.Context, db *sql.DB, session string, after int64, b Bounds) ([]spool.Record, error) {
	// Messages before the one of record after+1 are captured whole (record
	// 2k-1 may be captured without its tools' 2k: message k is read again).
	done := after / 2
	msgs, err := openCodeMessages(ctx, db, session, done, Batch/2, b)
	if err != nil {
		return nil, err
	}
	return openCodeMessageRecords(msgs, done, after), nil
}

// openCodeMessages reads the messages of a session after the first skip,
// with their parts, each value and the whole within b.
func openCodeMessages(ctx context.Context, db *sql.DB, session string, skip int64, limit int, b Bounds) ([]ocMessage, error) {
	rows, err := db.QueryContext(ctx, `SELECT id, `+bounded("data", b.value())+` FROM message WHERE session_id=? ORDER BY id LIMIT ? OFFSET ?`, session, limit, skip)
	if err != nil {
		return nil, err
	}
	var msgs []ocMessage
	for rows.Next() {
		var m ocMessage
		var size int64
		if err := rows.Scan(&m.ID, &m.Data, &size); err != nil {
			rows.Close()
			return nil, err
		}
		if size > int64(len(m.Data)) {
			// A message's own data is its role and times: salvaged.
			role, _ := salvage(m.Data)
			m.Data, m.Cut = marshal(map[string]any{"role": role, "time": map[string]int64{"completed": 1}}), size-int64(len(m.Data))
		}
		msgs = append(msgs, m)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, err
	}
	var total int64
	for i := range msgs {
		prows, err := db.QueryContext(ctx, `SELECT `+bounded("data", b.value())+` FROM part WHERE message_id=? ORDER BY id`, msgs[i].ID)
		if err != nil {
			return nil, err
		}
		for prows.Next() {
			var d []byte
			var size int64
			if err := prows.Scan(&d, &size); err != nil {
				prows.Close()
				return nil, err
			}
			if size > int64(len(d)) {
				// Its start, as text: searchable and cited.
				_, text := salvage(d)
				msgs[i].Cut += size - int64(len(d))
				d = marshal(map[string]string{"type": "text", "text": fitTo(text, len(d)) + cutNote(size)})
			}
			total += int64(len(d))
			msgs[i].Parts = append(msgs[i].Parts, d)
		}
		prows.Close()
		if err := prows.Err(); err != nil {
			return nil, err
		}
		total += int64(len(msgs[i].Data))
		if total > b.batch() && i+1 < len(msgs) {
			// The batch is full: the messages after this one come next.
			return msgs[:i+1], nil
		}
	}
	return msgs, nil
}

// openCodeMessageRecords turns messages (the first numbered skip+1) into
// records numbered after after, stopping at the first message not done.
func openCodeMessageRecords(msgs []ocMessage, skip, after int64) []spool.Record {
	var out []spool.Record
	for i, m := range msgs {
		k := skip + int64(i) + 1
		var info struct {
			Role string `json:"role"`
			Time struct {
				Created   int64 `json:"created"`
				Completed int64 `json:"completed"`
			} `json:"time"`
			Finish string `json:"finish"`
		}
		if json.Unmarshal(m.Data, &info) != nil {
			info.Role = ""
		}
		if info.Role == "assistant" && info.Time.Completed == 0 && info.Finish == "" {
			break // still being written: it and what follows come later
		}
		if info.Role == "user" && len(m.Parts) == 0 {
			break // its text not written yet
		}
		msg, tools := openCodeMessage(m, info.Role, info.Time.Created)
		if 2*k-1 > after {
			r := spool.Record{Key: 2*k - 1, Data: msg}
			if m.Cut > 0 {
				r.Size = int64(len(msg)) + m.Cut
			}
			out = append(out, r)
		}
		if tools != nil && 2*k > after {
			out = append(out, spool.Record{Key: 2 * k, Data: tools})
		}
	}
	return out
}

// openCodeMessage is a message as the JSON line session.Decode reads (its
// role, text and tool calls as content blocks), and the line of its tools'
// results (nil: none).
func openCodeMessage(m ocMessage, role string, created int64) (msg, tools []byte) {
	var blocks []contentBlock
	var results []string
	for _, p := range m.Parts {
		var part struct {
			Type      string `json:"type"`
			Text      string `json:"text"`
			Synthetic bool   `json:"synthetic"`
			Tool      string `json:"tool"`
			Filename  string `json:"filename"`
			State     struct {
				Status string          `json:"status"`
				Input  json.RawMessage `json:"input"`
				Output string          `json:"output"`
				Error  string          `json:"error"`
			} `json:"state"`
		}
		if json.Unmarshal(p, &part) != nil {
			continue
		}
		switch part.Type {
		case "text":
			if strings.TrimSpace(part.Text) != "" {
				blocks = append(blocks, contentBlock{Type: "text", Text: part.Text})
			}
		case "tool":
			in := part.State.Input
			if !json.Valid(in) || len(in) == 0 {
				in = json.RawMessage(`{}`)
			}
			blocks = append(blocks, contentBlock{Type: "tool_use", Name: part.Tool, Input: in})
			switch {
			case part.State.Output != "":
				results = append(results, part.State.Output)
			case part.State.Error != "":
				results = append(results, "error: "+part.State.Error)
			}
		case "file":
			if part.Filename != "" {
				blocks = append(blocks, contentBlock{Type: "text", Text: "[file: " + part.Filename + "]"})
			}
		}
	}
	if role == "" {
		role = "unknown"
	}
	line := map[string]any{"role": role, "content": blocks, "id": m.ID}
	if created > 0 {
		line["timestamp"] = time.UnixMilli(created).UTC().Format(time.RFC3339Nano)
	}
	if len(blocks) == 0 {
		line["content"] = ""
	}
	msg = marshal(line)
	if len(results) > 0 {
		tl := map[string]any{"role": "tool", "content": strings.Join(results, "\n"), "id": m.ID + "#tools"}
		if created > 0 {
			tl["timestamp"] = line["timestamp"]
		}
		tools = marshal(tl)
	}
	return msg, tools
}
