package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// windowBench is issue #44's measure of consolidation's cost: the real
// daemon on one memory-history root (heuristic compactor, window 50), an
// agent appending to one session log at a steady rate. The daemon's CPU
// over two stretches of the run, early and late, must not grow with the
// log and the history behind it; and the CPU per 1,000 messages
// consolidated must be the same with 100 KB of history already written as
// with 10 MB.
func windowBench(bin, dir string, secs int) []row {
	var rows []row
	rate := 150
	fmt.Fprintf(os.Stderr, "window: one session at %d lines/s for %d s...\n", rate, secs)
	d := startWindowDaemon(bin, filepath.Join(dir, "window-steady"), 0)
	log := filepath.Join(d.root, "sessions", "s.jsonl")
	early, late := [2]float64{float64(secs) * 0.2, float64(secs) * 0.5}, [2]float64{float64(secs) * 0.7, float64(secs)}
	cpuAt := map[float64]float64{}
	w := newSessionWriter(log)
	t0 := time.Now()
	marks := []float64{early[0], early[1], late[0], late[1]}
	for n := 0; ; n++ {
		at := t0.Add(time.Duration(n) * time.Second / time.Duration(rate))
		for len(marks) > 0 && time.Since(t0).Seconds() >= marks[0] {
			cpuAt[marks[0]] = cpuSeconds(d.cmd.Process.Pid)
			marks = marks[1:]
		}
		if len(marks) == 0 {
			break
		}
		time.Sleep(time.Until(at))
		w.message(n)
	}
	w.close()
	peak := peakRSSMiB(d.cmd.Process.Pid)
	d.stop()
	consolidations := d.consolidations()
	cpuEarly := (cpuAt[early[1]] - cpuAt[early[0]]) / (early[1] - early[0])
	cpuLate := (cpuAt[late[1]] - cpuAt[late[0]]) / (late[1] - late[0])
	rows = append(rows,
		row{fmt.Sprintf("window: CPU, %d lines/s, seconds %.0f-%.0f", rate, early[0], early[1]), fmt.Sprintf("%.1f%% of a core", 100*cpuEarly), "< 30%", verdict(cpuEarly < 0.3)},
		row{fmt.Sprintf("window: CPU, %d lines/s, seconds %.0f-%.0f", rate, late[0], late[1]), fmt.Sprintf("%.1f%% (%.2fx early)", 100*cpuLate, cpuLate/cpuEarly), "< 30%, <= 1.3x", verdict(cpuLate < 0.3 && cpuLate <= 1.3*cpuEarly)},
		row{"window: peak RSS", fmt.Sprintf("%.1f MiB", peak), "<= 100 MiB", verdict(peak <= 100)},
		row{fmt.Sprintf("window: consolidations of %d messages (window 50, keep 10)", w.n), strconv.Itoa(consolidations), fmt.Sprintf("~%d", w.n/40), verdict(consolidations <= w.n/40+2)},
	)

	// CPU per 1,000 messages consolidated with a small and a large history.
	var per [2]float64
	for i, hist := range []int64{100 << 10, 10 << 20} {
		fmt.Fprintf(os.Stderr, "window: 4,000 messages consolidated over %d KiB of history...\n", hist>>10)
		d := startWindowDaemon(bin, filepath.Join(dir, fmt.Sprintf("window-%d", hist)), hist)
		w := newSessionWriter(filepath.Join(d.root, "sessions", "s.jsonl"))
		// The first evaluation after a start reads each file whole once
		// (what memwatch knows of them is in memory): a start's cost, not
		// a message's. Measured from the first consolidation on.
		const warm, msgs = 100, 4000
		for n := range warm {
			w.message(n)
		}
		d.waitConsolidated(warm - 10)
		c0 := cpuSeconds(d.cmd.Process.Pid)
		for n := warm; n < warm+msgs; n++ {
			w.message(n)
			if n%20 == 19 {
				time.Sleep(50 * time.Millisecond) // 400 lines/s in bursts of 20
			}
		}
		w.close()
		d.waitConsolidated(warm + msgs - 50)
		per[i] = (cpuSeconds(d.cmd.Process.Pid) - c0) * 1000 / msgs
		d.stop()
	}
	rows = append(rows,
		row{"window: CPU per 1,000 messages, 100 KiB of history", fmt.Sprintf("%.3f CPU-s", per[0]), "", ""},
		row{"window: CPU per 1,000 messages, 10 MiB of history", fmt.Sprintf("%.3f CPU-s (%.2fx)", per[1], per[1]/per[0]), "<= 1.2x", verdict(per[1] <= 1.2*per[0])},
	)
	return rows
}

// windowDaemon is the real daemon on one memory-history root.
type windowDaemon struct {
	cmd                *exec.Cmd
	root               string
	bin, policy, state string
	done               chan struct{} // its log read to the end
}

func startWindowDaemon(bin, dir string, history int64) *windowDaemon {
	return startWindowDaemonWith(bin, dir, history, "", nil)
}

