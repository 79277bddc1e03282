package policy

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Size is a byte count written in policy files as "100KiB", "8KB", "64 MiB" or a bare integer.
type Size int64

var sizeUnits = []struct {
	suffix string
	mult   int64
}{
	// Longest suffixes first so "KiB" is not read as "B".
	{"KiB", 1 << 10}, {"MiB", 1 << 20}, {"GiB", 1 << 30},
	{"KB", 1000}, {"MB", 1000 * 1000}, {"GB", 1000 * 1000 * 1000},
	{"B", 1},
}

// ParseSize parses a size with an optional unit (B, KB, KiB, MB, MiB, GB, GiB).
func ParseSize(s string) (Size, error) {
	t := strings.TrimSpace(s)
	mult := int64(1)
	for _, u := range sizeUnits {
		if strings.HasSuffix(t, u.suffix) {
			mult = u.mult
			t = strings.TrimSpace(strings.TrimSuffix(t, u.suffix))
			break
		}
	}
	n, err := strconv.ParseFloat(t, 64)
	if err != nil || t == "" || n < 0 {
		return 0, fmt.Errorf("invalid size %q: want a number with an optional unit B, KB, KiB, MB, MiB, GB or GiB (e.g. 100KiB)", s)
	}
	return Size(n * float64(mult)), nil
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

// ParseDuration parses a Go duration, also accepting a "d" (24h day) unit, e.g. "90d" or "1d12h".
func ParseDuration(s string) (time.Duration, error) {
	t := strings.TrimSpace(s)
	var days float64
	if i := strings.IndexByte(t, 'd'); i >= 0 {
		n, err := strconv.ParseFloat(t[:i], 64)
		if err != nil {
			return 0, fmt.Errorf("invalid duration %q: want e.g. 500ms, 30s, 10m, 2h or 90d", s)
		}
		days, t = n, t[i+1:]
	}
	var rest time.Duration
	if t != "" {
		d, err := time.ParseDuration(t)
		if err != nil {
			return 0, fmt.Errorf("invalid duration %q: want e.g. 500ms, 30s, 10m, 2h or 90d", s)
		}
		rest = d
	}
	d := time.Duration(days*float64(24*time.Hour)) + rest
	if d < 0 {
		return 0, fmt.Errorf("invalid duration %q: must not be negative", s)
	}
	return d, nil
}

// FormatDuration renders a duration the way policies write it: whole days as "90d".
func FormatDuration(d time.Duration) string {
	day := 24 * time.Hour
	if d >= day && d%day == 0 {
		return fmt.Sprintf("%dd", d/day)
	}
	return d.String()
}
