package layout

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/memwatch/memwatch/compact"
	"github.com/memwatch/memwatch/confine"
	"github.com/memwatch/memwatch/policy"
	"github.com/memwatch/memwatch/secrets"
	"github.com/memwatch/memwatch/session"
	"github.com/memwatch/memwatch/spool"
)

// CaptureLog brings the spool up to date with the session log rel of root
// and returns what it knows of the log. Rules read conversations from the
// spool, never from positions in the live file: what the agent trims or
// clears after a capture is not lost.
func (e *Env) CaptureLog(ctx context.Context, root *confine.Root, rel string) (spool.Log, error) {
	if _, err := e.capture(ctx, root, rel); err != nil {
		return spool.Log{}, err
	}
	return e.find(ctx, root, rel)
}

// Capture is CaptureLog for a caller that needs no more than the log
// captured (a root's evaluation that keeps its logs for recall): no query
// of the spool for each log that did not change.
func (e *Env) Capture(ctx context.Context, root *confine.Root, rel string) error {
	why, err := e.capture(ctx, root, rel)
	if err == nil && why == "missing" {
		_, err = e.find(ctx, root, rel) // gone: an error unless captured before
	}
	return err
}

// capture captures the log, reports what it captured, and says why
// (spool.Result.Why): an error is a capture that failed, not a log that
// is missing.
func (e *Env) capture(ctx context.Context, root *confine.Root, rel string) (string, error) {
	capture := e.Spool.Capture
	if e.CaptureInto != nil {
		capture = e.CaptureInto
	}
	res, err := capture(ctx, root, rel, spool.Options{MaxLine: int(e.Store.MaxLine), IsMessage: session.IsMessage})
	if err != nil && res.Why != "missing" {
		if e.StateError != nil {
			e.StateError(root, "the lines of "+root.Join(rel), err)
		}
		return "", err
	}
	e.CaptureBounds(root, rel, res)
	// Said once per change: a log that stays gone is "missing" from then
	// on, and says nothing more.
	switch res.Why {
	case "trimmed", "replaced", "cleared":
		const msg = "session log rewritten by the agent; captured lines are kept"
		if e.Quota.Allow(e.Log, slog.LevelInfo, root.Path(), "rewritten", msg) {
			e.Log.Info(msg, "root", root.Path(), "log", rel, "change", res.Why,
				"generation", res.Gen, "new_lines", res.Lines, "known_lines", res.Known)
		}
	case "gone":
		const msg = "session log gone (deleted or renamed away by the agent); its captured lines stay searchable from the spool"
		if e.Quota.Allow(e.Log, slog.LevelInfo, root.Path(), "gone", msg) {
			e.Log.Info(msg, "root", root.Path(), "log", rel, "generation", res.Gen)
		}
	}
	return res.Why, nil
}

// find is the spool's row of a log captured.
func (e *Env) find(ctx context.Context, root *confine.Root, rel string) (spool.Log, error) {
	st, ok, err := e.Spool.Find(ctx, root.ID(), rel)
	if err != nil {
		return spool.Log{}, err
	}
	if !ok {
		return spool.Log{}, fmt.Errorf("capture %s: nothing captured", rel)
	}
	return st, nil
}

// CaptureBounds reports the lines a capture stored cut at the store's
// max_line (Bound), or that new lines came whole (Unbound).
func (e *Env) CaptureBounds(root *confine.Root, rel string, res spool.Result) {
	switch {
	case res.Cut > 0:
		e.Bound(root, rel, "max_line", fmt.Sprintf("%d line(s) over %d bytes stored cut (the longest %d bytes): each is a message with its start searchable and cited", res.Cut, e.maxLine(), res.Longest))
	case res.Lines > 0:
		e.Unbound(root, rel, "max_line")
	}
}

func (e *Env) maxLine() int64 {
	if e.Store.MaxLine > 0 {
		return int64(e.Store.MaxLine)
	}
	return spool.DefaultMaxLine
}

// Idle reports whether the log has been quiet for d: its file was not
// written for d, and nothing new was captured for d.
func (e *Env) Idle(root *confine.Root, log spool.Log, d time.Duration) bool {
	last := log.Changed
	if fi, err := root.Stat(log.Path); err == nil && fi.ModTime().After(last) {
		last = fi.ModTime()
	}
	return e.Now().Sub(last) >= d
}

// Message is one decoded message of a range, with its captured line.
type Message struct {
	spool.Line
	session.Message
}

// errStop ends a read early.
var errStop = errors.New("stop")

