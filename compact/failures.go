package compact

import (
	"errors"
	"log/slog"
	"net"
	"strings"
	"sync"
	"time"
)

// Failures of an endpoint change what memwatch does (a raw fallback
// instead of a summary, a job deferred): an operator must see them in the
// log, without a line per job when a thousand jobs meet the same dead
// endpoint. The first failure of a burst is logged at WARN with its cause;
// the ones that follow are counted, and said every failureReport while the
// burst lasts, when the cause changes, and when the endpoint answers again.

// failureReport is how often a burst of failures is said again.
const failureReport = 5 * time.Minute

// failures tracks one endpoint's burst of failures. Safe for concurrent use.
type failures struct {
	mu       sync.Mutex
	burst    bool
	cause    string
	count    int // failures since the last line about them
	reported time.Time
}

// Cause classifies an endpoint's error for the log and the metric.
func Cause(err error) string {
	msg := err.Error()
	var ne net.Error
	switch {
	case errors.Is(err, ErrBudget):
		return "budget"
	case strings.Contains(msg, "does not follow redirects"):
		return "redirect"
	case strings.Contains(msg, "status code: 401"), strings.Contains(msg, "status code: 403"):
		return "unauthorized"
	case strings.Contains(msg, "connection refused"), strings.Contains(msg, "no such host"), strings.Contains(msg, "network is unreachable"):
		return "unreachable"
	case errors.As(err, &ne) && ne.Timeout(), strings.Contains(msg, "deadline exceeded"), strings.Contains(msg, "timeout"):
		return "timeout"
	case strings.Contains(msg, "status code: 429"):
		return "rate-limited"
	case strings.Contains(msg, "status code: 5"):
		return "server-error"
	}
	return "error"
}

// failed records a failure and logs it when it starts a burst, changes
// its cause, or the burst has gone on for failureReport.
func (f *failures) failed(log *slog.Logger, endpoint, baseURL string, err error, now time.Time) string {
	cause := Cause(err)
	f.mu.Lock()
	defer f.mu.Unlock()
	switch {
	case !f.burst || cause != f.cause:
		log.Warn("llm endpoint failed; memwatch falls back (the raw entry, the heuristic, or the job waits) and tries it again with the next job",
			"endpoint", endpoint, "base_url", baseURL, "cause", cause, "err", err)
		f.burst, f.cause, f.count, f.reported = true, cause, 0, now
	case now.Sub(f.reported) >= failureReport:
		f.count++
		log.Warn("llm endpoint still failing", "endpoint", endpoint, "base_url", baseURL, "cause", cause, "failures", f.count, "since", f.reported.Format(time.RFC3339), "err", err)
		f.count, f.reported = 0, now
	default:
		f.count++
	}
	return cause
}

// answered ends a burst, saying how many failures it had.
func (f *failures) answered(log *slog.Logger, endpoint string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.burst {
		log.Info("llm endpoint answers again", "endpoint", endpoint, "failures_not_logged", f.count, "cause_was", f.cause)
		f.burst, f.count = false, 0
	}
}
