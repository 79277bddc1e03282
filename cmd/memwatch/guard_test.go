//go:build !lean

package main

import (
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
)

// The guard suite runs the real daemon as root beside real unprivileged
// users and checks what issue [guard] asks: no request, file or burst of
// events makes the root daemon leak, hang or drown.

// getAs does one GET over the control socket as u (this test binary,
// re-executed as u, is the client): the status, the time the request
// took as the client saw it, and the start of the body.
func getAs(t *testing.T, helper string, u tenant, sock, path string) (int, time.Duration, string) {
	t.Helper()
	cmd := u.command(helper, "-test.run=^$")
	cmd.Env = append(cmd.Env, helperEnv+"=get", helperEnv+"_ARGS="+sock+"\x1f"+path)
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("GET %s as %s: %v", path, u.name, err)
	}
	head, body, _ := strings.Cut(string(out), "\n")
	var code int
	var ms int64
	fmt.Sscanf(head, "%d %d", &code, &ms)
	return code, time.Duration(ms) * time.Millisecond, body
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
	sock := filepath.Join(base, "run", "memwatch.sock")
	stateDir := filepath.Join(base, "state")
	pol := writePolicy(t, base, fmt.Sprintf(`control:
  socket: %s
ui:
  enabled: true
stores:
  - name: mh
    layout: memory-history
    paths: [%q]
    settle: 30ms
    consolidate: false
`, sock, filepath.Join(base, "*", "ws", "*")))
	os.Chmod(pol, 0o644)
	bin := filepath.Join(base, "memwatch")
	copyFile(t, memwatchFast, bin, 0o755)
	helper := filepath.Join(base, "helper")
	copyFile(t, os.Args[0], helper, 0o755)
	p := startBin(t, memwatchFast, "--policy", pol, "--state-dir", stateDir)
	p.waitLog("ready", 10*time.Second)
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
	for _, cite := range cites {
		for _, path := range []string{"/v1/show", "/ui/show"} {
			code, took, body := getAs(t, helper, alice, sock, path+"?"+url.Values{"root": {aRoot}, "cite": {cite}}.Encode())
			if took > time.Second {
				t.Errorf("%s %s took %v", path, cite, took)
			}
			if code == 200 && path == "/v1/show" && strings.Count(body, `"Line":`) > 5 {
				t.Errorf("%s %s: more lines than the file has: %s", path, cite, body)
			}
			if code == 0 || code >= 500 {
				t.Errorf("%s %s: %d %s", path, cite, code, body)
			}
		}
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
