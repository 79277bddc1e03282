package layout

import (
	"context"
	"encoding/json"
	"errors"
	"time"

	"github.com/memwatch/memwatch/compact"
	"github.com/memwatch/memwatch/confine"
	"github.com/memwatch/memwatch/watcher"
)

// LogProgress tracks how far a rule has processed a JSONL log: a tail
// cursor at the last processed line, kept in the state store under its own
// namespace. Its byte offset lets the next range be read without rereading
// the log, and its identity catches a replaced or truncated log.
type LogProgress struct {
	NS string // state namespace, one per rule
}

// Load returns the processed cursor of path.
func (lp LogProgress) Load(ctx context.Context, env *Env, path string) watcher.Cursor {
	var c watcher.Cursor
	if b, ok, _ := env.DB.Get(ctx, lp.NS, path); ok {
		_ = json.Unmarshal(b, &c)
	}
	return c
}

// Commit records that everything before c is processed.
func (lp LogProgress) Commit(ctx context.Context, env *Env, path string, c watcher.Cursor) error {
	b, _ := json.Marshal(c)
	return env.DB.Put(ctx, lp.NS, path, b)
}

// Pending counts the log's complete lines (advancing the shared tail
// cursor), returns how many are processed, and whether the log has been
// quiet for idle. A replaced or truncated log starts over from line 1.
func (lp LogProgress) Pending(ctx context.Context, env *Env, root *confine.Root, rel string, idle time.Duration) (count, done int64, quiet bool, err error) {
	path := root.Join(rel)
	tail, reset, err := watcher.Advance(root, rel, env.Cursors.Get(path), int(env.Store.MaxLine), nil)
	if err != nil {
		return 0, 0, false, err
	}
	env.Cursors.Set(path, tail)
	cur := lp.Load(ctx, env, path)
	if reset == watcher.Truncated || reset == watcher.Replaced || cur.Dev != 0 && (cur.Dev != tail.Dev || cur.Ino != tail.Ino) || cur.Lines > tail.Lines {
		if cur != (watcher.Cursor{}) {
			env.Log.Info("log was replaced or truncated; processing it from the start", "path", path, "rule_state", lp.NS)
		}
		cur = watcher.Cursor{}
		_ = lp.Commit(ctx, env, path, cur)
	}
	fi, err := root.Stat(rel)
	if err != nil {
		return 0, 0, false, err
	}
	return tail.Lines, cur.Lines, env.Now().Sub(fi.ModTime()) >= idle, nil
}

// Message is one decoded line of a range, with its line number.
type Message struct {
	Line int64
	watcher.Message
}

var errStop = errors.New("stop")

// ReadRange decodes the lines after the processed cursor up to line end.
// With an LLM, the range also ends at the last whole message that fits the
// endpoint's max_input_tokens less reserve (the prompt's own text); the next
// range continues from there. It returns the messages and the cursor just
// after the last one.
func (lp LogProgress) ReadRange(ctx context.Context, env *Env, root *confine.Root, rel string, end int64, reserve int) ([]Message, watcher.Cursor, error) {
	path := root.Join(rel)
	var keep func(watcher.Message) bool
	if env.LLM != nil {
		budget := env.LLM.MaxInputTokens() - reserve
		keep = func(m watcher.Message) bool {
			budget -= compact.EstimateTokens(m.Text) + 8 // + role and framing
			return budget >= 0
		}
	}
	var msgs []Message
	next, reset, err := watcher.Advance(root, rel, lp.Load(ctx, env, path), int(env.Store.MaxLine), func(line []byte, n int64) error {
		if n > end {
			return errStop
		}
		m := watcher.DecodeLine(line)
		if keep != nil && len(msgs) > 0 && !keep(m) {
			return errStop
		}
		msgs = append(msgs, Message{Line: n, Message: m})
		return nil
	})
	if err != nil && !errors.Is(err, errStop) {
		return nil, next, err
	}
	if reset == watcher.Truncated || reset == watcher.Replaced {
		env.Log.Info("log replaced while reading it; the range is read from its line 1", "path", path)
	}
	return msgs, next, nil
}
