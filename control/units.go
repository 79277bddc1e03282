package control

import (
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"
)

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
