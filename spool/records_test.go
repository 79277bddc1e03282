package spool

import (
	"context"
	"testing"
	"time"
)

// TestHeldRecordsAreDated: a database's conversation, captured as records,
// is held by the spool; each held record says when it was captured (memwatch
// secrets printed the zero time, 0001-01-01, for every one).
func TestHeldRecordsAreDated(t *testing.T) {
	ctx := context.Background()
	s := newSpool(t)
	at := time.Date(2026, 11, 30, 15, 0, 0, 0, time.UTC)
	s.Now = func() time.Time { return at }
	root := openRoot(t, t.TempDir())
	recs := []Record{{Key: 1, Data: []byte(`{"role":"user","content":"hello"}`)}, {Key: 2, Data: []byte(`{"role":"assistant","content":"hi"}`)}}
	if _, err := s.CaptureRecords(ctx, root.ID(), "agent.db#s1", recs, Options{IsMessage: func([]byte, bool) bool { return true }}); err != nil {
		t.Fatal(err)
	}
	n := 0
	if err := s.HeldLines(ctx, root, func(h HeldLine) error {
		n++
		if !h.Time.Equal(at) {
			t.Errorf("held %s#L%d captured at %v, want %v", h.Path, h.Line, h.Time, at)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if n != 2 {
		t.Errorf("%d records held, want 2", n)
	}
}
