package e2e

import (
	"encoding/hex"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/memwatch/memwatch/control"
	"github.com/memwatch/memwatch/versions"
)

// TestStateDiskFull: the state directory on a 6 MiB tmpfs while an agent
// appends 6,000 messages and saves its memory file 40 times. memwatch says
// within 15 s that it cannot write its state (an ERROR naming the
// directory, a problem in memwatch status); once the tmpfs is grown, within
// 30 s and with no trigger, every line is in the spool (recalled after the
// agent clears its log) and the newest version of the memory file is the
// file as it is.
func TestStateDiskFull(t *testing.T) {
	t.Parallel() // mostly waits on daemons: beside the other such tests
	if os.Geteuid() != 0 {
		t.Skip("needs root to mount a tmpfs for the state directory")
	}
	if _, err := exec.LookPath("mount"); err != nil {
		t.Skip("needs mount")
	}
	dir := t.TempDir()
	stateDir := filepath.Join(dir, "state")
	os.MkdirAll(stateDir, 0o700)
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size=6m,mode=0700", "tmpfs", stateDir).CombinedOutput(); err != nil {
		t.Skipf("cannot mount a tmpfs here: %v %s", err, out)
	}
	t.Cleanup(func() { exec.Command("umount", "-l", stateDir).Run() })
	root := filepath.Join(dir, "agents", "a")
	os.MkdirAll(filepath.Join(root, "sessions"), 0o755)
	pol := writePolicy(t, dir, fmt.Sprintf(`stores:
  - name: mh
    layout: memory-history
    paths: [%q]
    settle: 50ms
    consolidate: false
`, filepath.Join(dir, "agents", "*")))
	p := startBin(t, memwatchFast, "--policy", pol, "--state-dir", stateDir)
	p.waitLog("ready", 10*time.Second)

	const lines, saves = 6000, 40
	log := filepath.Join(root, "sessions", "s1.jsonl")
	mem := filepath.Join(root, "MEMORY.md")
	// Text that does not compress (the spool keeps it in zstd blocks):
	// it fills the 6 MiB as a transcript of tool output would.
	rng := rand.New(rand.NewPCG(1, 2))
	pad := func() string {
		b := make([]byte, 360)
		for i := range b {
			b[i] = byte(rng.Uint32())
		}
		return hex.EncodeToString(b)
	}
	start := time.Now()
	f, err := os.OpenFile(log, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	for i := range lines {
		fmt.Fprintf(f, `{"role":"user","content":"fullword tok%05d %s"}`+"\n", i, pad())
		if i%(lines/saves) == 0 {
			os.WriteFile(mem, []byte(fmt.Sprintf("# Memory\n\n- save %d\n- the user deploys on Fridays\n", i/(lines/saves))), 0o644)
		}
		if i%100 == 0 {
			time.Sleep(20 * time.Millisecond)
		}
	}
	f.Close()
	os.WriteFile(mem, []byte("# Memory\n\n- the last save\n- the user deploys on Fridays\n"), 0o644)
	p.waitLog("memwatch cannot write its state directory; the agents' files are untouched, and it catches up on its own once it can write again", 15*time.Second)
	t.Logf("the full state directory said %v after the agent started", time.Since(start).Round(time.Millisecond))
	var st control.Status
	out, _ := exec.Command(memwatchFast, "status", "--json", "--policy", pol, "--state-dir", stateDir).Output()
	if json.Unmarshal(out, &st); st.StateProblem == nil || st.StateProblem.Dir != stateDir {
		t.Errorf("memwatch status shows no problem with the state directory:\n%s", out)
	}

	// The disk grows; the agent clears its log (its lines are on disk
	// until then).
	if out, err := exec.Command("mount", "-o", "remount,size=256m", stateDir).CombinedOutput(); err != nil {
		t.Fatalf("remount: %v %s", err, out)
	}
	grown := time.Now()
	recalled := func() int {
		out, _ := exec.Command(memwatchFast, "recall", "--policy", pol, "--state-dir", stateDir, "--all", "--json", "--scope", "messages", "--limit", "10000", "fullword").Output()
		var res []struct{ Text string }
		json.Unmarshal(out, &res)
		seen := map[string]bool{}
		for _, r := range res {
			if i := strings.Index(r.Text, "tok"); i >= 0 && len(r.Text) >= i+8 {
				seen[r.Text[i:i+8]] = true
			}
		}
		return len(seen)
	}
	// newestIsLive: the newest version of MEMORY.md is the file as it is.
	newestIsLive := func() bool {
		vs := listVersions(t, pol, stateDir, mem)
		live, err := os.ReadFile(mem)
		return err == nil && len(vs) > 0 && vs[len(vs)-1].SHA == versions.Hash(live)
	}
	p.waitLog("memwatch can write its state directory again; catching up what it could not record", 30*time.Second)
	waitUntil(t, 30*time.Second-time.Since(grown), func() bool { return newestIsLive() && recalled() == lines })
	t.Logf("caught up %v after the disk grew", time.Since(grown).Round(time.Millisecond))
	if !newestIsLive() {
		t.Errorf("the newest version of MEMORY.md is not the file as it is: %+v", listVersions(t, pol, stateDir, mem))
	}
	// The agent clears its log: every line is still recalled.
	os.Truncate(log, 0)
	time.Sleep(500 * time.Millisecond)
	if n := recalled(); n != lines {
		t.Errorf("%d of %d lines recalled after the agent cleared its log", n, lines)
	}
	out, _ = exec.Command(memwatchFast, "status", "--json", "--policy", pol, "--state-dir", stateDir).Output()
	st = control.Status{}
	if json.Unmarshal(out, &st); st.StateProblem != nil {
		t.Errorf("memwatch status still shows the problem: %+v", st.StateProblem)
	}
}
