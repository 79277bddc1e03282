package e2e

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/memwatch/memwatch/control"
	"github.com/memwatch/memwatch/state"
)

// The guard suite runs the real daemon as root beside real unprivileged
// users and checks what issue [guard] asks: no request, file or burst of
// events makes the root daemon leak, hang or drown.

// getAs does one GET over the control socket as u (this test binary,
// re-executed as u, is the client): the status, the time the request
// took as the client saw it, and the start of the body.
func getAs(t *testing.T, helper string, u tenant, sock, path string) (int, time.Duration, string) {
	t.Helper()
	g := getsAs(t, helper, u, sock, []string{path})[0]
	return g.Code, g.Took, g.Body
}

// gotAs is one answer of getsAs.
type gotAs struct {
	Code int // 0: no answer (Body says why)
	Took time.Duration
	Body string // its first 64 KiB
}

// getsAs is getAs for many paths, asked one after another by one client
// process (each start of this race-built binary costs a tenth of a
// second, more than most requests), each timed alone.
func getsAs(t *testing.T, helper string, u tenant, sock string, paths []string) []gotAs {
	t.Helper()
	cmd := u.command(helper, "-test.run=^$")
	cmd.Env = append(cmd.Env, helperEnv+"=gets", helperEnv+"_ARGS="+sock+"\x1f"+strings.Join(paths, "\x1f"))
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("GETs as %s: %v", u.name, err)
	}
	var got []gotAs
	dec := json.NewDecoder(bytes.NewReader(out))
	for {
		var g gotAs
		if err := dec.Decode(&g); err != nil {
			break
		}
		got = append(got, g)
	}
	if len(got) != len(paths) {
		t.Fatalf("GETs as %s: %d answers to %d requests", u.name, len(got), len(paths))
	}
	return got
}

// TestGuardHugeLineNumbers: a local user asks /v1/show, /ui/show and
// memwatch show for line numbers near 2^63 and past it, and ranges up to
// them. Each answers within a second with an error or the lines that
// exist, the daemon stays under 300 MiB and answers the next request.
func TestGuardHugeLineNumbers(t *testing.T) {
	t.Parallel() // mostly waits on the daemon: beside the other such tests
	base, alice, _ := tenants(t)
	word := secretWord("guardwombat")
	aRoot := filepath.Join(alice.home, "ws", "a")
	var log strings.Builder
	for i := range 5 {
		fmt.Fprintf(&log, `{"role":"user","content":"line %d %s"}`+"\n", i+1, word)
	}
	alice.write(t, filepath.Join(aRoot, "sessions", "s1.jsonl"), log.String())
	alice.write(t, filepath.Join(aRoot, "MEMORY.md"), "# Memory\n- one fact\n- "+word+"\n")
	stateDir := filepath.Join(base, "state")
	pol, sock, bin, p := wsDaemon(t, base, "ui:\n  enabled: true\n", "--state-dir", stateDir)
	helper := filepath.Join(base, "helper")
	copyFile(t, os.Args[0], helper, 0o755)
	show := func(cite string) (int, time.Duration, string) {
		return getAs(t, helper, alice, sock, "/v1/show?"+url.Values{"root": {aRoot}, "cite": {cite}}.Encode())
	}
	text := func(body string) string {
		var res control.ShowResponse
		json.Unmarshal([]byte(body), &res)
		var b strings.Builder
		for _, l := range res.Lines {
			b.Write(l.Data)
			b.WriteByte('\n')
		}
		return b.String()
	}
	waitUntil(t, 15*time.Second, func() bool { code, _, _ := show("sessions/s1.jsonl#L1"); return code == 200 })
	if code, _, body := show("sessions/s1.jsonl#L1"); code != 200 || !strings.Contains(text(body), word) {
		t.Fatalf("alice's own line: %d %s", code, body)
	}
	huge := []string{"9223372036854775807", "9223372036854775802", "100000000000000000000", "1099511627776", "18446744073709551615"}
	var cites []string
	for _, file := range []string{"sessions/s1.jsonl", "MEMORY.md"} {
		for _, n := range huge {
			cites = append(cites, file+"#L"+n, file+"#L1-"+n, file+"#L4-"+n, file+"#L"+n+"-"+n, file+"@"+n+"#L1")
		}
		cites = append(cites, file+"#L9223372036854775802-9223372036854775807", file+"#L9223372036854775807-L9223372036854775807")
	}
	var reqs []string
	for _, cite := range cites {
		for _, path := range []string{"/v1/show", "/ui/show"} {
			reqs = append(reqs, path+"?"+url.Values{"root": {aRoot}, "cite": {cite}}.Encode())
		}
	}
	for i, g := range getsAs(t, helper, alice, sock, reqs) {
		if g.Took > time.Second {
			t.Errorf("%s took %v", reqs[i], g.Took)
		}
		if g.Code == 200 && strings.HasPrefix(reqs[i], "/v1/show") && strings.Count(g.Body, `"Line":`) > 5 {
			t.Errorf("%s: more lines than the file has: %s", reqs[i], g.Body)
		}
		if g.Code == 0 || g.Code >= 500 {
			t.Errorf("%s: %d %s", reqs[i], g.Code, g.Body)
		}
	}
	for _, cite := range cites {
		start := time.Now()
		out, err := alice.command(bin, "show", "--policy", pol, "--dir", aRoot, cite).CombinedOutput()
		if took := time.Since(start); took > 2*time.Second {
			t.Errorf("memwatch show %s took %v", cite, took)
		}
		var exit *exec.ExitError
		if err != nil && !errors.As(err, &exit) {
			t.Errorf("memwatch show %s: %v", cite, err)
		}
		if strings.Count(string(out), "\nL") > 5 {
			t.Errorf("memwatch show %s: more lines than the file has:\n%s", cite, out)
		}
	}
	if rss := peakRSS(t, p.cmd.Process.Pid); rss > 300<<20 {
		t.Errorf("the daemon's peak RSS is %d MiB, over 300 MiB", rss>>20)
	}
	if code, _, body := show("sessions/s1.jsonl#L2-3"); code != 200 || strings.Count(text(body), word) != 2 {
		t.Errorf("the next request: %d %s", code, body)
	}
	if p.cmd.ProcessState != nil || p.cmd.Process.Signal(syscall.Signal(0)) != nil {
		t.Error("the daemon is gone")
	}
}

