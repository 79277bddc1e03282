// Command memwatch-bench measures memwatch against its targets on this
// machine, in one run, and prints a table (make bench):
//   - capturing a JSONL session log into the spool: throughput and size;
//   - the real daemon on 10,000 session directories: time to ready, RSS
//     after ready, CPU used while idle, and latency from an append to the
//     rule evaluation beyond the settle time.
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/memwatch/memwatch/confine"
	"github.com/memwatch/memwatch/session"
	"github.com/memwatch/memwatch/spool"
)

type row struct{ metric, value, target, verdict string }

func main() {
	bin := flag.String("bin", "bin/memwatch", "memwatch binary")
	sizeMiB := flag.Int("capture-mib", 256, "size of the session log captured into the spool, in MiB")
	sessions := flag.Int("sessions", 10000, "session directories for the daemon benchmark")
	idle := flag.Duration("idle", 60*time.Second, "how long to measure idle CPU")
	samples := flag.Int("samples", 200, "append-latency samples")
	recallMiB := flag.Int("recall-mib", 1024, "size of the session tree for the recall benchmark in MiB")
	flag.Parse()
	dir, err := os.MkdirTemp("", "memwatch-bench")
	if err != nil {
		fail(err)
	}
	defer os.RemoveAll(dir)
	var rows []row
	rows = append(rows, captureBench(dir, *sizeMiB)...)
	rows = append(rows, recallBench(*bin, dir, *recallMiB)...)
	rows = append(rows, daemonBench(*bin, dir, *sessions, *idle, *samples)...)
	fmt.Printf("\nmemwatch bench (%s, %d CPUs)\n", time.Now().Format(time.DateOnly), numCPU())
	fmt.Printf("%-58s %-22s %-14s %s\n", "metric", "value", "target", "")
	for _, r := range rows {
		fmt.Printf("%-58s %-22s %-14s %s\n", r.metric, r.value, r.target, r.verdict)
	}
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "bench:", err)
	os.Exit(1)
}

func numCPU() int {
	b, _ := os.ReadFile("/proc/cpuinfo")
	return strings.Count(string(b), "processor\t:")
}

func verdict(ok bool) string {
	if ok {
		return "ok"
	}
	return "MISSED"
}

// captureBench writes a JSONL file and times capturing it into a fresh
// spool (what the daemon does with every session log it sees), and
// reports the spool's size on disk against the log's.
func captureBench(dir string, mib int) []row {
	path := filepath.Join(dir, "big.jsonl")
	f, err := os.Create(path)
	if err != nil {
		fail(err)
	}
	w := bufio.NewWriterSize(f, 1<<20)
	total := int64(mib) << 20
	var n int64
	for i := 0; n < total; i++ {
		line := fmt.Sprintf(`{"role":"%s","content":"%s %d"}`+"\n", []string{"user", "assistant"}[i%2], strings.Repeat("lorem ipsum dolor sit amet ", 7), i)
		w.WriteString(line)
		n += int64(len(line))
	}
	w.Flush()
	f.Close()
	fmt.Fprintf(os.Stderr, "capturing a %d MiB session log into the spool...\n", mib)
	exec.Command("cat", path).Run() // page cache
	root, err := confine.Open(dir, confine.Options{MaxFileSize: 1 << 40})
	if err != nil {
		fail(err)
	}
	defer root.Close()
	sdir := filepath.Join(dir, "spool")
	sp, err := spool.Open(context.Background(), sdir)
	if err != nil {
		fail(err)
	}
	t0 := time.Now()
	res, err := sp.Capture(context.Background(), root, "big.jsonl", spool.Options{IsMessage: session.IsMessage})
	if err != nil {
		fail(err)
	}
	d := time.Since(t0)
	size := sp.Size()
	sp.Close()
	os.RemoveAll(sdir)
	os.Remove(path)
	mbs := float64(total) / (1 << 20) / d.Seconds()
	return []row{
		{fmt.Sprintf("spool capture, %d MiB JSONL (%d lines)", mib, res.Lines), fmt.Sprintf("%v (%.0f MiB/s)", d.Round(time.Millisecond), mbs), "", ""},
		{"spool size on disk vs the log", fmt.Sprintf("%.2fx (%d MiB)", float64(size)/float64(total), size>>20), "", ""},
	}
}

