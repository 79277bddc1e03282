package e2e

import (
	"database/sql"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/memwatch/memwatch/state"
)

// TestLeanBinary: memwatch, the client (cmd/memwatch), runs recall, show, log,
// versions, status and version itself, links none of the daemon's heavy
// packages, and runs every other command through memwatchd beside it
// (arguments, exit code and output as memwatchd's), a search no daemon
// answers through memwatch-search (which links none of them either);
// without a memwatchd it says what is missing.
func TestLeanBinary(t *testing.T) {
	list := exec.Command("go", "list", "-deps", clientPkg)
	list.Env = append(os.Environ(), "CGO_ENABLED=0") // as make build builds it
	out, err := list.Output()
	if err != nil {
		t.Fatal(err)
	}
	// A client links what a client needs: of memwatch, the wire types and
	// the shared commands alone; no C (the dynamic loader costs each start
	// more than the rest).
	ours := map[string]bool{"github.com/memwatch/memwatch/control": true, "github.com/memwatch/memwatch/cmd/internal/cli": true, clientPkg: true}
	for _, dep := range strings.Fields(string(out)) {
		if strings.HasPrefix(dep, "github.com/memwatch/memwatch/") && !ours[dep] || dep == "runtime/cgo" {
			t.Errorf("the lean binary links %s", dep)
		}
	}
	// Nor net/http's client and the TLS it brings (control speaks
	// HTTP/1.0 itself): their initialisation was a third of a start.
	for _, heavy := range []string{"net/http", "crypto/tls", "github.com/benbjohnson/litestream", "github.com/prometheus/client_golang/prometheus", "github.com/aws/aws-sdk-go-v2/service/s3", "github.com/modelcontextprotocol/go-sdk/mcp", "github.com/kardianos/service", "github.com/memwatch/memwatch/daemon", "google.golang.org/protobuf/proto"} {
		for _, dep := range strings.Fields(string(out)) {
			if dep == heavy {
				t.Errorf("the lean binary links %s", heavy)
			}
		}
	}
	// memwatch-search, the search with no daemon, links none of the
	// daemon's heavy packages either: its start was most of such a search.
	list = exec.Command("go", "list", "-deps", searchPkg)
	out, err = list.Output()
	if err != nil {
		t.Fatal(err)
	}
	for _, heavy := range []string{"github.com/benbjohnson/litestream", "github.com/prometheus/client_golang/prometheus", "github.com/aws/aws-sdk-go-v2/service/s3", "github.com/modelcontextprotocol/go-sdk/mcp", "github.com/kardianos/service", "github.com/memwatch/memwatch/daemon", "github.com/memwatch/memwatch/replica", "google.golang.org/protobuf/proto"} {
		for _, dep := range strings.Fields(string(out)) {
			if dep == heavy {
				t.Errorf("memwatch-search links %s", heavy)
			}
		}
	}
	dir := t.TempDir()
	lean := filepath.Join(dir, "bin", "memwatch")
	if out, err := exec.Command("go", "build", "-o", lean, clientPkg).CombinedOutput(); err != nil {
		t.Fatalf("build the lean memwatch: %v\n%s", err, out)
	}
	if err := os.Symlink(memwatchFast, filepath.Join(dir, "bin", "memwatchd")); err != nil {
		t.Fatal(err)
	}
	run := func(bin string, args ...string) (string, int) {
		t.Helper()
		cmd := exec.Command(bin, args...)
		cmd.Env = append(os.Environ(), "PATH=/usr/bin:/bin")
		out, err := cmd.CombinedOutput()
		return string(out), exitCode(err)
	}
	if out, code := run(lean, "version"); code != 0 || !strings.HasPrefix(out, "memwatch ") {
		t.Errorf("lean version: exit %d, %s", code, out)
	}
	root := filepath.Join(dir, "root")
	os.MkdirAll(root, 0o755)
	os.WriteFile(filepath.Join(root, "messages.jsonl"), []byte(`{"role":"user","content":"the zebracorn deploy waits"}`+"\n"), 0o644)
	if out, code := run(lean, "recall", "--state-dir", filepath.Join(dir, "state"), "--dir", root, "zebracorn"); code != 0 || !strings.Contains(out, "messages.jsonl#L1") {
		t.Errorf("lean recall: exit %d, %s", code, out)
	}
	bad := filepath.Join(dir, "bad.yaml")
	os.WriteFile(bad, []byte("version: 1\nstores: [\n"), 0o644)
	for _, args := range [][]string{{"validate", "--policy", bad}, {"--policy", bad, "validate"}} {
		out, code := run(lean, args...)
		if want, _ := run(memwatchFast, args...); code != 2 || out != want {
			t.Errorf("lean %q, through memwatchd: exit %d, %q; want exit 2, %q", args, code, out, want)
		}
	}
	// A search no daemon answers is memwatch-search's when it is beside
	// the client (memwatchd is not needed for it), and memwatch-search
	// hands every other command to memwatchd.
	searchOnly := filepath.Join(dir, "search-only")
	os.MkdirAll(searchOnly, 0o755)
	copyFile(t, lean, filepath.Join(searchOnly, "memwatch"), 0o755)
	if out, err := exec.Command("go", "build", "-o", filepath.Join(searchOnly, "memwatch-search"), searchPkg).CombinedOutput(); err != nil {
		t.Fatalf("build memwatch-search: %v\n%s", err, out)
	}
	if out, code := run(filepath.Join(searchOnly, "memwatch"), "recall", "--state-dir", filepath.Join(dir, "state"), "--dir", root, "zebracorn"); code != 0 || !strings.Contains(out, "messages.jsonl#L1") {
		t.Errorf("lean recall through memwatch-search: exit %d, %s", code, out)
	}
	if out, code := run(filepath.Join(searchOnly, "memwatch-search"), "validate", "--policy", bad); code != 1 || !strings.Contains(out, "memwatchd") {
		t.Errorf("memwatch-search validate with no memwatchd beside it: exit %d, %s; want exit 1 naming memwatchd", code, out)
	}
	alone := filepath.Join(dir, "alone", "memwatch")
	os.MkdirAll(filepath.Dir(alone), 0o755)
	b, _ := os.ReadFile(lean)
	os.WriteFile(alone, b, 0o755)
	if out, code := run(alone, "validate", "--policy", bad); code != 1 || !strings.Contains(out, "memwatchd") {
		t.Errorf("lean alone, validate: exit %d, %s; want exit 1 naming memwatchd", code, out)
	}
}

