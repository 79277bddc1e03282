package policy

import (
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/dustin/go-humanize"
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
func Human(n int64) string {
	units := []string{"B", "KiB", "MiB", "GiB", "TiB"}
	v, u := float64(n), 0
	for v >= 1024 && u < len(units)-1 {
		v /= 1024
		u++
	}
	if u == 0 || v >= 10 {
		return fmt.Sprintf("%.0f %s", v, units[u])
	}
	return fmt.Sprintf("%.1f %s", v, units[u])
}

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
func ParseDuration(s string) (time.Duration, error) {
	t := strings.TrimSpace(s)
	d, err := time.ParseDuration(t)
	if err != nil {
		d, err = parseLongDuration(t)
	}
	if err != nil {
		return 0, fmt.Errorf("invalid duration %q: want e.g. 500ms, 30s, 10m, 2h or 90d", s)
	}
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

// longUnits are the units Prometheus durations add to Go's, with the
// ones they share (a year is 365 days, as Prometheus counts it).
var longUnits = map[string]time.Duration{"y": 365 * 24 * time.Hour, "w": 7 * 24 * time.Hour, "d": 24 * time.Hour, "h": time.Hour, "m": time.Minute, "s": time.Second, "ms": time.Millisecond}

// parseLongDuration parses a Prometheus duration: whole numbers with
// units from the largest down, each at most once ("90d", "1d12h", "2w").
func parseLongDuration(s string) (time.Duration, error) {
	order := []string{"y", "w", "d", "h", "m", "s", "ms"}
	var d time.Duration
	next := 0
	for s != "" {
		i := 0
		for i < len(s) && s[i] >= '0' && s[i] <= '9' {
			i++
		}
		j := i
		for j < len(s) && (s[j] < '0' || s[j] > '9') {
			j++
		}
		if i == 0 || i > 12 {
			return 0, fmt.Errorf("not a duration: %q", s)
		}
		n, _ := strconv.ParseInt(s[:i], 10, 64)
		u := s[i:j]
		k := slices.Index(order[next:], u)
		if k < 0 {
			return 0, fmt.Errorf("not a duration unit, or out of order: %q", u)
		}
		next += k + 1
		if n > int64(math.MaxInt64/longUnits[u]) || d > math.MaxInt64-time.Duration(n)*longUnits[u] {
			return 0, fmt.Errorf("duration too long: %q", s)
		}
		d += time.Duration(n) * longUnits[u]
		s = s[j:]
	}
	return d, nil
}
