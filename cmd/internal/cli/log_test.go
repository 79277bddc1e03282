package cli

import (
	"testing"
	"time"
)

func TestParseWhen(t *testing.T) {
	now := time.Date(2026, 11, 27, 14, 30, 0, 0, time.Local)
	tests := []struct {
		in   string
		want time.Time
		bad  bool
	}{
		{in: "2026-11-20", want: time.Date(2026, 11, 20, 0, 0, 0, 0, time.Local)},
		{in: "2026-11-20 09:15", want: time.Date(2026, 11, 20, 9, 15, 0, 0, time.Local)},
		{in: "2026-11-20 09:15:30", want: time.Date(2026, 11, 20, 9, 15, 30, 0, time.Local)},
		{in: "2026-11-20T09:15:30Z", want: time.Date(2026, 11, 20, 9, 15, 30, 0, time.UTC)},
		{in: "today", want: time.Date(2026, 11, 27, 0, 0, 0, 0, time.Local)},
		{in: "yesterday", want: time.Date(2026, 11, 26, 0, 0, 0, 0, time.Local)},
		{in: "2h", want: now.Add(-2 * time.Hour)},
		{in: "-90m", want: now.Add(-90 * time.Minute)},
		{in: "3d ago", want: now.Add(-72 * time.Hour)},
		{in: "last tuesday", bad: true},
		{in: "", bad: true},
		{in: "99999999999999999999h", bad: true},
		{in: "2026-13-40", bad: true},
	}
	for _, tt := range tests {
		got, err := parseWhen(tt.in, now)
		if tt.bad {
			if err == nil {
				t.Errorf("parseWhen(%q) = %v, want an error", tt.in, got)
			}
			continue
		}
		if err != nil || !got.Equal(tt.want) {
			t.Errorf("parseWhen(%q) = %v, %v; want %v", tt.in, got, err, tt.want)
		}
	}
}

func FuzzParseWhen(f *testing.F) {
	for _, s := range []string{"2026-11-20", "2h", "yesterday", "-1d", "2026-11-20T09:15:30Z"} {
		f.Add(s)
	}
	now := time.Now()
	f.Fuzz(func(t *testing.T, s string) {
		got, err := parseWhen(s, now)
		if err == nil && got.IsZero() {
			t.Errorf("parseWhen(%q): the zero time and no error", s)
		}
	})
}
