package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/memwatch/memwatch/confine"
	"github.com/memwatch/memwatch/secrets"
	"github.com/memwatch/memwatch/session"
	"github.com/memwatch/memwatch/spool"
)

// secretsBench measures what finding credentials costs beside capturing:
// Claude Code transcripts whose tool results are real source files (the
// Go tree's), mib MiB of them in sessions of about 200 KiB, captured into
// a spool, then every line run through the detector as the daemon's count
// of credentials runs it (gitleaks' rules, keyword prefilter). CPU time
// of this process (user+sys) for each.
func secretsBench(dir string, mib int) []row {
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
	root, err := confine.Open(proj, confine.Options{MaxFileSize: 1 << 40})
	if err != nil {
		fail(err)
	}
	defer root.Close()
	sp, err := spool.Open(context.Background(), filepath.Join(dir, "secrets-spool"))
	if err != nil {
		fail(err)
	}
	defer sp.Close()
	c0 := cpuSelf()
	for _, f := range files {
		if _, err := sp.Capture(context.Background(), root, filepath.Base(f), spool.Options{IsMessage: session.IsMessage}); err != nil {
			fail(err)
		}
	}
	capture := cpuSelf() - c0
	d := secrets.Default()
	found := 0
	c0 = cpuSelf()
	for _, f := range files {
		fh, err := os.Open(f)
		if err != nil {
			fail(err)
		}
		sc := bufio.NewScanner(fh)
		sc.Buffer(make([]byte, 1<<20), 16<<20)
		for sc.Scan() {
			found += len(d.Find(sc.Text()))
		}
		fh.Close()
	}
	detect := cpuSelf() - c0
	pct := 100 * detect.Seconds() / capture.Seconds()
	return []row{
		{fmt.Sprintf("capture, %d MiB of transcripts of source code (CPU)", n>>20), fmt.Sprintf("%.2f s (%.0f MiB/s)", capture.Seconds(), float64(n>>20)/capture.Seconds()), "", ""},
		{"credential detection over the same lines (CPU)", fmt.Sprintf("%.2f s, %.0f%% of capture (%d found)", detect.Seconds(), pct, found), "<= 10%", verdict(pct <= 10)},
	}
}

// cpuSelf is this process's CPU time so far (user+sys).
func cpuSelf() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