// ReadRange decodes the messages of log after sequence after, up to upto.
// With an LLM the range also ends at the last whole message that fits the
// endpoint's max_input_tokens less reserve (the prompt's own text); the
// first message always goes in. It returns the messages, the lines they
// came from (for the citation) and the sequence number the range ends at
// (lines that are not messages are passed over, not cited).
//
// Every range is also bounded by the store's max_read bytes of captured
// lines (a 400 MiB session consolidated without an LLM is read a part at a
// time, each part its own range): what is past the bound is the next
// range's.
//
// The messages come masked (secrets): what rules make of a conversation
// (history entries, summaries, facts, a prompt to an LLM) never holds a
// credential a tool printed into it. told, when not nil, learns the
// values masked, so that the same value repeated bare (a password
// without its URL, by a model) is masked in what is made of them.
func (e *Env) ReadRange(ctx context.Context, log spool.Log, after, upto int64, reserve int, told *secrets.Values) ([]Message, []spool.Line, int64, error) {
	if told == nil {
		told = &secrets.Values{}
	}
	budget := -1
	if e.LLM != nil {
		budget = e.LLM.MaxInputTokens() - reserve
	}
	room := int64(e.Store.MaxRead)
	if room <= 0 {
		room = int64(policy.DefaultMaxRead)
	}
	var msgs []Message
	var cited []spool.Line
	next := after
	err := e.Spool.Read(ctx, log.ID, after, upto, func(l spool.Line) error {
		if !l.Msg {
			next = l.Seq
			if bytes.Contains(l.Data, []byte(`"$rewindTo"`)) {
				// Not a message, but it abandons some (ActiveBranch).
				if m := DecodeLine(l); m.RewindTo != "" {
					msgs = append(msgs, Message{Line: l, Message: m})
				}
			}
			return nil
		}
		if room -= int64(len(l.Data)); room < 0 && len(msgs) > 0 {
			e.Log.Info("a range reached the bytes one job reads (max_read); the rest follows in the next", "log", log.Path, "max_read", e.Store.MaxRead, "messages", len(msgs))
			return errStop
		}
		m := DecodeLine(l)
		m.Text = told.Mask(m.Text)
		if budget >= 0 && len(msgs) > 0 {
			if budget -= compact.EstimateTokens(m.Text) + 8; budget < 0 {
				return errStop
			}
		}
		// The decoded message is what rules read; the line's bytes are not
		// held twice (the spool keeps them).
		l.Data = nil
		msgs = append(msgs, Message{Line: l, Message: m})
		cited = append(cited, l)
		next = l.Seq
		return nil
	})
	if err != nil && !errors.Is(err, errStop) {
		return nil, nil, after, err
	}
	return msgs, cited, next, nil
}

// DecodeLine decodes a captured line; a line whose text was cut or pruned
// says so instead of failing.
func DecodeLine(l spool.Line) session.Message {
	switch {
	case l.Data == nil:
		return session.Message{Raw: true, Text: fmt.Sprintf("[line pruned from the spool; %d bytes]", l.Size)}
	case l.Cut():
		m := session.Decode(l.Data)
		m.Text = fmt.Sprintf("%s…[line cut; %d bytes in all]", m.Text, l.Size)
		return m
	}
	return session.Decode(l.Data)
}

// ActiveBranch leaves out of a range the messages of branches the agent
// abandoned. An agent that writes a conversation tree (Claude Code's
// parentUuid, OpenClaw's parentId) records a rewind, where the user edits
// an earlier prompt, as a second user message with the same parent as the
// first: the first prompt and everything after it up to the second are the
// abandoned branch, still in the file (and in the spool, and searchable)
// but no longer the conversation. Only sibling user prompts count: a
// message whose parent is not in the range changes nothing. It returns the
// messages kept and how many were left out.
//
// A rewind record (Gemini CLI's $rewindTo) abandons the message it
// names and everything after it.
//
// A message written again under the same id (Gemini CLI appends a message
// record anew when its tokens arrive or a tool call completes) is the
// last of its lines, at the place of its first.
func ActiveBranch(msgs []Message) ([]Message, int) {
	msgs = latestByID(msgs)
	kept := make([]Message, 0, len(msgs))
	dropped := 0
	for _, m := range msgs {
		if m.RewindTo != "" {
			for i, k := range kept {
				if k.ID == m.RewindTo {
					dropped += len(kept) - i
					kept = kept[:i]
					break
				}
			}
		}
		if m.RewindTo != "" {
			continue
		}
		if prompt(m) && m.Parent != "" {
			for i, k := range kept {
				if prompt(k) && k.Parent == m.Parent && k.ID != m.ID {
					dropped += len(kept) - i
					kept = kept[:i]
					break
				}
			}
		}
		kept = append(kept, m)
	}
	return kept, dropped
}

// latestByID keeps one message per id: its last version, where the first stood.
func latestByID(msgs []Message) []Message {
	last := map[string]int{}
	for i, m := range msgs {
		if m.ID != "" {
			last[m.ID] = i
		}
	}
	if len(last) == 0 {
		return msgs
	}
	out := make([]Message, 0, len(msgs))
	placed := map[string]bool{}
	for _, m := range msgs {
		if m.ID == "" {
			out = append(out, m)
			continue
		}
		if !placed[m.ID] {
			placed[m.ID] = true
			out = append(out, msgs[last[m.ID]])
		}
	}
	return out
}

// prompt reports a user's own message (Claude Code writes tool results as
// user messages too; those are no rewind).
func prompt(m Message) bool {
	return m.Role == "user" && !strings.HasPrefix(m.Text, "[tool result]")
}

// LogFile is the file a log of the spool comes from: the log itself, or
// the database a conversation of a transcript database is a row of.
func LogFile(rel string) string {
	if spool.IsRecordLog(rel) {
		db, _, _ := strings.Cut(rel, "#")
		return db
	}
	return rel
}