// TestGuardPrivateOutputs: bob's project is 0755 (as most are), his
// session log and MEMORY.md 0600. After memwatch consolidates the log and
// compresses MEMORY.md, alice can read none of the files memwatch made
// there, and what memwatch rewrote keeps its mode.
func TestGuardPrivateOutputs(t *testing.T) {
	t.Parallel() // mostly waits on the daemon: beside the other such tests
	base, alice, bob := tenants(t)
	os.Chmod(bob.home, 0o755)
	proj := filepath.Join(bob.home, "ws", "billing")
	bob.mkdir(t, filepath.Join(proj, "sessions"))
	for d := proj; d != bob.home; d = filepath.Dir(d) {
		os.Chmod(d, 0o755)
	}
	os.Chmod(filepath.Join(proj, "sessions"), 0o755)
	secret := secretWord("bobsecret")
	var log strings.Builder
	for i := range 8 {
		fmt.Fprintf(&log, `{"role":"user","content":"step %d of the %s deploy","timestamp":"2026-11-20T10:%02d:00Z"}`+"\n", i, secret, i)
	}
	var mem strings.Builder
	mem.WriteString("# Memory\n\n")
	for i := range 300 {
		fmt.Fprintf(&mem, "- fact %d about %s and the cluster\n", i, secret)
	}
	for _, f := range []struct{ path, text string }{
		{filepath.Join(proj, "sessions", "s1.jsonl"), log.String()},
		{filepath.Join(proj, "MEMORY.md"), mem.String()},
	} {
		bob.write(t, f.path, f.text)
		os.Chmod(f.path, 0o600)
	}
	stateDir := filepath.Join(base, "state")
	pol := writePolicy(t, base, fmt.Sprintf(`stores:
  - name: mh
    layout: memory-history
    paths: [%q]
    settle: 30ms
    session_idle: 1s
    memory_max_lines: 100
    link_pruned: true
`, filepath.Join(base, "*", "ws", "*")))
	p := startBin(t, memwatchFast, "--policy", pol, "--state-dir", stateDir)
	p.waitLog("ready", 10*time.Second)
	waitJournal(t, stateDir, 60*time.Second, "a consolidation", func(r state.Record) bool { return r.Rule == "consolidate" && r.Outcome == state.Done })
	waitJournal(t, stateDir, 60*time.Second, "a compression", func(r state.Record) bool {
		return r.Rule == "compress-memory" && r.Outcome == state.Done && r.Target == "MEMORY.md"
	})
	// Let the monthly file and the rest settle.
	waitUntil(t, 10*time.Second, func() bool {
		m, _ := filepath.Glob(filepath.Join(proj, "HISTORY-*.md"))
		return len(m) > 0
	})
	var made []string
	filepath.WalkDir(proj, func(p string, d os.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() && p != filepath.Join(proj, "sessions", "s1.jsonl") && p != filepath.Join(proj, "MEMORY.md") {
			made = append(made, p)
		}
		return nil
	})
	if len(made) < 3 {
		t.Fatalf("memwatch made %d files in bob's project, want HISTORY.md, its month, an archive and the moved facts: %v", len(made), made)
	}
	for _, f := range made {
		fi, _ := os.Stat(f)
		if out, err := alice.command("head", "-c", "64", f).CombinedOutput(); err == nil {
			t.Errorf("alice reads %s (%v, made by memwatch from bob's 0600 files): %q", f, fi.Mode(), out)
		}
		if st := fi.Sys().(*syscall.Stat_t); int(st.Uid) != bob.uid {
			t.Errorf("%s is owned by uid %d, not bob's %d", f, st.Uid, bob.uid)
		}
	}
	if fi, _ := os.Stat(filepath.Join(proj, "MEMORY.md")); fi.Mode().Perm() != 0o600 {
		t.Errorf("the compressed MEMORY.md is %v, want its own 0600", fi.Mode())
	}
	t.Logf("memwatch made %d files, none alice can read: %v", len(made), made)
}

