package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

// The client as people type it, with the daemon running (the usual case:
// it is a service): every figure is end to end, the CLI's process start
// included, beside its peer's, measured in turns (memwatch, then the peer,
// 30 times: a busy moment of the machine costs both) and given as the
// medians. Process start differs several times between machines of one
// kind, so it is given first.

// pairedRuns is the median wall time of a and b, run in turns n times
// (their output to a file: GNU grep stops at its first hit on /dev/null).
func pairedRuns(n int, out string, env []string, a, b []string) (time.Duration, time.Duration) {
	return pairedRunsIn("", n, out, env, a, b)
}

// pairedRunsIn is pairedRuns with the commands run in dir.
func pairedRunsIn(dir string, n int, out string, env []string, a, b []string) (time.Duration, time.Duration) {
	timeOne := func(argv []string) time.Duration {
		o, err := os.Create(out)
		if err != nil {
			fail(err)
		}
		defer o.Close()
		cmd := exec.Command(argv[0], argv[1:]...)
		cmd.Stdout, cmd.Stderr = o, io.Discard
		cmd.Env = append(os.Environ(), env...)
		cmd.Dir = dir
		t0 := time.Now()
		if err := cmd.Run(); err != nil && cmd.ProcessState.ExitCode() > 1 {
			fail(fmt.Errorf("%v: %w", argv, err))
		}
		return time.Since(t0)
	}
	for range 3 { // warm: the page cache, the daemon's first answer
		timeOne(a)
		timeOne(b)
	}
	var as, bs []time.Duration
	for range n {
		as = append(as, timeOne(a))
		bs = append(bs, timeOne(b))
	}
	median := func(d []time.Duration) time.Duration { slices.Sort(d); return d[len(d)/2] }
	return median(as), median(bs)
}

func ms(d time.Duration) string { return fmt.Sprintf("%.1f ms", float64(d.Microseconds())/1000) }

// startDaemon runs memwatch on a policy, announcing itself under run (the
// client finds it there by the policy), and waits for its catch-up.
func startDaemon(bin, pol, state, run string) (stop func()) {
	cmd := dieWithUs(exec.Command(bin, "run", "--policy", pol, "--state-dir", state, "--log-format", "json"))
	cmd.Env = append(os.Environ(), "XDG_RUNTIME_DIR="+run)
	stderr, _ := cmd.StderrPipe()
	if err := cmd.Start(); err != nil {
		fail(err)
	}
	done := make(chan bool, 1)
	go func() {
		sc := bufio.NewScanner(stderr)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			var m map[string]any
			if json.Unmarshal(sc.Bytes(), &m) == nil && strings.HasPrefix(fmt.Sprint(m["msg"]), "caught up") {
				select {
				case done <- true:
				default:
				}
			}
		}
		close(done)
	}()
	if !<-done {
		fail(fmt.Errorf("memwatch on %s stopped before its catch-up", pol))
	}
	return func() { cmd.Process.Kill(); cmd.Wait() }
}

