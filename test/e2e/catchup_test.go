package e2e

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestCatchUpWhileAgentsWrite: logs large enough to be captured and
// indexed from one read (64 KiB and more) are appended to, and some
// rewritten in place, while the daemon catches up: every line written is
// then found through the daemon's index, and the index answers as the scan
// of the live files does.
func TestCatchUpWhileAgentsWrite(t *testing.T) {
	dir := t.TempDir()
	const sessions, maxAppends = 12, 400
	var sess []string
	for s := range sessions {
		d := filepath.Join(dir, "sessions", fmt.Sprintf("s%02d", s))
		os.MkdirAll(filepath.Join(d, "working-memory", "detail"), 0o755)
		var log strings.Builder
		fmt.Fprintf(&log, `{"role":"user","content":"begin w%02dstart of the rollout"}`+"\n", s)
		for i := 0; log.Len() < 160<<10; i++ {
			fmt.Fprintf(&log, `{"role":"assistant","content":[{"type":"tool_result","content":"step %d: the deploy of web went through the staging cluster and back"}]}`+"\n", i)
		}
		os.WriteFile(filepath.Join(d, "messages.jsonl"), []byte(log.String()), 0o644)
		sess = append(sess, d)
	}
	stateDir := filepath.Join(dir, "state")
	pol := writePolicy(t, dir, fmt.Sprintf("stores:\n  - name: s\n    layout: session-detail\n    paths: [%q]\n    settle: 50ms\n    summary_every: 1000000\n", filepath.Join(dir, "sessions", "*")))
	p := start(t, "--policy", pol, "--state-dir", stateDir)

	// The agents write while the daemon starts and catches up, and a
	// little after: appends reopened each time, and every third session
	// rewritten in place (its first line's word changed, its length kept)
	// after its third append.
	caughtUp := make(chan struct{})
	written := make([]int, sessions)
	var wg sync.WaitGroup
	for s, d := range sess {
		wg.Add(1)
		go func() {
			defer wg.Done()
			path := filepath.Join(d, "messages.jsonl")
			after := -1
			for i := 0; i < maxAppends; i++ {
				f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
				if err != nil {
					t.Error(err)
					return
				}
				fmt.Fprintf(f, `{"role":"user","content":"note a%02dx%03d for later"}`+"\n", s, i)
				f.Close()
				written[s] = i + 1
				if s%3 == 0 && i == 2 {
					b, _ := os.ReadFile(path)
					b = []byte(strings.Replace(string(b), fmt.Sprintf("w%02dstart", s), fmt.Sprintf("w%02dredo_", s), 1))
					if err := os.WriteFile(path, b, 0o644); err != nil {
						t.Error(err)
					}
				}
				select {
				case <-caughtUp:
					if after < 0 {
						after = i
					}
				default:
				}
				if after >= 0 && i >= after+3 {
					return
				}
				time.Sleep(time.Duration(5+s) * time.Millisecond)
			}
		}()
	}
	p.waitLog("caught up: every root evaluated, its logs captured and indexed", 60*time.Second)
	close(caughtUp)
	wg.Wait()
	t.Logf("lines appended to each session, through the catch-up and after: %v", written)

	runtime := t.TempDir()
	recall := func(env, sess, word string) (string, string) {
		t.Helper()
		cmd := exec.Command(memwatchFast, "recall", "--dir", sess, "--explain", word)
		// A runtime directory of its own: no other test's daemon is
		// announced there.
		cmd.Env = append(os.Environ(), "MEMWATCH_STATE_DIR="+env, "XDG_RUNTIME_DIR="+runtime)
		var stderr strings.Builder
		cmd.Stderr = &stderr
		out, _ := cmd.Output()
		return string(out), stderr.String()
	}
	empty := t.TempDir()
	type ask struct{ sess, word string }
	var asks []ask
	for s, d := range sess {
		// Every tenth line of a third of the sessions, the first and the
		// last of each.
		for i := range written[s] {
			if s%4 == 1 && i%10 == 0 || i == 0 || i == written[s]-1 {
				asks = append(asks, ask{d, fmt.Sprintf("a%02dx%03d", s, i)})
			}
		}
		if s%3 == 0 {
			asks = append(asks, ask{d, fmt.Sprintf("w%02dredo_", s)})
		}
	}
	// The index catches up with what was written last within seconds.
	for _, a := range asks {
		deadline := time.Now().Add(30 * time.Second)
		for {
			out, explain := recall(stateDir, a.sess, a.word)
			scan, _ := recall(empty, a.sess, a.word)
			found := strings.Count(out, "messages.jsonl#L") == 1 && strings.Contains(out, a.word)
			if found && out == scan && strings.Contains(explain, "by the index for 1 of 1 files") {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s in %s: through the daemon %q (%s), the scan %q", a.word, filepath.Base(a.sess), out, strings.TrimSpace(explain), scan)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	p.stop(30 * time.Second)
}
