package jobs

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

func start(t *testing.T, cfg Config, run Runner) (*Engine, context.CancelFunc) {
	t.Helper()
	e := New(cfg, run, slog.New(slog.NewTextHandler(t.Output(), nil)))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- e.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	})
	return e, cancel
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(time.Minute) // a failure's bound, not a promise: a loaded machine is slow
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestOneJobPerRootAndGlobalLimit(t *testing.T) {
	var mu sync.Mutex
	perRoot := map[string]int{}
	running, maxRunning, maxPerRoot := 0, 0, 0
	var done atomic.Int64
	run := func(ctx context.Context, j Job) (Result, error) {
		mu.Lock()
		perRoot[j.Root]++
		running++
		maxRunning = max(maxRunning, running)
		maxPerRoot = max(maxPerRoot, perRoot[j.Root])
		mu.Unlock()
		time.Sleep(10 * time.Millisecond)
		mu.Lock()
		perRoot[j.Root]--
		running--
		mu.Unlock()
		done.Add(1)
		return Result{}, nil
	}
	e, _ := start(t, Config{MaxJobs: 3}, run)
	for _, root := range []string{"a", "b", "c", "d", "e"} {
		for _, target := range []string{"1", "2", "3"} {
			e.Submit(Job{Store: "s", Root: root, Rule: "r", Target: target})
		}
	}
	waitFor(t, "15 jobs", func() bool { return done.Load() == 15 })
	if maxPerRoot != 1 {
		t.Errorf("max concurrent jobs in one root = %d, want 1", maxPerRoot)
	}
	if maxRunning > 3 {
		t.Errorf("max concurrent jobs = %d, want <= 3", maxRunning)
	}
}

func TestMergeAndRerun(t *testing.T) {
	release := make(chan struct{})
	var runs atomic.Int64
	run := func(ctx context.Context, j Job) (Result, error) {
		if runs.Add(1) == 1 {
			<-release
		}
		return Result{}, nil
	}
	e, _ := start(t, Config{MaxJobs: 1}, run)
	j := Job{Store: "s", Root: "a", Rule: "r", Target: "x"}
	e.Submit(j)
	waitFor(t, "first run", func() bool { return runs.Load() == 1 })
	// Ten triggers while it runs: exactly one re-evaluation afterwards.
	for range 10 {
		e.Submit(j)
	}
	st, _ := e.Status(context.Background())
	close(release)
	waitFor(t, "rerun", func() bool { return runs.Load() == 2 })
	time.Sleep(50 * time.Millisecond)
	if got := runs.Load(); got != 2 {
		t.Errorf("runs = %d, want 2", got)
	}
	if st.Stats.Merged != 10 {
		t.Errorf("merged = %d, want 10", st.Stats.Merged)
	}
}

func TestRetryThenFailAndCooldown(t *testing.T) {
	var runs atomic.Int64
	var failed atomic.Int64
	run := func(ctx context.Context, j Job) (Result, error) {
		runs.Add(1)
		return Result{}, Retry(errors.New("endpoint returned 503"))
	}
	e, _ := start(t, Config{MaxAttempts: 3, Backoff: time.Millisecond, Cooldown: func(string) time.Duration { return time.Hour },
		OnFail: func(Job, error) { failed.Add(1) }}, run)
	j := Job{Store: "s", Root: "a", Rule: "r", Target: "x"}
	e.Submit(j)
	waitFor(t, "failure", func() bool { return failed.Load() == 1 })
	if got := runs.Load(); got != 3 {
		t.Errorf("attempts = %d, want 3", got)
	}
	// Cooling down: new triggers do not run the rule again.
	for range 5 {
		e.Submit(j)
	}
	time.Sleep(50 * time.Millisecond)
	if got := runs.Load(); got != 3 {
		t.Errorf("runs during cooldown = %d, want 3", got)
	}
	st, _ := e.Status(context.Background())
	if st.Cooling != 1 || st.Stats.Deferred != 1 {
		t.Errorf("cooling = %d, deferred = %d; want 1 and 1", st.Cooling, st.Stats.Deferred)
	}
}

// A rule whose target stays over its threshold after every rewrite must not
// loop: after a change it cools down, and the deferred evaluation runs once.
func TestCoolingRuleDoesNotLoop(t *testing.T) {
	var runs atomic.Int64
	run := func(ctx context.Context, j Job) (Result, error) {
		runs.Add(1)
		return Result{Changed: true}, nil
	}
	e, _ := start(t, Config{Cooldown: func(string) time.Duration { return 100 * time.Millisecond }}, run)
	j := Job{Store: "s", Root: "a", Rule: "compact", Target: "memory.md"}
	// The watcher would see our own rewrite and trigger again each time.
	stop := time.After(350 * time.Millisecond)
	for loop := true; loop; {
		select {
		case <-stop:
			loop = false
		default:
			e.Submit(j)
			time.Sleep(2 * time.Millisecond)
		}
	}
	// 350ms of constant triggers with a 100ms cooldown: at most 4 runs.
	if got := runs.Load(); got < 2 || got > 4 {
		t.Errorf("runs = %d, want 2..4", got)
	}
}