// clientBench: memwatch version against rg --version, and a one-file
// root's search against rg -i on it, with the daemon running.
func clientBench(bin, dir string) []row {
	_, err := exec.LookPath("rg")
	if err != nil {
		return []row{{"client: rg is not installed (apt-get install ripgrep): not measured", "", "", ""}}
	}
	out := filepath.Join(dir, "client-out")
	a, b := pairedRuns(30, out, nil, []string{bin, "version"}, []string{"rg", "--version"})
	rows := []row{{"client, with the daemon running (medians of 30, in turns)", "", "", ""},
		{"  process start: memwatch version vs rg --version", fmt.Sprintf("%s vs %s (%.2fx)", ms(a), ms(b), a.Seconds()/b.Seconds()), "<= 1.5x", verdict(a.Seconds() <= 1.5*b.Seconds())}}

	root := filepath.Join(dir, "client", "notes")
	os.MkdirAll(root, 0o755)
	var note strings.Builder
	words := strings.Fields("the build failed because the migration used an old schema so we rolled back and retried the deploy")
	for i := range 200 {
		for j := range 12 {
			note.WriteString(words[(i*7+j*3)%len(words)] + " ")
		}
		if i == 150 {
			note.WriteString("zanzibar")
		}
		note.WriteString("\n")
	}
	os.WriteFile(filepath.Join(root, "MEMORY.md"), []byte(note.String()), 0o644)
	pol := filepath.Join(dir, "client", "policy.yaml")
	os.WriteFile(pol, []byte(fmt.Sprintf("version: 1\nstores:\n  - name: notes\n    layout: memory-history\n    paths: [%q]\n    memory_max_size: 1MiB\n", root)), 0o644)
	run := filepath.Join(dir, "client", "run")
	os.MkdirAll(run, 0o700)
	stop := startDaemon(bin, pol, filepath.Join(dir, "client", "state"), run)
	defer stop()
	env := []string{"MEMWATCH_POLICY=" + pol, "XDG_RUNTIME_DIR=" + run}
	a, b = pairedRuns(30, out, env, []string{bin, "recall", "--dir", root, "--limit", "1", "zanzibar"}, []string{"rg", "-i", "zanzibar", root})
	rows = append(rows, row{"  a one-file root: recall --limit 1 WORD vs rg -i WORD", fmt.Sprintf("%s vs %s (%.2fx)", ms(a), ms(b), a.Seconds()/b.Seconds()), "<= 1x", verdict(a <= b)})
	return rows
}

// daemonRecallBench times recall on the recall tree through a running
// daemon, its index built by its catch-up, against rg.
func daemonRecallBench(bin, dir, sess string, queries []struct{ name, word string }, question string) []row {
	if _, err := exec.LookPath("rg"); err != nil {
		return nil
	}
	fmt.Fprintf(os.Stderr, "starting the daemon on the tree; its catch-up indexes it...\n")
	pol := filepath.Join(dir, "recall-daemon-policy.yaml")
	os.WriteFile(pol, []byte(fmt.Sprintf("version: 1\nstores:\n  - name: s\n    layout: session-detail\n    paths: [%q]\n    summary_every: 100000000\n    session_idle: 9999h\n", sess)), 0o644)
	run := filepath.Join(dir, "recall-daemon-run")
	os.MkdirAll(run, 0o700)
	state := filepath.Join(dir, "recall-daemon-state")
	t0 := time.Now()
	stop := startDaemon(bin, pol, state, run)
	defer stop()
	defer os.RemoveAll(state)
	rows := []row{{"  through the running daemon (its catch-up indexed the tree in " + time.Since(t0).Round(time.Second).String() + "), medians of 30", "", "", ""}}
	env := []string{"MEMWATCH_POLICY=" + pol, "XDG_RUNTIME_DIR=" + run}
	out := filepath.Join(dir, "recall-out")
	for _, q := range queries {
		a, b := pairedRuns(30, out, env, []string{bin, "recall", "--dir", sess, "--limit", "10", q.word}, []string{"rg", "-in", q.word, sess})
		rows = append(rows, row{"  " + q.name + ": recall --limit 10 vs rg -in", fmt.Sprintf("%s vs %s (%.1fx)", ms(a), ms(b), b.Seconds()/a.Seconds()), ">= 5x", verdict(5*a <= b)})
	}
	if question != "" {
		a, b := pairedRuns(30, out, env, []string{bin, "recall", "--dir", sess, "--limit", "10", question}, []string{"rg", "-in", "zanzibar-quokka", sess})
		rows = append(rows, row{"  the question, ranked, vs rg -in zanzibar-quokka", fmt.Sprintf("%s vs %s (%.1fx)", ms(a), ms(b), b.Seconds()/a.Seconds()), ">= 2x", verdict(2*a <= b)})
	}
	return rows
}