// TestClientSameEitherWay: the thin client prints the same and exits the
// same whether the daemon answers (its warm index) or not (memwatch-search
// searches, memwatchd does the rest, beside it): recall of a question, a word, a phrase, with turns
// around, as JSON, nothing found, a bad scope; show of a citation, with
// lines around, raw, a line that is not there.
func TestClientSameEitherWay(t *testing.T) {
	dir := t.TempDir()
	bin := filepath.Join(dir, "bin")
	lean := filepath.Join(bin, "memwatch")
	build := exec.Command("go", "build", "-o", lean, clientPkg)
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build the lean memwatch: %v\n%s", err, out)
	}
	copyFile(t, memwatchFast, filepath.Join(bin, "memwatchd"), 0o755)
	// Without the daemon, the searches are memwatch-search's (as installed).
	if out, err := exec.Command("go", "build", "-o", filepath.Join(bin, "memwatch-search"), searchPkg).CombinedOutput(); err != nil {
		t.Fatalf("build memwatch-search: %v\n%s", err, out)
	}
	root := filepath.Join(dir, "agents", "a1")
	os.MkdirAll(filepath.Join(root, "sessions"), 0o755)
	var log strings.Builder
	for i, m := range []string{"where does billing deploy?", "Billing deploys to the eu-west-2 cluster, behind the flag.", "and the rollback plan?", "Roll back with the previous image tag; the zanzibar runbook says how.", "thanks"} {
		role := map[bool]string{true: "user", false: "assistant"}[i%2 == 0]
		fmt.Fprintf(&log, `{"role":%q,"content":%q,"timestamp":"2026-11-2%dT10:0%d:00Z"}`+"\n", role, m, i, i)
	}
	os.WriteFile(filepath.Join(root, "sessions", "s1.jsonl"), []byte(log.String()), 0o644)
	// A session the agent deletes once the daemon has it: its lines are
	// held in the spool, found with the daemon and without it.
	gone := filepath.Join(root, "sessions", "s0.jsonl")
	os.WriteFile(gone, []byte(`{"role":"user","content":"the quillowisp migration is parked","timestamp":"2026-11-19T09:00:00Z"}`+"\n"), 0o644)
	os.WriteFile(filepath.Join(root, "MEMORY.md"), []byte("# Memory\n- billing deploys go through staging first\n- the zanzibar runbook lives in ops/\n"), 0o644)
	stateDir := filepath.Join(dir, "state")
	pol := filepath.Join(dir, "policy.yaml")
	// Another agent's MEMORY.md over its limit: the journal has a compression.
	other := filepath.Join(dir, "other", "o1")
	os.MkdirAll(other, 0o755)
	var mem strings.Builder
	mem.WriteString("# Memory\n")
	for i := range 30 {
		fmt.Fprintf(&mem, "- 2026-11-%02d: fact %d about the queue\n", i%28+1, i)
	}
	os.WriteFile(filepath.Join(other, "MEMORY.md"), []byte(mem.String()), 0o644)
	os.WriteFile(pol, []byte(fmt.Sprintf("version: 1\nstate_dir: %s\nstores:\n  - name: agents\n    layout: memory-history\n    paths: [%q]\n    consolidate: false\n  - name: other\n    layout: memory-history\n    paths: [%q]\n    consolidate: false\n    memory_max_lines: 10\n", stateDir, filepath.Join(dir, "agents", "*"), filepath.Join(dir, "other", "*"))), 0o644)
	// As in a person's shell: no state directory named but the policy's.
	env := append(os.Environ(), "MEMWATCH_POLICY="+pol, "MEMWATCH_STATE_DIR=", "STATE_DIRECTORY=")
	cite := filepath.Join(root, "sessions", "s1.jsonl") + "#L2"
	cases := [][]string{
		{"recall", "--color", "never", "which cluster does billing deploy to?"},
		{"recall", "--color", "never", "zanzibar"},
		{"recall", "--color", "never", `"previous image tag"`},
		{"recall", "--color", "never", "-C", "1", "eu-west-2"},
		{"recall", "--json", "rollback"},
		{"recall", "--color", "never", "zxqvbnmlkj"},
		{"recall", "--color", "never", "quillowisp"},
		{"recall", "--scope", "bogus", "deploy"},
		{"show", "--color", "never", cite},
		{"show", "--color", "never", "-C", "1", cite},
		{"show", "--color", "never", "--raw", cite},
		{"show", "--color", "never", filepath.Join(root, "sessions", "s1.jsonl") + "#L99"},
		{"log", "--color", "never"},
		{"log", "--color", "never", "-n", "1", "--store", "other"},
		{"log", "--json"},
		{"log", "--store", "nope"},
		{"log", "--rule", "nope"},
		{"log", "--since", "tomorrow"},
		{"log", "--kept"},
		{"versions", filepath.Join(other, "MEMORY.md")},
		{"versions", "--json", filepath.Join(other, "MEMORY.md")},
		{"versions", other},
		{"versions", filepath.Join(root, "nothing.md")},
		{"version"},
	}
	runAll := func() (outs []string, codes []int) {
		for _, args := range cases {
			cmd := exec.Command(lean, args...)
			cmd.Dir, cmd.Env = root, env
			out, err := cmd.Output()
			outs, codes = append(outs, string(out)), append(codes, exitCode(err))
		}
		return outs, codes
	}
	// The daemon's catch-up first fills the spool and the index; without
	// it, memwatchd reads the same state.
	p := startBin(t, filepath.Join(bin, "memwatchd"), "--policy", pol)
	p.waitLog("caught up: every root evaluated, its logs captured and indexed", 60*time.Second)
	if err := os.Remove(gone); err != nil {
		t.Fatal(err)
	}
	spoolDB, err := sql.Open("sqlite", "file:"+filepath.Join(stateDir, "spool.db")+"?mode=ro")
	if err != nil {
		t.Fatal(err)
	}
	defer spoolDB.Close()
	waitJournal(t, stateDir, 30*time.Second, "the compression", func(r state.Record) bool { return r.Rule == "compress-memory" && r.Outcome == state.Done })
	// and its files' versions kept (after the change settles): the daemon
	// has nothing left to do.
	waitUntil(t, 30*time.Second, func() bool {
		cmd := exec.Command(filepath.Join(bin, "memwatchd"), "versions", other)
		cmd.Env = env
		out, _ := cmd.Output()
		cmd = exec.Command(filepath.Join(bin, "memwatchd"), "versions", filepath.Join(other, "MEMORY.md"))
		cmd.Env = env
		mem, _ := cmd.Output()
		return strings.Contains(string(out), "MEMORY-pruned") && strings.Contains(string(mem), "memwatch (journal")
	})
	// The deleted session's lines held, and nothing left to do (a job
	// between the two binaries' status would change its counts).
	waitUntil(t, 30*time.Second, func() bool {
		var missing int
		return spoolDB.QueryRow(`SELECT missing FROM logs WHERE path='sessions/s0.jsonl'`).Scan(&missing) == nil && missing == 1
	})
	waitJobsIdle(t, pol, stateDir, 1500*time.Millisecond, 30*time.Second)
	withOuts, withCodes := runAll()
	// status is the client's too: as memwatchd prints it (but the uptime).
	uptime := regexp.MustCompile(`up [0-9hms.]+|state directory holds: .*`)
	for _, args := range [][]string{{"status"}, {"status", "--bytes"}} {
		var outs [2]string
		for i, b := range []string{lean, filepath.Join(bin, "memwatchd")} {
			cmd := exec.Command(b, args...)
			cmd.Dir, cmd.Env = root, env
			out, err := cmd.Output()
			if err != nil {
				t.Fatalf("%s %q: %v\n%s", b, args, err, out)
			}
			outs[i] = uptime.ReplaceAllString(string(out), "up T")
		}
		if outs[0] != outs[1] || !strings.Contains(outs[0], "other   memory-history") {
			t.Errorf("memwatch %q printed:\n%s\nmemwatchd %q:\n%s", args, outs[0], args, outs[1])
		}
	}
	// A typo saved in the policy: the daemon runs the last good version,
	// and every command says so and goes on with it.
	good, _ := os.ReadFile(pol)
	os.WriteFile(pol, []byte(strings.Replace(string(good), "consolidate: false", "consolidate: false\n    layuot: x", 1)), 0o644)
	for _, args := range [][]string{{"status"}, {"log", "-n", "1"}, {"recall", "zanzibar"}, {"versions", filepath.Join(other, "MEMORY.md")}} {
		cmd := exec.Command(lean, args...)
		cmd.Dir, cmd.Env = root, env
		var stderr strings.Builder
		cmd.Stderr = &stderr
		if out, err := cmd.Output(); err != nil || !strings.Contains(stderr.String(), "layuot") || len(out) == 0 {
			t.Errorf("memwatch %q with a typo in the policy: %v, stderr:\n%s\nstdout:\n%s", args, err, stderr.String(), out)
		}
	}
	os.WriteFile(pol, good, 0o644)
	if err := p.stop(20 * time.Second); err != nil {
		t.Fatalf("stop the daemon: %v", err)
	}
	withoutOuts, withoutCodes := runAll()
	// With no daemon, a typo in the policy: memwatch-search says so and
	// searches the roots it can read (no policy: the directory it is in).
	os.WriteFile(pol, []byte(strings.Replace(string(good), "consolidate: false", "consolidate: false\n    layuot: x", 1)), 0o644)
	cmd := exec.Command(lean, "recall", "--dir", root, "zanzibar")
	cmd.Dir, cmd.Env = root, env
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if out, err := cmd.Output(); err != nil || !strings.Contains(stderr.String(), "layuot") || !strings.Contains(string(out), "zanzibar") {
		t.Errorf("memwatch recall with a typo in the policy and no daemon: %v, stderr:\n%s\nstdout:\n%s", err, stderr.String(), out)
	}
	os.WriteFile(pol, good, 0o644)
	for i, args := range cases {
		if withCodes[i] != withoutCodes[i] || withOuts[i] != withoutOuts[i] {
			t.Errorf("memwatch %q: with the daemon exit %d:\n%s\nwithout it exit %d:\n%s", args, withCodes[i], withOuts[i], withoutCodes[i], withoutOuts[i])
		}
	}
	if !strings.Contains(withoutOuts[6], "the quillowisp migration") {
		t.Errorf("memwatch recall of a deleted session's word with no daemon printed:\n%s", withoutOuts[6])
	}
	for i, want := range []int{0, 0, 0, 0, 0, 1, 0, 2, 0, 0, 0, 1, 0, 0, 0, 2, 2, 1, 1, 0, 0, 0, 1, 0} {
		if withCodes[i] != want {
			t.Errorf("memwatch %q: exit %d, want %d\n%s", cases[i], withCodes[i], want, withOuts[i])
		}
	}
}
