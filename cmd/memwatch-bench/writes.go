package main

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"
)

// homeWrites measures what an agent's write costs the daemon in a
// project of the home and in one of manySessions sessions (the home's
// smallest, copied): the evaluation that follows a write goes through
// every log of the project, so its cost must not grow with them much.
func homeWrites(pid int, projects string) []row {
	fmt.Fprintf(os.Stderr, "home: the cost of a write...\n")
	var biggest string
	var most int
	var all []string
	ents, _ := os.ReadDir(projects)
	for _, e := range ents {
		logs, _ := filepath.Glob(filepath.Join(projects, e.Name(), "*.jsonl"))
		all = append(all, logs...)
		if len(logs) > most {
			biggest, most = filepath.Join(projects, e.Name()), len(logs)
		}
	}
	if biggest == "" || len(all) < manySessions {
		return nil
	}
	// The smallest sessions, a project of them: the daemon finds the new
	// root and captures them before the writes are timed.
	sizes := map[string]int64{}
	for _, p := range all {
		if fi, err := os.Stat(p); err == nil {
			sizes[p] = fi.Size()
		}
	}
	slices.SortFunc(all, func(a, b string) int { return int(sizes[a] - sizes[b]) })
	many := filepath.Join(projects, "-home-u-src-many")
	if err := os.MkdirAll(many, 0o755); err != nil {
		return nil
	}
	for i, p := range all[:manySessions] {
		b, err := os.ReadFile(p)
		if err == nil {
			err = os.WriteFile(filepath.Join(many, fmt.Sprintf("%04d-%s", i, filepath.Base(p))), b, 0o644)
		}
		if err != nil {
			return nil
		}
	}
	// Quiet for longer than the daemon's 10 s tick: the credentials of
	// the project just copied are counted at a tick after it is captured
	// (daemon.recountEvery), work of the copy's, not of the writes timed.
	waitQuiet(pid, 3*time.Minute, 12*time.Second)
	small, ok1 := writeCost(pid, biggest)
	large, ok2 := writeCost(pid, many)
	if !ok1 || !ok2 {
		return []row{{"  an appended line: no figure (the daemon never went idle)", "", "", ""}}
	}
	return []row{
		{fmt.Sprintf("  an appended line, the daemon's CPU: in a project of %d sessions", most), fmt.Sprintf("%.1f ms", ms64(small)), "", ""},
		{fmt.Sprintf("  same, in a project of %d sessions", manySessions), fmt.Sprintf("%.1f ms (%.1fx)", ms64(large), float64(large)/float64(small)), "", ""},
	}
}

// manySessions is the sessions of the large project homeWrites makes.
const manySessions = 1000

// writeCost appends a line (a copy of its last) to a log of dir,
// writeRuns times, and returns the daemon's mean CPU for one: from the
// write to the daemon idle again (its capture, indexing, the project's
// evaluation after the settle time).
func writeCost(pid int, dir string) (time.Duration, bool) {
	logs, _ := filepath.Glob(filepath.Join(dir, "*.jsonl"))
	if len(logs) == 0 {
		return 0, false
	}
	log := logs[0]
	b, err := os.ReadFile(log)
	if err != nil {
		return 0, false
	}
	b = bytes.TrimRight(b, "\n")
	last := b[bytes.LastIndexByte(b, '\n')+1:]
	line := append(bytes.Clone(last), '\n')
	var total time.Duration
	for range writeRuns {
		before := cpuTime(pid)
		f, err := os.OpenFile(log, os.O_APPEND|os.O_WRONLY, 0)
		if err != nil {
			return 0, false
		}
		_, err = f.Write(line)
		f.Close()
		if err != nil || !waitIdle(pid, 30*time.Second) {
			return 0, false
		}
		total += cpuTime(pid) - before
	}
	return total / writeRuns, true
}

const writeRuns = 8

// waitIdle waits until the daemon has used no CPU for a while (longer
// than the policy's settle time of 500 ms, with its slack), at most max.
func waitIdle(pid int, max time.Duration) bool { return waitQuiet(pid, max, 2*time.Second) }

// waitQuiet waits until the daemon has used no CPU for quiet, at most max.
func waitQuiet(pid int, max, quiet time.Duration) bool {
	deadline := time.Now().Add(max)
	last, since := cpuTime(pid), time.Now()
	for time.Now().Before(deadline) {
		time.Sleep(100 * time.Millisecond)
		if now := cpuTime(pid); now-last > time.Millisecond {
			last, since = now, time.Now()
		} else if time.Since(since) >= quiet {
			return true
		}
	}
	return false
}

// cpuTime is a process's CPU time, all its threads', in nanoseconds
// (/proc's schedstat: the stat's ticks are 10 ms, a write's cost).
func cpuTime(pid int) time.Duration {
	tasks, _ := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
	var n time.Duration
	for _, t := range tasks {
		f, err := os.Open(fmt.Sprintf("/proc/%d/task/%s/schedstat", pid, t.Name()))
		if err != nil {
			continue
		}
		b, _ := io.ReadAll(f)
		f.Close()
		if v, err := strconv.ParseInt(strings.Fields(string(b) + " 0")[0], 10, 64); err == nil {
			n += time.Duration(v)
		}
	}
	return n
}

func ms64(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
