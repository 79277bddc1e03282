package e2e

import (
	"database/sql"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestManyFilesCaughtUpAlone: one root holds many small session logs
// written before the daemon starts (MEMWATCH_MANY_FILES, default 10,000;
// make soak: 1,000,000). Throughout its catch-up another root's new line
// is captured within 5 s, the daemon's peak RSS stays under 300 MiB, the
// catch-up ends without a job_timeout, SIGTERM stops the daemon within 5 s,
// and deleting the files writes a bounded number of log lines.
func TestManyFilesCaughtUpAlone(t *testing.T) {
	t.Parallel() // mostly waits on daemons: beside the other such tests
	n := 10_000
	if v, err := strconv.Atoi(os.Getenv("MEMWATCH_MANY_FILES")); err == nil && v > 0 {
		n = v
	}
	dir := t.TempDir()
	big := filepath.Join(dir, "big", "a", "sessions")
	other := filepath.Join(dir, "other", "b", "sessions")
	os.MkdirAll(big, 0o755)
	os.MkdirAll(other, 0o755)
	start := time.Now()
	for i := range n {
		if err := os.WriteFile(filepath.Join(big, fmt.Sprintf("s%07d.jsonl", i)), []byte(fmt.Sprintf(`{"role":"user","content":"hello number %d"}`+"\n", i)), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("%d session logs written in %v", n, time.Since(start).Round(time.Millisecond))
	p, pol, stateDir, spool, captured := bigAndOther(t, dir, "1m", "consolidate: false")
	caughtUp := func() bool {
		p.mu.Lock()
		defer p.mu.Unlock()
		for _, l := range p.lines {
			if l["msg"] == "caught up: every root evaluated, its logs captured and indexed" {
				return true
			}
		}
		return false
	}
	log := filepath.Join(other, "x.jsonl")
	var worst time.Duration
	probes := 0
	for i := 0; !caughtUp() || probes < 3; i++ {
		took := probeCapture(log, fmt.Sprintf("probeword%d", i), captured)
		worst = max(worst, took)
		probes++
		if took > 5*time.Second {
			t.Errorf("another root's line %d captured %v after it was written, during the catch-up", i, took.Round(time.Millisecond))
		}
		if time.Since(start) > 60*time.Minute {
			t.Fatal("the catch-up did not end within an hour")
		}
		time.Sleep(time.Second)
	}
	// Recallable too, once its agent has cleared its log.
	os.Truncate(log, 0)
	time.Sleep(300 * time.Millisecond)
	out, _ := exec.Command(memwatchFast, "recall", "--policy", pol, "--state-dir", stateDir, "--dir", filepath.Dir(other), "--json", "probeword0").Output()
	var res []struct{ Text string }
	if json.Unmarshal(out, &res); len(res) == 0 {
		t.Errorf("the other root's cleared line is not recalled: %s", out)
	}
	var logs int
	spool.QueryRow(`SELECT COUNT(*) FROM logs`).Scan(&logs)
	rss := peakRSS(t, p.cmd.Process.Pid)
	t.Logf("%d logs caught up in %v; another root's line captured within %v at worst (%d probes); %d logs in the spool; %s",
		n, time.Since(start).Round(time.Second), worst.Round(time.Millisecond), probes, logs, memBreakdown(t, p.cmd.Process.Pid, filepath.Join(stateDir, "memwatch.sock")))
	if logs < n {
		t.Errorf("%d logs in the spool, want %d", logs, n+1)
	}
	if rss > 300<<20 {
		t.Errorf("peak RSS %d MiB, over 300 MiB", rss>>20)
	}
	if strings.Contains(p.text(), "job timed out") {
		t.Error("a job ran into job_timeout")
	}

	// The agent deletes its logs: a bounded number of lines say so.
	before := len(strings.Split(p.text(), "\n"))
	os.RemoveAll(big)
	time.Sleep(time.Second)
	for deadline := time.Now().Add(60 * time.Second); time.Now().Before(deadline) && !quietFor(p, 2*time.Second); {
		time.Sleep(200 * time.Millisecond)
	}
	p.mu.Lock()
	var said int
	for _, l := range strings.Split(p.raw.String(), "\n")[before:] {
		if strings.Contains(l, `"level":"INFO"`) || strings.Contains(l, `"level":"WARN"`) || strings.Contains(l, `"level":"ERROR"`) {
			said++
		}
	}
	p.mu.Unlock()
	t.Logf("deleting %d logs wrote %d log lines (INFO and above)", n, said)
	if said > 100 {
		t.Errorf("deleting %d logs wrote %d log lines, want a bounded few", n, said)
		if dir := os.Getenv("MEMWATCH_TEST_LOG_DIR"); dir != "" {
			p.mu.Lock()
			os.WriteFile(filepath.Join(dir, "deleting.log"), []byte(strings.Join(strings.Split(p.raw.String(), "\n")[before:], "\n")), 0o644)
			p.mu.Unlock()
		}
	}

	stopAt := time.Now()
	p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(5 * time.Second):
		t.Errorf("SIGTERM did not stop the daemon within 5 s")
	}
	t.Logf("stopped %v after SIGTERM", time.Since(stopAt).Round(time.Millisecond))
}

// text is what the daemon has logged so far.
func (p *proc) text() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.raw.String()
}

// quietFor reports whether the daemon logged nothing (debug included) for d.
func quietFor(p *proc, d time.Duration) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.lines) == 0 {
		return true
	}
	at, err := time.Parse(time.RFC3339Nano, fmt.Sprint(p.lines[len(p.lines)-1]["time"]))
	return err == nil && time.Since(at) >= d
}

// bigAndOther runs the daemon over dir/big/* (a memory-history store with
// bigOpts, e.g. "consolidate: false") and dir/other/* (no consolidation),
// waits for it to be ready, and opens its spool read-only: captured says
// whether a line holding word is in it.
func bigAndOther(t *testing.T, dir, jobTimeout, bigOpts string) (p *proc, pol, stateDir string, spool *sql.DB, captured func(word string) bool) {
	t.Helper()
	pol = writePolicy(t, dir, fmt.Sprintf("job_timeout: %s\nstores:\n  - name: big\n    layout: memory-history\n    paths: [%q]\n    %s\n  - name: other\n    layout: memory-history\n    paths: [%q]\n    consolidate: false\n",
		jobTimeout, filepath.Join(dir, "big", "*"), bigOpts, filepath.Join(dir, "other", "*")))
	stateDir = filepath.Join(dir, "state")
	p = startBin(t, memwatchFast, "--policy", pol, "--state-dir", stateDir)
	p.waitLog("ready", 60*time.Second)
	spool, err := sql.Open("sqlite", "file:"+filepath.Join(stateDir, "spool.db")+"?mode=ro&_pragma=busy_timeout(5000)")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { spool.Close() })
	captured = func(word string) bool {
		var k int
		spool.QueryRow(`SELECT COUNT(*) FROM lines WHERE instr(data, ?) > 0`, word).Scan(&k)
		return k > 0
	}
	return p, pol, stateDir, spool, captured
}

// probeCapture appends a line holding word to log and waits (30 s at
// most) until it is captured: how long another root waits behind a burst.
func probeCapture(log, word string, captured func(string) bool) time.Duration {
	f, _ := os.OpenFile(log, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	fmt.Fprintf(f, `{"role":"user","content":"%s"}`+"\n", word)
	f.Close()
	wrote := time.Now()
	for !captured(word) && time.Since(wrote) < 30*time.Second {
		time.Sleep(20 * time.Millisecond)
	}
	return time.Since(wrote)
}
