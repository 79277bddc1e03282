package e2e

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/memwatch/memwatch/layout/nowhistory"
	"github.com/memwatch/memwatch/rewrite"
	"github.com/memwatch/memwatch/rewrite/writertest"
	"github.com/memwatch/memwatch/state"
)

// TestCrashConsistency SIGKILLs the real memwatch at a random moment while
// it archives and rewrites oversize memory files, restarts it, and checks
// after every kill that nothing was lost: each target is its pre-image or
// its post-image byte for byte; a changed target has an archive equal to its
// pre-image; after the restart no temp file remains, no journal record is
// left pending, and the journal agrees with the files.
// MEMWATCH_CRASH_ITERATIONS sets the size (make soak runs 2,000).
func TestCrashConsistency(t *testing.T) {
	iterations := 40
	if s := os.Getenv("MEMWATCH_CRASH_ITERATIONS"); s != "" {
		iterations, _ = strconv.Atoi(s)
	}
	if testing.Short() {
		iterations = 20
	}
	seed := uint64(time.Now().UnixNano())
	rng := rand.New(rand.NewPCG(seed, 7))
	t.Logf("seed %d, %d iterations", seed, iterations)

	dir := t.TempDir()
	stateDir := filepath.Join(dir, "state")
	const nRoots = 3
	var roots []string
	for r := range nRoots {
		root := filepath.Join(dir, "apps", fmt.Sprintf("r%d", r))
		os.MkdirAll(root, 0o755)
		roots = append(roots, root)
	}
	pol := writePolicy(t, dir, fmt.Sprintf("stores:\n  - name: apps\n    layout: now-history\n    paths: [%q]\n    settle: 20ms\n    max_size: 4KiB\n    keep_history: 3\n", filepath.Join(dir, "apps", "*")))

	// An agent writes to a fourth root all the while, in rounds, with each
	// kind of writer that does not hold the file open: nothing it writes
	// may be lost, whenever memwatch is killed.
	agent := filepath.Join(dir, "apps", "agent")
	os.MkdirAll(agent, 0o755)
	os.WriteFile(filepath.Join(agent, "memory.md"), bigMemory(20, "agent"), 0o644)
	agentKinds := []string{"reopen", "rewrite", "truncate", "inplace"}
	agentWrites := map[string]int{}

	var killedBefore, killedBetween, killedAfter int
	// The kill lands at a random instant up to maxDelay after the start.
	// How long the daemon takes to reach its rewrites depends on the
	// machine's load: the range widens while no kill has landed after a
	// swap, and narrows while none has landed before one. Under make
	// test's load every kill of 40 came before the swaps (the range had
	// grown to 480 ms): it adapts every 5 iterations, and the run goes on,
	// up to twice its iterations, until kills have landed on both sides.
	maxDelay := 60 * time.Millisecond
	for it := 0; it < iterations || (killedBefore == 0 || killedAfter == 0) && it < 2*iterations; it++ {
		if it > 0 && it%5 == 0 {
			switch {
			case killedAfter == 0 && maxDelay < 4*time.Second:
				maxDelay *= 2
			case killedBefore == 0 && maxDelay > 10*time.Millisecond:
				maxDelay /= 2
			}
		}
		pre := make([][]byte, nRoots)
		post := make([][]byte, nRoots)
		known := make([]map[string]bool, nRoots)
		for r, root := range roots {
			pre[r] = bigMemory(600+rng.IntN(600), fmt.Sprintf("it%d-r%d", it, r))
			post[r], _ = nowhistory.CompactHeuristic(pre[r], 3)
			known[r] = listArchives(root)
			if err := os.WriteFile(filepath.Join(root, "memory.md"), pre[r], 0o644); err != nil {
				t.Fatal(err)
			}
		}
		// Run and kill at a random instant: before, during or after the rewrites.
		kind := fmt.Sprintf("%s/it%d", agentKinds[it%len(agentKinds)], it)
		agentWrites[kind] = 20
		writer := writertest.Start(t, writertest.Run{Kind: kind, Path: filepath.Join(agent, "memory.md"), N: 20, Every: 2 * time.Millisecond})
		p := startBin(t, memwatchFast, "--policy", pol, "--state-dir", stateDir)
		time.Sleep(time.Duration(rng.Int64N(int64(maxDelay))))
		p.cmd.Process.Signal(syscall.SIGKILL)
		<-p.done
		if err := <-writer; err != nil {
			t.Fatalf("iteration %d: agent writer: %v", it, err)
		}

		for r, root := range roots {
			cur, err := os.ReadFile(filepath.Join(root, "memory.md"))
			if err != nil {
				t.Fatalf("iteration %d: %v", it, err)
			}
			archived := newArchiveEqual(root, known[r], pre[r])
			switch {
			case bytes.Equal(cur, post[r]):
				killedAfter++
				if !archived {
					t.Fatalf("iteration %d root %d: memory.md was rewritten but no archive equals its pre-image", it, r)
				}
			case bytes.Equal(cur, pre[r]):
				if archived {
					killedBetween++
				} else {
					killedBefore++
				}
			default:
				t.Fatalf("iteration %d root %d: memory.md is neither the pre-image nor the post-image (%d bytes)", it, r, len(cur))
			}
		}

		// Restart: it must finish the work and leave everything consistent.
		p = startBin(t, memwatchFast, "--policy", pol, "--state-dir", stateDir)
		p.waitLog("ready", 20*time.Second)
		for r, root := range roots {
			waitFile(t, filepath.Join(root, "memory.md"), post[r], 20*time.Second)
		}
		if err := p.stop(10 * time.Second); err != nil {
			t.Fatalf("iteration %d: clean stop: %v", it, err)
		}

		checkAfterRestart(t, it, dir, stateDir, roots, pre, post)
	}
	t.Logf("kills: %d before the swap with no archive yet, %d after the archive but before the swap, %d after the swap (kill within %v of the start at the end)",
		killedBefore, killedBetween, killedAfter, maxDelay)
	// Every entry the agent wrote is in its live memory.md, or one of the
	// journaled compactions took it out (its archive holds it).
	db, err := state.Open(context.Background(), stateDir)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	recs, _ := db.Journal(context.Background(), state.Filter{Root: agent, Rule: nowhistory.RuleCompact, Outcome: state.Done})
	live, _ := os.ReadFile(filepath.Join(agent, "memory.md"))
	total, missing := 0, 0
	for kind, n := range agentWrites {
		total += n
		if a := writertest.Check(live, kind, n, removedByCompactions(t, db, agent, kind, 3), nil); len(a.Missing) > 0 {
			missing += len(a.Missing)
			t.Errorf("agent writes %s missing from the live memory.md: %v", kind, a.Missing)
		}
	}
	kept, _ := filepath.Glob(filepath.Join(agent, rewrite.DefaultArchiveDir, "*kept*"))
	t.Logf("agent: %d writes during the kills, %d compactions, %d kept copies, missing from the live file %d", total, len(recs), len(kept), missing)
	if killedBefore == 0 || killedAfter == 0 {
		t.Errorf("the random kills never landed on one side of the rewrite; the test did not exercise it")
	}
}

