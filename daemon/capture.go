package daemon

import (
	"context"
	"log/slog"
	"path/filepath"
	"sync"

	"github.com/memwatch/memwatch/layout"
	"github.com/memwatch/memwatch/session"
	"github.com/memwatch/memwatch/spool"
)

// The spool captures a session log's lines as soon as the watcher sees it
// written, not after the store's settle time: an agent that trims its log
// a moment after writing it loses nothing. Rules capture again before they
// read, so a capture missed here (a full queue) is only later, never lost.

// captureKey names one log of one root.
type captureKey struct{ store, root, rel string }

// capturer runs captures one at a time. Its goroutine owns the pending
// set; the watcher only sends to it, without ever blocking.
type capturer struct {
	in   chan captureKey
	run  func(context.Context, captureKey)
	log  *slog.Logger
	wg   sync.WaitGroup
	stop context.CancelFunc
}

func newCapturer(run func(context.Context, captureKey), log *slog.Logger) *capturer {
	return &capturer{in: make(chan captureKey, 4096), run: run, log: log}
}

// Start runs the capture loop until Stop.
func (c *capturer) Start() {
	ctx, cancel := context.WithCancel(context.Background())
	c.stop = cancel
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		pending := map[captureKey]bool{}
		var order []captureKey
		for {
			if len(order) == 0 {
				select {
				case <-ctx.Done():
					return
				case k := <-c.in:
					pending[k], order = true, append(order, k)
				}
			}
			// Take everything queued meanwhile, so a burst of writes to one
			// log is one capture.
			for drained := false; !drained; {
				select {
				case k := <-c.in:
					if !pending[k] {
						pending[k], order = true, append(order, k)
					}
				default:
					drained = true
				}
			}
			k := order[0]
			order = order[1:]
			delete(pending, k)
			c.run(ctx, k)
			if ctx.Err() != nil {
				return
			}
		}
	}()
}

// Stop ends the loop after the capture in progress and waits for it.
func (c *capturer) Stop() {
	if c.stop != nil {
		c.stop()
	}
	c.wg.Wait()
}

// Queue asks for a capture; when the queue is full it is skipped (the
// rules capture before they read anyway).
func (c *capturer) Queue(k captureKey) {
	select {
	case c.in <- k:
	default:
	}
}

// onTouched runs on the watcher goroutine for every write under a root: a
// session log of the store's layout is queued for capture.
func (d *Daemon) onTouched(store, root, path string) {
	rt := d.store(store)
	if rt == nil {
		return
	}
	sl, ok := rt.layout.(layout.SessionLogs)
	if !ok {
		return
	}
	rel, err := filepath.Rel(root, path)
	if err != nil || !filepath.IsLocal(rel) {
		return
	}
	for _, g := range sl.Logs(rt.store) {
		if ok, _ := filepath.Match(g, rel); ok {
			d.capture.Queue(captureKey{store: store, root: root, rel: rel})
			return
		}
	}
}

// captureLog runs on the capturer's goroutine.
func (d *Daemon) captureLog(ctx context.Context, k captureKey) {
	rt := d.store(k.store)
	if rt == nil {
		return
	}
	root, err := openRoot(rt.store, k.root)
	if err != nil {
		return // the evaluation job reports a refused root
	}
	defer root.Close()
	res, err := d.spool.Capture(ctx, root, k.rel, spool.Options{MaxLine: int(rt.store.MaxLine), IsMessage: session.IsMessage})
	if err != nil {
		if !layout.IsRefusal(err) && ctx.Err() == nil {
			d.log.Debug("capture on write failed; the rule captures before it reads", "root", k.root, "log", k.rel, "err", err)
		}
		return
	}
	d.metrics.captured.Add(float64(res.Lines))
}