// TestGuardInitTypedReads: alice makes Crush's projects.json a FIFO, a
// symbolic link to /dev/zero, and a 200 MB file. root's memwatch init
// --home on her home finishes each within 20 s under 300 MiB, says why it
// left the file out, and still finds her other agents.
func TestGuardInitTypedReads(t *testing.T) {
	t.Parallel()
	_, alice, _ := tenants(t)
	alice.write(t, filepath.Join(alice.home, ".claude", "projects", "-home-alice-src-app", "s1.jsonl"), `{"type":"user","message":{"role":"user","content":"hi"}}`+"\n")
	alice.write(t, filepath.Join(alice.home, "src", "app", ".crush", "crush.db"), "x")
	pj := filepath.Join(alice.home, ".local", "share", "crush", "projects.json")
	for _, tc := range []struct {
		name string
		make func() error
	}{
		{"a FIFO", func() error { return syscall.Mkfifo(pj, 0o644) }},
		{"a link to /dev/zero", func() error { return os.Symlink("/dev/zero", pj) }},
		{"a 200 MB file", func() error {
			if err := os.WriteFile(pj, []byte(`{"projects":[`), 0o644); err != nil {
				return err
			}
			return os.Truncate(pj, 200<<20)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			os.Remove(pj)
			alice.mkdir(t, filepath.Dir(pj))
			if err := tc.make(); err != nil {
				t.Fatal(err)
			}
			os.Lchown(pj, alice.uid, alice.gid)
			cmd := exec.Command(memwatchFast, "init", "--home", alice.home)
			var out strings.Builder
			cmd.Stdout, cmd.Stderr = &out, &out
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			done := make(chan error, 1)
			go func() { done <- cmd.Wait() }()
			// Its peak RSS, sampled while it runs (the child's rusage counts
			// the test binary it was forked from): an init that reads
			// without bound runs, and grows, long enough to be seen.
			var peak int64
			tick := time.NewTicker(2 * time.Millisecond)
			defer tick.Stop()
			deadline := time.After(20 * time.Second)
		wait:
			for {
				select {
				case err := <-done:
					if err != nil {
						t.Fatalf("init: %v\n%s", err, out.String())
					}
					break wait
				case <-tick.C:
					peak = max(peak, vmHWM(cmd.Process.Pid))
				case <-deadline:
					cmd.Process.Kill()
					<-done
					t.Fatalf("init did not finish within 20 s:\n%s", out.String())
				}
			}
			if peak > 300<<20 {
				t.Errorf("init's peak RSS %d MiB, over 300", peak>>20)
			}
			if !strings.Contains(out.String(), "preset: claude-code") {
				t.Errorf("init no longer finds alice's Claude Code:\n%s", out.String())
			}
			if !strings.Contains(out.String(), "projects.json not read") {
				t.Errorf("init does not say it left projects.json out:\n%s", out.String())
			}
		})
	}
}

