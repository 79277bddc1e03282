package background

import (
	"context"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"time"
)

// TestBackgroundUrgentFirst: while a task runs, the captures and versions
// asked for meanwhile run before the indexing asked for earlier, in the
// order they came; a burst of asks for one task is one run.
func TestBackgroundUrgentFirst(t *testing.T) {
	var mu sync.Mutex
	var ran []string
	release := make(chan struct{})
	done := make(chan struct{})
	b := NewRunner(func(ctx context.Context, tk Task) {
		if tk.Rel == "first" {
			<-release
		}
		mu.Lock()
		ran = append(ran, tk.Kind.String()+":"+tk.Rel)
		n := len(ran)
		mu.Unlock()
		if n == 6 {
			close(done)
		}
	}, slog.New(slog.DiscardHandler))
	b.Start()
	defer b.Stop()

	b.Queue(Task{Kind: Index, Rel: "first"})
	time.Sleep(50 * time.Millisecond) // "first" runs, and blocks
	b.Queue(Task{Kind: Index, Rel: "a"})
	b.Queue(Task{Kind: IndexRoot, Rel: "b"})
	b.After(Task{Kind: Version, Rel: "memory.md"}, 0)
	b.Queue(Task{Kind: Capture, Rel: "log"})
	b.Queue(Task{Kind: Capture, Rel: "log"}) // joins the one queued
	b.Queue(Task{Kind: Index, Rel: "c"})
	time.Sleep(50 * time.Millisecond)
	close(release)
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatalf("tasks did not all run: %v", ran)
	}
	time.Sleep(50 * time.Millisecond) // a seventh run would show here
	mu.Lock()
	defer mu.Unlock()
	want := []string{"index:first", "version:memory.md", "capture:log", "index:a", "index-root:b", "index:c"}
	if !slices.Equal(ran, want) {
		t.Errorf("order: got %v, want %v", ran, want)
	}
}
