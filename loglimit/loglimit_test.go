package loglimit

import (
	"bytes"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"
)

// Every repeated line is bounded per root and message, and the rest are
// counted in one line per message when the window ends.
func TestLogLimit(t *testing.T) {
	var buf bytes.Buffer
	raw := slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug}))
	log, limit := New(raw)
	now := time.Now()
	limit.now = func() time.Time { return now }
	limit.since = now
	store := log.With("store", "s")
	for i := range 10_000 {
		store.Info("session log gone", "root", fmt.Sprintf("/r%d", i%3), "log", i)
		log.With("root", "/churn").Info("root removed")
		log.Debug("change", "root", "/r0")
	}
	log.Error("once", "root", "/r0")
	lines := strings.Count(buf.String(), "\n")
	if want := 3*limitPerRoot + limitPerRoot + 10_000 + 1; lines != want {
		t.Errorf("%d lines, want %d (5 per root and message, every debug line)", lines, want)
	}
	buf.Reset()
	limit.Flush(raw)
	if buf.Len() != 0 {
		t.Errorf("flushed before the window ended: %s", buf.String())
	}
	now = now.Add(limitWindow)
	limit.Flush(raw)
	out := buf.String()
	if strings.Count(out, "\n") != 2 || !strings.Contains(out, `like="session log gone" lines=9985 roots=3`) || !strings.Contains(out, `like="root removed" lines=9995 roots=1`) {
		t.Errorf("the summaries:\n%s", out)
	}
	// A new window: lines are said again.
	buf.Reset()
	store.Info("session log gone", "root", "/r0")
	if buf.Len() == 0 {
		t.Error("a new window said nothing")
	}
	// Many roots: at most limitPerMessage lines of one message.
	buf.Reset()
	for i := range 1000 {
		log.Info("new root", "root", fmt.Sprintf("/n%d", i))
	}
	if n := strings.Count(buf.String(), "\n"); n != limitPerMessage {
		t.Errorf("%d lines of one message over 1000 roots, want %d", n, limitPerMessage)
	}
}
