package ui

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"path/filepath"
	"time"

	"github.com/fsnotify/fsnotify"

	"github.com/memwatch/memwatch/state"
	"github.com/memwatch/memwatch/versions"
)

// Live updates: the hub watches the state directory for writes to the
// journal and the versions databases (and their write-ahead logs) and
// wakes every subscribed page; a page's event stream then says "change"
// and the page fetches itself again. Writes come in bursts (a compaction
// journals a pending record, then its outcome): the hub waits for
// settle after the first before it wakes anyone.
const (
	settle    = 150 * time.Millisecond
	heartbeat = 25 * time.Second // keeps proxies and the browser from closing a quiet stream
	// maxSubscribers bounds the open event streams; past it a page
	// still works, without live updates.
	maxSubscribers = 256
)

// hub's goroutine (run) owns the subscribers, the pending timer and the
// change count; pages reach it through its channels.
type hub struct {
	dir   string
	log   *slog.Logger
	sub   chan chan uint64
	unsub chan chan uint64
	done  chan struct{} // closed when run returns
}

func newHub(dir string, log *slog.Logger) *hub {
	return &hub{dir: dir, log: log, sub: make(chan chan uint64), unsub: make(chan chan uint64), done: make(chan struct{})}
}

// watched reports whether a write to name in the state directory changes
// what the pages show.
func watched(name string) bool {
	for _, db := range []string{state.FileName, versions.FileName} {
		if name == db || name == db+"-wal" {
			return true
		}
	}
	return false
}

func (h *hub) run(ctx context.Context) error {
	defer close(h.done)
	// Without a watch the pages still work; they are just not live.
	var events <-chan fsnotify.Event
	var errs <-chan error
	if w, err := fsnotify.NewWatcher(); err != nil {
		h.log.Warn("the review pages will not update live", "state_dir", h.dir, "err", err)
	} else {
		defer w.Close()
		if err := w.Add(h.dir); err != nil {
			h.log.Warn("the review pages will not update live", "state_dir", h.dir, "err", err)
		}
		events, errs = w.Events, w.Errors
	}
	subs := map[chan uint64]bool{}
	var seq uint64
	var timer <-chan time.Time
	for {
		select {
		case <-ctx.Done():
			for c := range subs {
				close(c)
			}
			return nil
		case c := <-h.sub:
			if len(subs) >= maxSubscribers {
				close(c)
				continue
			}
			subs[c] = true
		case c := <-h.unsub:
			if subs[c] {
				delete(subs, c)
				close(c)
			}
		case ev, ok := <-events:
			if !ok {
				return nil
			}
			if ev.Op&(fsnotify.Write|fsnotify.Create) != 0 && watched(filepath.Base(ev.Name)) && timer == nil {
				timer = time.After(settle)
			}
		case err, ok := <-errs:
			if !ok {
				return nil
			}
			h.log.Debug("watching the state directory", "err", err)
		case <-timer:
			timer = nil
			seq++
			for c := range subs {
				select {
				case c <- seq:
				default: // it has one waiting: that is enough
				}
			}
		}
	}
}

// subscribe returns a channel that receives the change count after each
// change; it is closed when the hub stops or has too many subscribers.
func (h *hub) subscribe(ctx context.Context) (chan uint64, bool) {
	c := make(chan uint64, 1)
	select {
	case h.sub <- c:
		return c, true
	case <-ctx.Done():
	case <-h.done:
	}
	return nil, false
}

// unsubscribe stops c's updates (the hub may have stopped already).
func (h *hub) unsubscribe(c chan uint64) {
	select {
	case h.unsub <- c:
	case <-h.done:
	}
}

// events streams "change" events to a page (server-sent events).
func (s *Server) events(w http.ResponseWriter, r *http.Request) {
	fl, ok := w.(http.Flusher)
	if !ok {
		http.Error(w, "streaming is not supported here", http.StatusNotImplemented)
		return
	}
	c, ok := s.hub.subscribe(r.Context())
	if !ok {
		return
	}
	defer s.hub.unsubscribe(c)
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	fmt.Fprint(w, "retry: 2000\n\n")
	fl.Flush()
	beat := time.NewTicker(heartbeat)
	defer beat.Stop()
	for {
		select {
		case <-r.Context().Done():
			return
		case n, ok := <-c:
			if !ok {
				return
			}
			fmt.Fprintf(w, "event: change\ndata: %d\n\n", n)
			fl.Flush()
		case <-beat.C:
			fmt.Fprint(w, ":\n\n")
			fl.Flush()
		}
	}
}