// startWindowDaemonWith is startWindowDaemon with more of a policy (top
// level keys) and environment.
func startWindowDaemonWith(bin, dir string, history int64, extra string, env []string) *windowDaemon {
	root := filepath.Join(dir, "ws", "a")
	os.MkdirAll(filepath.Join(root, "sessions"), 0o755)
	if history > 0 {
		f, err := os.Create(filepath.Join(root, "HISTORY.md"))
		if err != nil {
			fail(err)
		}
		bw := bufio.NewWriter(f)
		t := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
		for n := int64(0); n < history; {
			e := fmt.Sprintf("## %s\n[raw-fallback]\n- user: an earlier conversation about the deploy, entry %d\n- assistant: noted, the staging cluster goes first\n\n", t.Format("2006-01-02T15:04:05.000Z"), n)
			bw.WriteString(e)
			n += int64(len(e))
			t = t.Add(time.Minute)
		}
		bw.Flush()
		f.Close()
	}
	pol := filepath.Join(dir, "policy.yaml")
	os.WriteFile(pol, []byte(fmt.Sprintf("version: 1\n"+extra+"stores:\n  - name: w\n    layout: memory-history\n    paths: [%q]\n    sessions: sessions/*.jsonl\n    window: 50\n    keep: 10\n    session_idle: 1h\n",
		filepath.Join(dir, "ws", "*"))), 0o644)
	cmd := dieWithUs(exec.Command(bin, "run", "--policy", pol, "--state-dir", filepath.Join(dir, "state"), "--log-format", "json"))
	cmd.Env = append(os.Environ(), env...)
	stderr, _ := cmd.StderrPipe()
	if err := cmd.Start(); err != nil {
		fail(err)
	}
	d := &windowDaemon{cmd: cmd, root: root, bin: bin, policy: pol, state: filepath.Join(dir, "state"), done: make(chan struct{})}
	ready := make(chan bool)
	go func() {
		sc := bufio.NewScanner(stderr)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			var m map[string]any
			if json.Unmarshal(sc.Bytes(), &m) != nil {
				continue
			}
			switch {
			case m["level"] == "ERROR" || m["level"] == "WARN":
				fmt.Fprintln(os.Stderr, "memwatch:", sc.Text())
			case strings.HasPrefix(fmt.Sprint(m["msg"]), "caught up"):
				close(ready)
			}
		}
		close(d.done)
	}()
	select {
	case <-ready:
	case <-time.After(30 * time.Second):
		cmd.Process.Kill()
		fail(fmt.Errorf("window: memwatch did not catch up in 30 s"))
	}
	return d
}

// waitConsolidated waits until a range ending at or after line has been
// consolidated: HISTORY.md's last range marker says so. The daemon's log
// does not (it says a repeated line five times a minute a root, then how
// many it left out), and asking the daemon would add to the CPU measured.
func (d *windowDaemon) waitConsolidated(line int) {
	deadline := time.Now().Add(2 * time.Minute)
	for lastConsolidated(filepath.Join(d.root, "HISTORY.md")) < line {
		if time.Now().After(deadline) {
			fail(fmt.Errorf("window: line %d not consolidated in 2 minutes", line))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// rangeMarker is the marker a consolidation writes after its entry:
// <!-- memwatch: sessions/s.jsonl#L3931-4090 range:dc3add754137e60a -->.
var rangeMarker = regexp.MustCompile(`<!-- memwatch: [^ ]*#L\d+-(\d+) range:`)

// lastConsolidated is the last line of the last range consolidated into
// the history file at path (its last 64 KiB read), 0 for none.
func lastConsolidated(path string) int {
	f, err := os.Open(path)
	if err != nil {
		return 0
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return 0
	}
	tail := make([]byte, min(fi.Size(), 64<<10))
	n, _ := f.ReadAt(tail, fi.Size()-int64(len(tail)))
	ms := rangeMarker.FindAllSubmatch(tail[:n], -1)
	if len(ms) == 0 {
		return 0
	}
	last, _ := strconv.Atoi(string(ms[len(ms)-1][1]))
	return last
}

// stop ends the daemon.
func (d *windowDaemon) stop() {
	d.cmd.Process.Signal(syscall.SIGTERM)
	d.cmd.Wait()
	<-d.done
}

// consolidations is how many ranges the daemon consolidated, as its
// journal says (a record a range and target, the range its key).
func (d *windowDaemon) consolidations() int {
	out, err := exec.Command(filepath.Join(filepath.Dir(d.bin), "memwatchd"), "log", "--policy", d.policy, "--state-dir", d.state, "--rule", "consolidate", "--json", "-n", "100000").Output()
	if err != nil {
		fail(fmt.Errorf("window: the journal's consolidations: %w", err))
	}
	var recs []struct{ Key, Outcome string }
	if err := json.Unmarshal(out, &recs); err != nil {
		fail(fmt.Errorf("window: the journal's consolidations: %w", err))
	}
	ranges := map[string]bool{}
	for _, r := range recs {
		if r.Outcome == "done" {
			ranges[r.Key] = true
		}
	}
	return len(ranges)
}

// sessionWriter is an agent appending a message per line, each with its
// own write (O_APPEND, held open).
type sessionWriter struct {
	f *os.File
	n int
}

func newSessionWriter(path string) *sessionWriter {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		fail(err)
	}
	return &sessionWriter{f: f}
}

func (w *sessionWriter) message(i int) {
	role := []string{"user", "assistant"}[i%2]
	fmt.Fprintf(w.f, `{"role":%q,"content":"message %d: the deploy of the staging cluster waits for the migration; %s","timestamp":%q}`+"\n",
		role, i, strings.Repeat("more words of the conversation ", 4), time.Now().UTC().Format(time.RFC3339Nano))
	w.n++
}

func (w *sessionWriter) close() { w.f.Close() }

// peakRSSMiB is a process's peak resident set (VmHWM).
func peakRSSMiB(pid int) float64 {
	b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	for _, l := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(l, "VmHWM:") {
			kb, _ := strconv.ParseFloat(strings.Fields(l)[1], 64)
			return kb / 1024
		}
	}
	return 0
}