// recallBench compares memwatch recall --all with grep -rin (and rg -i when
// installed) on a generated tree of sessions, same query, one run each.
func recallBench(bin, dir string, mib int) []row {
	tree := filepath.Join(dir, "recall")
	const sessions = 256
	perSession := int64(mib) << 20 / sessions
	fmt.Fprintf(os.Stderr, "generating a %d MiB tree of %d sessions...\n", mib, sessions)
	words := strings.Fields("the build failed because the migration script used an old schema so we rolled back and retried with the fixed version of the handler and tests")
	for s := range sessions {
		sd := filepath.Join(tree, fmt.Sprintf("sess-%03d", s))
		os.MkdirAll(filepath.Join(sd, "working-memory", "detail"), 0o755)
		os.WriteFile(filepath.Join(sd, "working-memory", "detail", "notes.md"), []byte("# Notes\n\n- decided to keep the zanzibar cache warm\n- nothing else\n"), 0o644)
		f, _ := os.Create(filepath.Join(sd, "messages.jsonl"))
		w := bufio.NewWriterSize(f, 1<<20)
		var n int64
		for i := 0; n < perSession; i++ {
			text := strings.Join(words[i%7:i%7+12], " ")
			if i%20011 == 7 {
				text += " zanzibar"
			}
			line := fmt.Sprintf(`{"role":"assistant","content":[{"type":"text","text":"%s %d"}],"timestamp":"2026-01-15T10:00:00Z"}`+"\n", text, i)
			w.WriteString(line)
			n += int64(len(line))
		}
		w.Flush()
		f.Close()
	}
	pol := filepath.Join(dir, "recall-policy.yaml")
	os.WriteFile(pol, []byte(fmt.Sprintf("version: 1\nstores:\n  - name: s\n    layout: session-detail\n    paths: [%q]\n", filepath.Join(tree, "*"))), 0o644)
	warm := exec.Command("sh", "-c", "cat "+tree+"/*/messages.jsonl > /dev/null")
	warm.Run()
	timeIt := func(name string, args ...string) time.Duration {
		best := time.Duration(1 << 62)
		for range 3 {
			cmd := exec.Command(name, args...)
			// A pipe, not /dev/null: GNU grep stops at the first match when
			// its output is /dev/null.
			cmd.Stdout, cmd.Stderr = io.Discard, io.Discard
			t0 := time.Now()
			cmd.Run()
			best = min(best, time.Since(t0))
		}
		return best
	}
	grep := timeIt("grep", "-rin", "zanzibar", tree)
	mw := timeIt(bin, "recall", "--policy", pol, "--all", "--store", "s", "--limit", "5", "zanzibar")
	rows := []row{
		{fmt.Sprintf("grep -rin, %d MiB tree of %d sessions", mib, sessions), grep.Round(time.Millisecond).String(), "", ""},
		{"memwatch recall --all (same query, full scan)", mw.Round(time.Millisecond).String(), "", ""},
		{"recall speed vs grep -rin", fmt.Sprintf("%.2fx", grep.Seconds()/mw.Seconds()), ">= 1.0x", verdict(grep >= mw)},
	}
	if _, err := exec.LookPath("rg"); err == nil {
		rg := timeIt("rg", "-i", "zanzibar", tree)
		rows = append(rows, row{"rg -i (same query)", rg.Round(time.Millisecond).String(), "", ""}, row{"recall speed vs rg -i", fmt.Sprintf("%.2fx", rg.Seconds()/mw.Seconds()), "", ""})
	}
	os.RemoveAll(tree)
	return rows
}