func listArchives(root string) map[string]bool {
	m := map[string]bool{}
	ents, _ := os.ReadDir(filepath.Join(root, "memory"))
	for _, e := range ents {
		m[e.Name()] = true
	}
	return m
}

// newArchiveEqual reports whether an archive created since known equals data.
func newArchiveEqual(root string, known map[string]bool, data []byte) bool {
	ents, _ := os.ReadDir(filepath.Join(root, "memory"))
	for _, e := range ents {
		if known[e.Name()] || e.IsDir() {
			continue
		}
		if b, err := os.ReadFile(filepath.Join(root, "memory", e.Name())); err == nil && bytes.Equal(b, data) {
			return true
		}
	}
	return false
}

func checkAfterRestart(t *testing.T, it int, dir, stateDir string, roots []string, pre, post [][]byte) {
	t.Helper()
	filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err == nil && strings.Contains(d.Name(), rewrite.TempMarker) {
			t.Fatalf("iteration %d: temp file left after restart: %s", it, p)
		}
		return nil
	})
	db, err := state.Open(context.Background(), stateDir)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	ctx := context.Background()
	if pend, _ := db.Journal(ctx, state.Filter{Outcome: state.Pending}); len(pend) > 0 {
		t.Fatalf("iteration %d: %d journal records left pending", it, len(pend))
	}
	for r, root := range roots {
		last, ok, err := db.LastFor(ctx, root, nowhistory.RuleCompact, "memory.md", state.Done)
		if err != nil || !ok {
			t.Fatalf("iteration %d root %d: no done compaction in the journal: %v", it, r, err)
		}
		if last.AfterSHA != rewrite.Hash(post[r]) || last.BeforeSHA != rewrite.Hash(pre[r]) {
			t.Fatalf("iteration %d root %d: the journal's last compaction does not match the files", it, r)
		}
		arch, err := os.ReadFile(filepath.Join(root, last.Archive))
		if err != nil || rewrite.Hash(arch) != last.BeforeSHA {
			t.Fatalf("iteration %d root %d: archive %s of the journal's last compaction is missing or differs: %v", it, r, last.Archive, err)
		}
	}
}
