// Package loglimit bounds a daemon's repeated log lines: an agent that
// deletes 200,000 logs, or swaps a directory for a symlink in a loop,
// must not make the daemon write a line per file.
package loglimit

import (
	"context"
	"log/slog"
	"sync"
	"time"
)

// The journal and memwatch status keep every event; the log says what
// kind happened and how often. A Limit bounds every repeated line at
// INFO and above.
const (
	// limitPerRoot lines of one message for one root (its "root"
	// attribute) are written each limitWindow...
	limitPerRoot = 5
	// ...and limitPerMessage of one message over all roots.
	limitPerMessage = 50
	limitWindow     = time.Minute
	// maxLimitKeys bounds the messages and roots counted at once.
	maxLimitKeys = 10_000
)

// Limit counts lines by message and root. Its state is shared by the
// handlers derived from it (With); safe for concurrent use.
type Limit struct {
	mu    sync.Mutex
	since time.Time
	byKey map[limitKey]*limitCount
	byMsg map[string]int
	now   func() time.Time
}

type limitKey struct{ msg, root string }

type limitCount struct {
	said, left int
	level      slog.Level
}

// limitHandler is a slog.Handler that writes through next what the
// Limit allows.
type limitHandler struct {
	next  slog.Handler
	limit *Limit
	root  string // a "root" attribute given by With
}

// New wraps log's handler in a Limit.
func New(log *slog.Logger) (*slog.Logger, *Limit) {
	l := &Limit{byKey: map[limitKey]*limitCount{}, byMsg: map[string]int{}, now: time.Now}
	l.since = l.now()
	return slog.New(&limitHandler{next: log.Handler(), limit: l}), l
}

func (h *limitHandler) Enabled(ctx context.Context, level slog.Level) bool {
	return h.next.Enabled(ctx, level)
}

func (h *limitHandler) WithAttrs(attrs []slog.Attr) slog.Handler {
	out := *h
	out.next = h.next.WithAttrs(attrs)
	for _, a := range attrs {
		if a.Key == "root" {
			out.root = a.Value.String()
		}
	}
	return &out
}

func (h *limitHandler) WithGroup(name string) slog.Handler {
	out := *h
	out.next = h.next.WithGroup(name)
	return &out
}

func (h *limitHandler) Handle(ctx context.Context, r slog.Record) error {
	if r.Level < slog.LevelInfo {
		return h.next.Handle(ctx, r)
	}
	root := h.root
	r.Attrs(func(a slog.Attr) bool {
		if a.Key == "root" {
			root = a.Value.String()
			return false
		}
		return true
	})
	if !h.limit.allow(r, root) {
		return nil
	}
	return h.next.Handle(ctx, r)
}

// allow counts a line and reports whether it is written.
func (l *Limit) allow(r slog.Record, root string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	k := limitKey{r.Message, root}
	c := l.byKey[k]
	if c == nil {
		if len(l.byKey) >= maxLimitKeys {
			k.root = "" // too many roots to count apart: counted together
			if c = l.byKey[k]; c == nil {
				c = &limitCount{}
				l.byKey[k] = c
			}
		} else {
			c = &limitCount{}
			l.byKey[k] = c
		}
	}
	if c.said < limitPerRoot && l.byMsg[r.Message] < limitPerMessage {
		c.said++
		l.byMsg[r.Message]++
		return true
	}
	c.left++
	c.level = max(c.level, r.Level)
	return false
}

// Flush says, once limitWindow has passed since the window began, how many
// lines of each message were left out in it (one line per message, through
// raw, the handler under the limit), and starts a new window.
func (l *Limit) Flush(raw *slog.Logger) {
	l.mu.Lock()
	if l.now().Sub(l.since) < limitWindow {
		l.mu.Unlock()
		return
	}
	type left struct {
		lines, roots int
		level        slog.Level
		root         string // one of them
	}
	by := map[string]*left{}
	for k, c := range l.byKey {
		if c.left == 0 {
			continue
		}
		e := by[k.msg]
		if e == nil {
			e = &left{level: c.level, root: k.root}
			by[k.msg] = e
		}
		e.lines += c.left
		e.roots++
		e.level = max(e.level, c.level)
	}
	window := l.now().Sub(l.since).Round(time.Second)
	l.byKey, l.byMsg, l.since = map[limitKey]*limitCount{}, map[string]int{}, l.now()
	l.mu.Unlock()
	for msg, e := range by {
		raw.Log(context.Background(), e.level, "more lines like this were left out of the log (the journal and memwatch status keep each event)",
			"like", msg, "lines", e.lines, "roots", e.roots, "root", e.root, "within", window.String())
	}
}