func TestExclusiveWaitsForRunningJob(t *testing.T) {
	release := make(chan struct{})
	var order []string
	var mu sync.Mutex
	run := func(ctx context.Context, j Job) (Result, error) {
		<-release
		mu.Lock()
		order = append(order, "job")
		mu.Unlock()
		return Result{}, nil
	}
	e, _ := start(t, Config{}, run)
	e.Submit(Job{Store: "s", Root: "a", Rule: "r", Target: "x"})
	time.Sleep(20 * time.Millisecond)
	go func() { time.Sleep(30 * time.Millisecond); close(release) }()
	err := e.Exclusive(context.Background(), "s", "a", "undo", func(context.Context) error {
		mu.Lock()
		order = append(order, "undo")
		mu.Unlock()
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(order) != 2 || order[0] != "job" || order[1] != "undo" {
		t.Errorf("order = %v, want [job undo]", order)
	}
}

func TestShutdownWaitsThenCancels(t *testing.T) {
	started := make(chan struct{})
	var cancelled atomic.Bool
	run := func(ctx context.Context, j Job) (Result, error) {
		close(started)
		<-ctx.Done()
		cancelled.Store(true)
		return Result{}, ctx.Err()
	}
	e := New(Config{ShutdownTimeout: 50 * time.Millisecond}, run, slog.New(slog.NewTextHandler(t.Output(), nil)))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- e.Run(ctx) }()
	e.Submit(Job{Store: "s", Root: "a", Rule: "r", Target: "x"})
	<-started
	t0 := time.Now()
	cancel()
	<-done
	if el := time.Since(t0); el < 50*time.Millisecond || el > 2*time.Second {
		t.Errorf("shutdown took %v, want about the 50ms timeout", el)
	}
	if !cancelled.Load() {
		t.Error("running job was not cancelled after the shutdown timeout")
	}
}

// TestStoppingEndsAStepwiseJob: a job working through steps sees Stopping
// once shutdown begins and ends at its next step, well before the timeout.
func TestStoppingEndsAStepwiseJob(t *testing.T) {
	started := make(chan struct{})
	var steps atomic.Int64
	run := func(ctx context.Context, j Job) (Result, error) {
		if Stopping(ctx) {
			t.Error("Stopping before shutdown")
		}
		close(started)
		for ctx.Err() == nil && !Stopping(ctx) {
			steps.Add(1)
			time.Sleep(10 * time.Millisecond)
		}
		return Result{}, ctx.Err()
	}
	e := New(Config{ShutdownTimeout: 10 * time.Second}, run, slog.New(slog.NewTextHandler(t.Output(), nil)))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- e.Run(ctx) }()
	e.Submit(Job{Store: "s", Root: "a", Rule: "r", Target: "x"})
	<-started
	t0 := time.Now()
	cancel()
	<-done
	if el := time.Since(t0); el > time.Second {
		t.Errorf("shutdown took %v; the job should have stopped at its next step", el)
	}
	if Stopping(context.Background()) {
		t.Error("Stopping outside a job")
	}
}

// TestTimeoutFreesTheSlot: a job that would run forever is cancelled at
// job_timeout, reported as failed for it, and the root's next job runs.
func TestTimeoutFreesTheSlot(t *testing.T) {
	var failed atomic.Value
	var second atomic.Bool
	run := func(ctx context.Context, j Job) (Result, error) {
		if j.Rule == "endless" {
			<-ctx.Done() // an endless query, interrupted by the deadline
			return Result{}, ctx.Err()
		}
		second.Store(true)
		return Result{}, nil
	}
	e, _ := start(t, Config{MaxJobs: 1, Timeout: 100 * time.Millisecond, OnFail: func(j Job, err error) { failed.Store(err) }}, run)
	e.Submit(Job{Store: "s", Root: "r", Rule: "endless"})
	e.Submit(Job{Store: "s", Root: "r", Rule: "next"})
	waitFor(t, "the next job", second.Load)
	err, _ := failed.Load().(error)
	if !errors.Is(err, ErrTimeout) {
		t.Errorf("OnFail got %v, want ErrTimeout", err)
	}
}
