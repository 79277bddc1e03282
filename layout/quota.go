package layout

import (
	"context"
	"log/slog"
	"sync"
	"time"
)

// Quota bounds the lines one kind of event writes to the log: the first
// QuotaLines of a kind in a root each QuotaWindow are said; the rest are
// counted, and one line says how many there were when the window is over
// (Flush, called every few seconds). An agent that deletes a million
// session logs makes a few lines a minute, not a million. Safe for
// concurrent use; a nil Quota allows everything.
type Quota struct {
	mu sync.Mutex
	m  map[quotaKey]*quotaCount
}

// Quota's bounds.
const (
	QuotaLines  = 5
	QuotaWindow = time.Minute
)

type quotaKey struct{ root, kind string }

type quotaCount struct {
	since      time.Time
	said, more int
	msg        string
	log        *slog.Logger
	level      slog.Level
}

// maxQuota bounds the roots and kinds counted at once.
const maxQuota = 10_000

// Allow reports whether an event of kind in root may be logged now; when
// not, it is counted, to be summed up by Flush as msg at level.
func (q *Quota) Allow(log *slog.Logger, level slog.Level, root, kind, msg string) bool {
	if q == nil {
		return true
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.m == nil || len(q.m) >= maxQuota {
		q.m = map[quotaKey]*quotaCount{}
	}
	k := quotaKey{root, kind}
	c := q.m[k]
	if c == nil || time.Since(c.since) >= QuotaWindow && c.more == 0 {
		c = &quotaCount{since: time.Now()}
		q.m[k] = c
	}
	if c.said < QuotaLines {
		c.said++
		return true
	}
	c.more++
	c.msg, c.log, c.level = msg, log, level
	return false
}

// Flush says, for each root and kind whose window is over, how many
// events were not logged in it, and forgets it.
func (q *Quota) Flush() {
	if q == nil {
		return
	}
	q.mu.Lock()
	var due []quotaCount
	var keys []quotaKey
	for k, c := range q.m {
		if time.Since(c.since) >= QuotaWindow {
			if c.more > 0 {
				due = append(due, *c)
				keys = append(keys, k)
			}
			delete(q.m, k)
		}
	}
	q.mu.Unlock()
	for i, c := range due {
		c.log.Log(context.Background(), c.level, c.msg+" (more of them: each is not logged, only how many)", "root", keys[i].root, "more", c.more, "within", QuotaWindow.String())
	}
}