// daemonBench runs the real daemon on n session directories.
func daemonBench(bin, dir string, n int, idle time.Duration, samples int) []row {
	store := filepath.Join(dir, "sessions")
	fmt.Fprintf(os.Stderr, "creating %d session directories...\n", n)
	for i := range n {
		s := filepath.Join(store, fmt.Sprintf("s%05d", i))
		os.MkdirAll(s, 0o755)
		os.WriteFile(filepath.Join(s, "messages.jsonl"), []byte(`{"role":"user","content":"hello"}`+"\n"), 0o644)
	}
	const settle = 100 * time.Millisecond
	pol := filepath.Join(dir, "policy.yaml")
	os.WriteFile(pol, []byte(fmt.Sprintf("version: 1\nstores:\n  - name: sessions\n    layout: now-history\n    paths: [%q]\n    settle: %v\n    sweep: 0\n",
		filepath.Join(store, "*"), settle)), 0o644)
	cmd := exec.Command(bin, "run", "--policy", pol, "--state-dir", filepath.Join(dir, "state"), "--log-format", "json", "--log-level", "debug")
	stderr, _ := cmd.StderrPipe()
	t0 := time.Now()
	if err := cmd.Start(); err != nil {
		fail(err)
	}
	defer cmd.Process.Kill()
	events := make(chan map[string]any, 1<<16)
	go func() {
		sc := bufio.NewScanner(stderr)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			var m map[string]any
			if json.Unmarshal(sc.Bytes(), &m) != nil || m["level"] == "ERROR" {
				fmt.Fprintln(os.Stderr, "memwatch:", sc.Text())
			}
			if json.Unmarshal(sc.Bytes(), &m) == nil && (m["msg"] == "ready" || (m["msg"] == "change" && m["reason"] == "change")) {
				events <- m
			}
		}
		close(events)
	}()
	var ready time.Duration
	for ev := range events {
		if ev["msg"] == "ready" {
			ready = time.Since(t0)
			break
		}
	}
	if ready == 0 {
		fail(fmt.Errorf("memwatch never became ready"))
	}
	fmt.Fprintf(os.Stderr, "ready after %v; letting the start-up scan drain...\n", ready)
	time.Sleep(5 * time.Second)
	rss := rssMiB(cmd.Process.Pid)
	fmt.Fprintf(os.Stderr, "measuring idle CPU for %v...\n", idle)
	c0 := cpuSeconds(cmd.Process.Pid)
	time.Sleep(idle)
	idleCPU := cpuSeconds(cmd.Process.Pid) - c0

	fmt.Fprintf(os.Stderr, "measuring append latency (%d samples)...\n", samples)
	for len(events) > 0 {
		<-events
	}
	var lat []time.Duration
	for i := range samples {
		root := filepath.Join(store, fmt.Sprintf("s%05d", (i*7919)%n))
		f, _ := os.OpenFile(filepath.Join(root, "messages.jsonl"), os.O_WRONLY|os.O_APPEND, 0)
		at := time.Now()
		f.WriteString(`{"role":"assistant","content":"hi"}` + "\n")
		f.Close()
		for ev := range events {
			if ev["root"] == root {
				lat = append(lat, time.Since(at)-settle)
				break
			}
		}
	}
	cmd.Process.Signal(syscall.SIGTERM)
	cmd.Wait()
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	p50, p99 := lat[len(lat)/2], lat[len(lat)*99/100]
	return []row{
		{fmt.Sprintf("daemon: time to ready, %d session dirs", n), ready.Round(time.Millisecond).String(), "<= 5s", verdict(ready <= 5*time.Second)},
		{"daemon: RSS after ready", fmt.Sprintf("%.1f MiB", rss), "<= 100 MiB", verdict(rss <= 100)},
		{fmt.Sprintf("daemon: CPU while idle over %v", idle), fmt.Sprintf("%.3f CPU-s", idleCPU), "<= 0.5 CPU-s", verdict(idleCPU <= 0.5*idle.Seconds()/60)},
		{"daemon: append -> evaluation beyond settle, p50", p50.Round(10 * time.Microsecond).String(), "", ""},
		{"daemon: append -> evaluation beyond settle, p99", p99.Round(10 * time.Microsecond).String(), "<= 20ms", verdict(p99 <= 20*time.Millisecond)},
	}
}

func rssMiB(pid int) float64 {
	b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	for _, l := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(l, "VmRSS:") {
			kb, _ := strconv.ParseFloat(strings.Fields(l)[1], 64)
			return kb / 1024
		}
	}
	return 0
}

// cpuSeconds is user+system CPU time of a process (Linux /proc).
func cpuSeconds(pid int) float64 {
	b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	s := string(b)
	fields := strings.Fields(s[strings.LastIndexByte(s, ')')+2:])
	ut, _ := strconv.ParseFloat(fields[11], 64)
	st, _ := strconv.ParseFloat(fields[12], 64)
	return (ut + st) / 100 // USER_HZ
}
