package schedule

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/memwatch/memwatch/state"
)

func TestMonthBoundaryAndDST(t *testing.T) {
	ny, err := time.LoadLocation("America/New_York")
	if err != nil {
		t.Skip("no tzdata:", err)
	}
	monthly, _ := Parse("0 0 1 * *")
	// memwatch's own daily schedules run at 03:30, outside the hours a DST
	// change skips (02:00-03:00) or repeats (01:00-02:00) in most zones.
	daily, _ := Parse("30 3 * * *")
	tests := []struct {
		name      string
		sched     string
		last, now time.Time
		missed    bool
	}{
		{"month not over", "monthly", time.Date(2026, 1, 1, 0, 0, 0, 0, ny), time.Date(2026, 1, 31, 23, 59, 0, 0, ny), false},
		{"month boundary passed", "monthly", time.Date(2026, 1, 1, 0, 0, 0, 0, ny), time.Date(2026, 2, 1, 0, 0, 0, 0, ny), true},
		{"december to january", "monthly", time.Date(2025, 12, 1, 0, 0, 0, 0, ny), time.Date(2026, 1, 1, 0, 5, 0, 0, ny), true},
		{"dst spring forward: 23h day", "daily", time.Date(2026, 3, 7, 3, 30, 0, 0, ny), time.Date(2026, 3, 8, 3, 31, 0, 0, ny), true},
		{"dst spring forward: not yet", "daily", time.Date(2026, 3, 7, 3, 30, 0, 0, ny), time.Date(2026, 3, 8, 3, 29, 0, 0, ny), false},
		{"dst fall back: 25h day", "daily", time.Date(2026, 10, 31, 3, 30, 0, 0, ny), time.Date(2026, 11, 1, 3, 29, 0, 0, ny), false},
		{"dst fall back: due", "daily", time.Date(2026, 10, 31, 3, 30, 0, 0, ny), time.Date(2026, 11, 1, 3, 30, 0, 0, ny), true},
		{"never ran", "daily", time.Time{}, time.Date(2026, 11, 1, 2, 0, 0, 0, ny), false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := monthly
			if tt.sched == "daily" {
				s = daily
			}
			if got := Missed(s, tt.last, tt.now); got != tt.missed {
				t.Errorf("Missed(next after %v = %v, now %v) = %v, want %v", tt.last, s.Next(tt.last), tt.now, got, tt.missed)
			}
		})
	}
	// robfig/cron skips a local time that does not exist: a 02:30 schedule
	// has no run on the spring-forward day. This is why memwatch's own
	// schedules avoid that hour, and the README says so.
	skipped, _ := Parse("30 2 * * *")
	if next := skipped.Next(time.Date(2026, 3, 7, 3, 0, 0, 0, ny)); next.Day() != 9 {
		t.Errorf("next 02:30 run after 2026-03-07 03:00 = %v; robfig/cron changed its DST behaviour", next)
	}
}

func TestCatchUpRunsOnce(t *testing.T) {
	ctx := context.Background()
	db, err := state.Open(ctx, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	now := time.Date(2026, 2, 1, 9, 0, 0, 0, time.UTC)
	clock := func() time.Time { return now }
	runs := 0
	entry := Entry{Name: "rotate", Spec: "0 0 1 * *", Run: func() { runs++ }}
	s := New(db, slog.New(slog.NewTextHandler(t.Output(), nil)), time.UTC, clock)
	db.Put(ctx, ns, "rotate", []byte(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).Format(time.RFC3339)))
	if err := s.Add(ctx, []Entry{entry}); err != nil {
		t.Fatal(err)
	}
	if runs != 1 {
		t.Fatalf("catch-up runs = %d, want 1", runs)
	}
	// A second start the same day finds nothing missed.
	s2 := New(db, slog.New(slog.NewTextHandler(t.Output(), nil)), time.UTC, clock)
	if err := s2.Add(ctx, []Entry{entry}); err != nil {
		t.Fatal(err)
	}
	if runs != 1 {
		t.Errorf("runs after second start = %d, want 1", runs)
	}
}

func TestNextIsTheSoonestOfThePrefix(t *testing.T) {
	ctx := context.Background()
	db, err := state.Open(ctx, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	s := New(db, slog.New(slog.DiscardHandler), time.UTC, time.Now)
	err = s.Add(ctx, []Entry{
		{Name: "notes/compact", Spec: "@every 2h", Run: func() {}},
		{Name: "notes/sweep", Spec: "@every 1h", Run: func() {}},
		{Name: "notesbis/sweep", Spec: "@every 1m", Run: func() {}},
	})
	if err != nil {
		t.Fatal(err)
	}
	if got := s.Next("none/"); !got.IsZero() {
		t.Errorf("Next of no entry: got %v, want zero", got)
	}
	s.Start()
	defer s.Stop()
	got := s.Next("notes/")
	if d := time.Until(got); d < 55*time.Minute || d > 61*time.Minute {
		t.Errorf("Next(notes/): got %v from now, want the hourly sweep's, not notesbis's minute", d)
	}
}
