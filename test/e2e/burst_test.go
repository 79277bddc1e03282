package e2e

import (
	"encoding/json"
	"fmt"
	"io"
	mrand "math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/memwatch/memwatch/control"
)

// TestMassDeleteBatched: an agent deletes its one-message session logs all
// at once (MEMWATCH_MASS_DELETE_FILES, default 5,000, a burst of some 80
// batches that make test can afford beside its other daemons; make soak:
// the 100,000) after the daemon has caught up on them, with
// consolidation on. Within 180 s no job is queued or running (their
// messages are consolidated in batches, not one job per log), the daemon
// logs at most 1,000 lines for it, another root's new line is captured
// within 5 s throughout, and a deleted session's message is still recalled.
func TestMassDeleteBatched(t *testing.T) {
	t.Parallel() // mostly waits on the daemon: beside the other such tests
	n := 5_000
	if v, err := strconv.Atoi(os.Getenv("MEMWATCH_MASS_DELETE_FILES")); err == nil && v > 0 {
		n = v
	}
	dir := t.TempDir()
	big := filepath.Join(dir, "big", "a", "sessions")
	other := filepath.Join(dir, "other", "b", "sessions")
	os.MkdirAll(big, 0o755)
	os.MkdirAll(other, 0o755)
	for i := range n {
		line := fmt.Sprintf(`{"role":"user","content":"deleted session %d says okapi%d","timestamp":"2026-11-20T10:00:00Z"}`+"\n", i, i)
		if err := os.WriteFile(filepath.Join(big, fmt.Sprintf("s%07d.jsonl", i)), []byte(line), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	p, pol, stateDir, spool, captured := bigAndOther(t, dir, "2m", "session_idle: 24h")
	p.waitLog("caught up: every root evaluated, its logs captured and indexed", 10*time.Minute)
	// owed counts the deleted logs whose messages are not consolidated yet.
	owed := func() int {
		var k int
		spool.QueryRow(`SELECT COUNT(*) FROM logs l WHERE l.path LIKE 'sessions/s%' AND l.seq >
			COALESCE((SELECT p.seq FROM progress p WHERE p.consumer='consolidate' AND p.log=l.id), 0)`).Scan(&k)
		return k
	}
	busy := func() (queued, running int) {
		out, err := exec.Command(memwatchFast, "status", "--policy", pol, "--state-dir", stateDir, "--json").Output()
		if err != nil {
			return -1, -1
		}
		var st struct {
			Jobs struct {
				Queued, Running []json.RawMessage
				QueuedCount     int `json:"queued_count"`
			}
		}
		json.Unmarshal(out, &st)
		return max(len(st.Jobs.Queued), st.Jobs.QueuedCount), len(st.Jobs.Running)
	}
	before := len(strings.Split(p.text(), "\n"))
	deleted := time.Now()
	if err := os.RemoveAll(big); err != nil {
		t.Fatal(err)
	}
	rmTook := time.Since(deleted)
	t.Logf("%d logs deleted in %v", n, rmTook.Round(time.Millisecond))
	// Another root's line is captured within 5 s on a machine as fast as
	// a quiet 2-core one (rm of the logs takes under a second there); a
	// machine busy enough to make rm itself slow gets that time again,
	// twice over (the suite's other daemons share its cores).
	bound := 5*time.Second + 2*max(0, rmTook-time.Second)
	var worst time.Duration
	log := filepath.Join(other, "x.jsonl")
	var done time.Duration
	for i := 0; ; i++ {
		took := probeCapture(log, fmt.Sprintf("probeword%d", i), captured)
		worst = max(worst, took)
		if took > bound {
			t.Errorf("another root's line %d captured %v after it was written (bound %v)", i, took.Round(time.Millisecond), bound.Round(time.Millisecond))
		}
		if q, r := busy(); q == 0 && r == 0 && owed() == 0 {
			done = time.Since(deleted)
			break
		}
		if time.Since(deleted) > 180*time.Second {
			q, r := busy()
			t.Fatalf("180 s after the deletion %d job(s) are queued and %d running; %d deleted logs not consolidated", q, r, owed())
		}
		time.Sleep(500 * time.Millisecond)
	}
	p.mu.Lock()
	var said int
	kinds := map[string]int{}
	for _, l := range strings.Split(p.raw.String(), "\n")[before:] {
		if strings.Contains(l, `"level":"INFO"`) || strings.Contains(l, `"level":"WARN"`) || strings.Contains(l, `"level":"ERROR"`) {
			said++
			var m map[string]any
			json.Unmarshal([]byte(l), &m)
			kinds[fmt.Sprint(m["msg"])]++
		}
	}
	p.mu.Unlock()
	t.Logf("the deleted logs' work was done %v after the deletion; %d log lines (INFO and up): %v; another root's line captured within %v at worst",
		done.Round(time.Second), said, kinds, worst.Round(time.Millisecond))
	if said > 1000 {
		t.Errorf("deleting %d logs wrote %d log lines, want at most 1,000", n, said)
	}
	// The deleted sessions' messages: consolidated into HISTORY.md, and
	// still recalled from the spool.
	for _, i := range []int{0, n / 2, n - 1} {
		word := fmt.Sprintf("okapi%d", i)
		out, _ := exec.Command(memwatchFast, "recall", "--policy", pol, "--state-dir", stateDir, "--dir", filepath.Dir(big), "--json", word).Output()
		if !strings.Contains(string(out), word) {
			t.Errorf("a deleted session's message (%s) is not recalled: %s", word, out)
		}
	}
	hist, _ := os.ReadFile(filepath.Join(dir, "big", "a", "HISTORY.md"))
	if c := strings.Count(string(hist), "\n## "); c == 0 || c > n/10 {
		t.Errorf("HISTORY.md holds %d entries for %d deleted one-message logs: want them batched", c, n)
	}
	t.Logf("HISTORY.md: %d entries, %d bytes; %s", strings.Count(string(hist), "\n## "), len(hist), memBreakdown(t, p.cmd.Process.Pid, filepath.Join(stateDir, "memwatch.sock")))
}

// memBreakdown says what a daemon's resident memory is made of: its peak
// and current RSS, the anonymous part (the Go heap and stacks, SQLite's
// caches) and the file-backed part (the binary, mapped indexes), and the Go
// runtime's own figures from /metrics.
func memBreakdown(t *testing.T, pid int, sock string) string {
	t.Helper()
	b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	status := map[string]int64{}
	for _, l := range strings.Split(string(b), "\n") {
		k, v, ok := strings.Cut(l, ":")
		if ok && strings.HasSuffix(strings.TrimSpace(v), "kB") {
			n, _ := strconv.ParseInt(strings.Fields(v)[0], 10, 64)
			status[k] = n >> 10 // MiB
		}
	}
	metrics := map[string]float64{}
	if resp, err := socketClient(sock).Get("http://memwatch/metrics"); err == nil {
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		for _, l := range strings.Split(string(body), "\n") {
			for _, name := range []string{"go_memstats_heap_inuse_bytes", "go_memstats_stack_inuse_bytes", "go_memstats_sys_bytes", "go_memstats_heap_idle_bytes", "go_memstats_heap_released_bytes"} {
				if v, ok := strings.CutPrefix(l, name+" "); ok {
					metrics[name], _ = strconv.ParseFloat(v, 64)
				}
			}
		}
	}
	mib := func(k string) int64 { return int64(metrics[k]) >> 20 }
	return fmt.Sprintf("peak RSS %d MiB, now %d MiB = %d MiB anonymous + %d MiB file-backed (binary, mapped indexes); Go: heap in use %d MiB, stacks %d MiB, heap idle %d MiB (%d MiB of it returned to the OS), %d MiB from the OS in all; the rest of the anonymous memory is SQLite's (page caches, its allocator)",
		status["VmHWM"], status["VmRSS"], status["RssAnon"], status["RssFile"], mib("go_memstats_heap_inuse_bytes"), mib("go_memstats_stack_inuse_bytes"),
		mib("go_memstats_heap_idle_bytes"), mib("go_memstats_heap_released_bytes"), mib("go_memstats_sys_bytes"))
}

// TestBurstCapturedWhole: logs written in a burst larger than the
// background queue (some captures are dropped), then deleted once status
// has shown nothing pending for 5 s: every one is still in the spool, and
// recalled. make soak runs it with the 200,000 logs (8 minutes
// here); the passes it depends on are TestPassesAnotherAfterAChangeDuringOne's.
func TestBurstCapturedWhole(t *testing.T) {
	n, err := strconv.Atoi(os.Getenv("MEMWATCH_BURST_LOGS"))
	if err != nil || n <= 0 {
		t.Skip("a burst past the background queue takes minutes: make soak runs it (MEMWATCH_BURST_LOGS=200000)")
	}
	t.Parallel() // mostly waits on the daemon: beside the other such tests
	dir := t.TempDir()
	sessions := filepath.Join(dir, "big", "a", "sessions")
	os.MkdirAll(sessions, 0o755)
	os.MkdirAll(filepath.Join(dir, "other", "b"), 0o755)
	p, pol, stateDir, spool, _ := bigAndOther(t, dir, "2m", "consolidate: false\n    settle: 30ms")
	p.waitLog("caught up: every root evaluated, its logs captured and indexed", time.Minute)
	word := func(i int) string { return fmt.Sprintf("burstgnu%dx", i) }
	start := time.Now()
	for i := range n {
		line := fmt.Sprintf(`{"role":"user","content":"burst session %d says %s"}`+"\n", i, word(i))
		if err := os.WriteFile(filepath.Join(sessions, fmt.Sprintf("s%07d.jsonl", i)), []byte(line), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("%d logs written in %v", n, time.Since(start).Round(time.Millisecond))
	pending := func() string {
		out, err := exec.Command(memwatchFast, "status", "--policy", pol, "--state-dir", stateDir, "--json").Output()
		if err != nil {
			return "no status: " + err.Error()
		}
		var st control.Status
		if err := json.Unmarshal(out, &st); err != nil {
			return "bad status: " + err.Error()
		}
		switch {
		case len(st.Jobs.Running) > 0 || st.Jobs.QueuedCount > 0 || len(st.Jobs.Queued) > 0:
			return fmt.Sprintf("jobs: %d queued, %d running", max(st.Jobs.QueuedCount, len(st.Jobs.Queued)), len(st.Jobs.Running))
		case st.Background > 0:
			return fmt.Sprintf("%d background tasks", st.Background)
		case len(st.Uncaptured) > 0:
			return fmt.Sprintf("not captured yet: %v", st.Uncaptured)
		case st.CatchUp != nil:
			return "catching up"
		}
		return ""
	}
	quiet := func() {
		var quietSince time.Time
		for deadline := time.Now().Add(10 * time.Minute); ; time.Sleep(250 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("status never showed nothing pending for 5 s: %s", pending())
			}
			if pending() != "" {
				quietSince = time.Time{}
				continue
			}
			if quietSince.IsZero() {
				quietSince = time.Now()
			}
			if time.Since(quietSince) >= 5*time.Second {
				return
			}
		}
	}
	quiet()
	t.Logf("nothing pending for 5 s, %v after the burst began; deleting every log", time.Since(start).Round(time.Millisecond))
	deleted := time.Now()
	if err := os.RemoveAll(sessions); err != nil {
		t.Fatal(err)
	}
	quiet()
	t.Logf("nothing pending for 5 s again, %v after the logs were deleted", time.Since(deleted).Round(time.Millisecond))
	// Every log's line is in the spool (one query), and recall finds a
	// few picked at random.
	var held int
	spool.QueryRow(`SELECT COUNT(*) FROM lines WHERE instr(data, 'burstgnu') > 0`).Scan(&held)
	if held < n {
		t.Errorf("%d of %d logs are in the spool after they were deleted: %d lost", held, n, n-held)
	}
	for range 5 {
		i := mrand.IntN(n)
		asked := time.Now()
		out, err := exec.Command(memwatchFast, "recall", "--policy", pol, "--state-dir", stateDir, "--all", word(i)).CombinedOutput()
		if err != nil || !strings.Contains(string(out), word(i)) {
			t.Errorf("log %d is not recalled: recall %s: %v\n%s", i, word(i), err, out)
		}
		t.Logf("recall of log %d answered in %v", i, time.Since(asked).Round(time.Millisecond))
	}
}
