package control

import (
	"strings"
	"testing"
	"time"
)

func TestFormatJournal(t *testing.T) {
	rec := Record{ID: 12, Time: time.Date(2026, 11, 27, 14, 3, 11, 0, time.Local), Store: "claude", Root: "/home/a/billing", Rule: "compress-memory",
		Target: "MEMORY.md", Outcome: "done", BeforeSize: 15 << 10, AfterSize: 8 << 10, Trigger: "change", Archive: "memory/MEMORY-2026-11-27-1403.md",
		Reason: "MEMORY.md has 247 lines, over memory_max_lines 200; 140 fact(s) moved to memory/memory-older-2026-11.md and the rules kept"}
	size := func(n int64) string { return map[int64]string{15 << 10: "15 KiB", 8 << 10: "8.0 KiB"}[n] }
	tests := []struct {
		name  string
		width int
		want  string
	}{
		{"one line each", 0, `12  2026-11-27 14:03:11  done  compress-memory  billing/MEMORY.md  15 KiB → 8.0 KiB  (store claude, by change)
    MEMORY.md has 247 lines, over memory_max_lines 200; 140 fact(s) moved to memory/memory-older-2026-11.md and the rules kept
    archive: memory/MEMORY-2026-11-27-1403.md
`},
		{"wrapped to 100", 100, `12  2026-11-27 14:03:11  done  compress-memory  billing/MEMORY.md  15 KiB → 8.0 KiB
    (store claude, by change)
    MEMORY.md has 247 lines, over memory_max_lines 200; 140 fact(s) moved to
    memory/memory-older-2026-11.md and the rules kept
    archive: memory/MEMORY-2026-11-27-1403.md
`},
		{"wrapped to 60", 60, `12  2026-11-27 14:03:11  done  compress-memory  billing/MEMORY.md
    15 KiB → 8.0 KiB (store claude, by change)
    MEMORY.md has 247 lines, over memory_max_lines 200; 140
    fact(s) moved to memory/memory-older-2026-11.md and the
    rules kept
    archive: memory/MEMORY-2026-11-27-1403.md
`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := FormatJournal([]Record{rec}, Format{Width: tt.width, Size: size})
			if got != tt.want {
				t.Errorf("got\n%s\nwant\n%s", got, tt.want)
			}
			for _, line := range strings.Split(got, "\n") {
				// The header's first five fields are never cut (a narrower
				// terminal wraps them): every other line fits.
				if tt.width >= 100 && len([]rune(line)) > tt.width {
					t.Errorf("line of %d columns, over %d: %q", len([]rune(line)), tt.width, line)
				}
			}
		})
	}
	if got, want := FormatJournal(nil, Format{Filtered: true}), "no journal record matches\n"; got != want {
		t.Errorf("empty, filtered: got %q, want %q", got, want)
	}
}
