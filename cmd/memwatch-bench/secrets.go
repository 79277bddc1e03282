package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/memwatch/memwatch/secrets"
)

// secretsBench measures what finding credentials costs beside capturing:
// Claude Code transcripts whose tool results are real source files (the
// Go tree's), mib MiB of them in sessions of about 200 KiB, caught up,
// then every line run through the detector as the daemon's count
// of credentials runs it (gitleaks' rules, keyword prefilter): the real
// daemon's catch-up (capture and indexing) and its count right after, in
// CPU seconds as it logs them.
func secretsBench(bin, dir string, mib int) []row {
	proj := filepath.Join(dir, "secrets-home", "-src-app")
	if err := os.MkdirAll(proj, 0o755); err != nil {
		fail(err)
	}
	var srcs []string
	goroot, _ := exec.Command("go", "env", "GOROOT").Output()
	filepath.WalkDir(filepath.Join(strings.TrimSpace(string(goroot)), "src"), func(p string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() && strings.HasSuffix(p, ".go") {
			srcs = append(srcs, p)
		}
		return nil
	})
	if len(srcs) == 0 {
		return []row{{"credential detection vs capture", "skipped: no Go source tree", "", ""}}
	}
	total := int64(mib) << 20
	var n int64
	var files []string
	for i, s := 0, 0; n < total; i++ {
		name := filepath.Join(proj, fmt.Sprintf("%04d.jsonl", i))
		f, err := os.Create(name)
		if err != nil {
			fail(err)
		}
		w := bufio.NewWriter(f)
		for size := 0; size < 200<<10 && n < total; s++ {
			b, err := os.ReadFile(srcs[s%len(srcs)])
			if err != nil || len(b) > 64<<10 {
				continue
			}
			ask, _ := json.Marshal(map[string]any{"type": "assistant", "message": map[string]any{"role": "assistant", "content": []map[string]any{{"type": "tool_use", "id": fmt.Sprint("t", s), "name": "Read", "input": map[string]any{"file_path": srcs[s%len(srcs)]}}}}})
			res, _ := json.Marshal(map[string]any{"type": "user", "message": map[string]any{"role": "user", "content": []map[string]any{{"type": "tool_result", "tool_use_id": fmt.Sprint("t", s), "content": string(b)}}}})
			for _, l := range [][]byte{ask, res} {
				w.Write(append(l, '\n'))
				size += len(l) + 1
				n += int64(len(l) + 1)
			}
		}
		w.Flush()
		f.Close()
		files = append(files, name)
	}
	fmt.Fprintf(os.Stderr, "credential detection: %d sessions, %d MiB of tool results from Go's source tree...\n", len(files), n>>20)
	// The real daemon: its catch-up (capture and indexing) and its count
	// of the credentials right after it, each with its CPU seconds.
	pol := filepath.Join(dir, "secrets-policy.yaml")
	os.WriteFile(pol, []byte(fmt.Sprintf("version: 1\nstores:\n  - name: cc\n    preset: claude-code\n    paths: [%q]\n", filepath.Join(dir, "secrets-home", "*"))), 0o644)
	cmd := dieWithUs(exec.Command(bin, "run", "--policy", pol, "--state-dir", filepath.Join(dir, "secrets-state"), "--log-format", "json"))
	cmd.Env = append(os.Environ(), "XDG_RUNTIME_DIR="+filepath.Join(dir, "secrets-run"))
	os.MkdirAll(filepath.Join(dir, "secrets-run"), 0o700)
	stderr, _ := cmd.StderrPipe()
	if err := cmd.Start(); err != nil {
		fail(err)
	}
	var catchup, count float64
	sc := bufio.NewScanner(stderr)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for count == 0 && sc.Scan() {
		var m map[string]any
		if json.Unmarshal(sc.Bytes(), &m) != nil {
			continue
		}
		cpu, _ := strconv.ParseFloat(fmt.Sprint(m["cpu_seconds"]), 64)
		switch {
		case strings.HasPrefix(fmt.Sprint(m["msg"]), "caught up"):
			catchup = cpu
		case m["msg"] == countedMsg && catchup > 0:
			count = max(cpu, 0.005)
		}
	}
	cmd.Process.Kill()
	cmd.Wait()
	if catchup == 0 || count == 0 {
		return []row{{"credential detection vs the catch-up", "no figure: the daemon said no catch-up or no count", "", ""}}
	}
	// The detector alone on the same lines, in this process, each read as
	// the count reads it (a JSON line's escapes unescaped).
	d := secrets.Default()
	found := 0
	var buf []byte
	c0 := cpuSelf()
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			fail(err)
		}
		for l := range bytes.SplitSeq(b, []byte("\n")) {
			found += len(d.FindLine(l, &buf))
		}
	}
	detect := cpuSelf() - c0
	pct := 100 * count / catchup
	return []row{
		{fmt.Sprintf("catch-up of %d MiB of transcripts of source code (CPU)", n>>20), fmt.Sprintf("%.2f s (%.0f MiB/s)", catchup, float64(n>>20)/catchup), "", ""},
		{"the count of credentials after it (CPU)", fmt.Sprintf("%.2f s, %.1f%% of the catch-up", count, pct), "<= 10%", verdict(pct <= 10)},
		{"the detector alone over the same lines", fmt.Sprintf("%.0f MB/s (%d found)", float64(n)/1e6/detect.Seconds(), found), "", ""},
	}
}

// cpuSelf is this process's CPU time so far (user+sys).
func cpuSelf() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