// TestGuardClientThroughOpenStateDir: the state directory existed before
// as 0755 (its files 0600, root's). alice's recall, as alice, cannot open
// them: it asks the daemon, and gets her own results and none of bob's;
// bob's unreadable files never end her search.
func TestGuardClientThroughOpenStateDir(t *testing.T) {
	t.Parallel()
	base, alice, bob := tenants(t)
	aWord, bWord := secretWord("aliceokapi"), secretWord("bobokapi")
	aRoot, bRoot := filepath.Join(alice.home, "ws", "a"), filepath.Join(bob.home, "ws", "b")
	alice.write(t, filepath.Join(aRoot, "sessions", "s1.jsonl"), `{"role":"user","content":"shared okapi note `+aWord+`"}`+"\n")
	bob.write(t, filepath.Join(bRoot, "sessions", "s1.jsonl"), `{"role":"user","content":"shared okapi note `+bWord+`"}`+"\n")
	// bob's tree is open as most are, his log is not.
	for _, d := range []string{bob.home, filepath.Dir(bRoot), bRoot, filepath.Join(bRoot, "sessions")} {
		os.Chmod(d, 0o755)
	}
	os.Chmod(filepath.Join(bRoot, "sessions", "s1.jsonl"), 0o600)
	stateDir := filepath.Join(base, "state")
	os.Mkdir(stateDir, 0o755)
	pol, _, bin, _ := wsDaemon(t, base, "state_dir: "+stateDir+"\n")
	if fi, err := os.Stat(filepath.Join(stateDir, "memwatch.db")); err != nil || fi.Mode().Perm()&0o077 != 0 {
		t.Fatalf("memwatch.db: %v %v", fi, err)
	}
	recallAs := func(u tenant, args ...string) (string, error) {
		out, err := u.command(bin, append([]string{"recall", "--policy", pol, "--json"}, args...)...).CombinedOutput()
		return string(out), err
	}
	waitUntil(t, 15*time.Second, func() bool { out, _ := recallAs(alice, "--all", aWord); return strings.Contains(out, aWord) })
	for _, args := range [][]string{{"--all", "okapi"}, {"--all", aWord}, {"okapi"}} {
		out, err := recallAs(alice, args...)
		if err != nil || !strings.Contains(out, aWord) {
			t.Errorf("alice's recall %v: %v\n%s", args, err, out)
		}
		if strings.Contains(out, bWord) {
			t.Errorf("alice's recall %v found bob's line:\n%s", args, out)
		}
	}
	if out, _ := recallAs(bob, "--all", "okapi"); !strings.Contains(out, bWord) || strings.Contains(out, aWord) {
		t.Errorf("bob's recall:\n%s", out)
	}
}

// vmHWM is a live process's peak RSS (0 once it is gone).
func vmHWM(pid int) int64 { return procStatus(pid, "VmHWM:") }

// procStatus is a size field of a live process's /proc status, in bytes
// (0 once it is gone).
func procStatus(pid int, field string) int64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, field); ok {
			var kb int64
			fmt.Sscanf(strings.TrimSpace(v), "%d", &kb)
			return kb << 10
		}
	}
	return 0
}
