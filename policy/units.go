package policy

import (
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/dustin/go-humanize"

	"github.com/memwatch/memwatch/control"
)

// Size is a byte count written in policy files as "100KiB", "8KB", "64 MiB" or a bare integer.
type Size int64

// ParseSize parses a size with an optional unit: B, KB, KiB, MB, MiB, GB,
// GiB and the others go-humanize reads (1 KB is 1000 bytes, 1 KiB 1024).
func ParseSize(s string) (Size, error) {
	n, err := humanize.ParseBytes(strings.TrimSpace(s))
	if err != nil || n > math.MaxInt64 {
		return 0, fmt.Errorf("invalid size %q: want a number with an optional unit B, KB, KiB, MB, MiB, GB or GiB (e.g. 100KiB)", s)
	}
	return Size(n), nil
}

// String renders the size with the largest binary unit that divides it.
func (s Size) String() string {
	switch {
	case s >= 1<<30 && s%(1<<30) == 0:
		return fmt.Sprintf("%dGiB", s>>30)
	case s >= 1<<20 && s%(1<<20) == 0:
		return fmt.Sprintf("%dMiB", s>>20)
	case s >= 1<<10 && s%(1<<10) == 0:
		return fmt.Sprintf("%dKiB", s>>10)
	}
	return fmt.Sprintf("%dB", int64(s))
}

// Human renders a size as a person reads it: "149 KiB", "2.5 MiB", "812 B"
// (a whole number from 10 of a unit up, one decimal under).
func Human(n int64) string { return control.Human(n) }

// HumanApart renders two sizes to compare ("15 KiB, over 25 KiB" must
// never read "8.0 KiB, over 8.0 KiB"): as Human, or as exact bytes when
// Human says the same of both.
func HumanApart(a, b int64) (string, string) {
	ha, hb := Human(a), Human(b)
	if ha == hb && a != b {
		return fmt.Sprintf("%d B", a), fmt.Sprintf("%d B", b)
	}
	return ha, hb
}

// ParseDuration parses a Go duration ("1.5h", "500ms") or a Prometheus one,
// which adds days, weeks and years ("90d", "1d12h", "2w").
func ParseDuration(s string) (time.Duration, error) { return control.ParseDuration(s) }

// FormatDuration renders a duration the way policies write it: whole days as "90d".
func FormatDuration(d time.Duration) string {
	day := 24 * time.Hour
	if d >= day && d%day == 0 {
		return fmt.Sprintf("%dd", d/day)
	}
	return d.String()
}
