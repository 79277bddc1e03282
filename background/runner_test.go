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

// TestHoldIndexingUntilRelease: a held runner runs captures and versions
// as they come and keeps indexing queued, none dropped, until Release.
func TestHoldIndexingUntilRelease(t *testing.T) {
	ran := make(chan string, 16)
	b := NewRunner(func(ctx context.Context, tk Task) { ran <- tk.Kind.String() + ":" + tk.Rel }, slog.New(slog.DiscardHandler))
	b.HoldIndexing()
	b.Start()
	defer b.Stop()

	b.Queue(Task{Kind: IndexRoot, Rel: "a"})
	b.Queue(Task{Kind: Index, Rel: "b"})
	b.Queue(Task{Kind: Capture, Rel: "log"})
	b.After(Task{Kind: Version, Rel: "memory.md"}, 0)
	next := func() string {
		select {
		case r := <-ran:
			return r
		case <-time.After(5 * time.Second):
			t.Fatal("no task ran")
			return ""
		}
	}
	var got []string
	for range 2 {
		got = append(got, next())
	}
	slices.Sort(got)
	if want := []string{"capture:log", "version:memory.md"}; !slices.Equal(got, want) {
		t.Fatalf("before the release: got %v, want %v", got, want)
	}
	select {
	case r := <-ran:
		t.Fatalf("%s ran before the release", r)
	case <-time.After(100 * time.Millisecond): // an index task would run at once
	}
	// The count is stored once the last capture's run returns.
	for deadline := time.Now().Add(5 * time.Second); b.Queued.Load() != 2 && time.Now().Before(deadline); {
		time.Sleep(time.Millisecond)
	}
	if q := b.Queued.Load(); q != 2 {
		t.Errorf("queued before the release: %d, want the 2 index tasks", q)
	}
	b.Release()
	b.Release() // twice is fine
	got = []string{next(), next()}
	if want := []string{"index-root:a", "index:b"}; !slices.Equal(got, want) {
		t.Errorf("after the release: got %v, want %v", got, want)
	}
}
