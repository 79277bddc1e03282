package main

import (
	"bufio"
	"database/sql"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"time"

	_ "modernc.org/sqlite"
)

// fleetBench is issue #49's measure of a central node: hosts hosts of
// mib MiB of session each replicate to a real S3 server (versitygw); a
// central node with only fleet: in its policy catches up from an empty
// state; then the lag of a new line on a host, the central node's RSS and
// idle CPU, and a question's latency over every host beside the same
// question on the one host that holds its answer.
func fleetBench(bin, dir string, hosts, mib int) []row {
	addr, stop := startS3(dir, "fleet")
	defer stop()
	s3 := fmt.Sprintf("  endpoint: http://%s\n  access_key_env: BENCH_S3_KEY\n  secret_key_env: BENCH_S3_SECRET\n  force_path_style: true\n", addr)
	env := append(os.Environ(), "BENCH_S3_KEY=bench", "BENCH_S3_SECRET=bench-secret-0123456789")

	type host struct {
		name, dir, pol, state, log string
	}
	var hs []*host
	startHost := func(h *host) *exec.Cmd {
		cmd := dieWithUs(exec.Command(bin, "run", "--policy", h.pol, "--state-dir", h.state, "--log-format", "json"))
		cmd.Env = env
		if err := cmd.Start(); err != nil {
			fail(err)
		}
		return cmd
	}
	status := func(pol, state string) (st struct {
		Replica *struct {
			Pending  bool      `json:"pending_changes"`
			LastSync time.Time `json:"last_sync"`
		} `json:"replica"`
		Fleet []struct {
			Host       string  `json:"host"`
			Bytes      int64   `json:"bytes"`
			Lag        float64 `json:"lag_seconds"`
			Error      string  `json:"error"`
			Databases  []string
			LastChange time.Time `json:"last_change"`
			Copied     time.Time `json:"copied"`
		} `json:"fleet"`
	}) {
		cmd := exec.Command(bin, "status", "--policy", pol, "--state-dir", state, "--json")
		cmd.Env = env
		out, err := cmd.Output()
		if err == nil {
			json.Unmarshal(out, &st)
		}
		return st
	}
	fmt.Fprintf(os.Stderr, "fleet: %d hosts of %d MiB each, replicated one after the other...\n", hosts, mib)
	t0 := time.Now()
	for i := range hosts {
		h := &host{name: fmt.Sprintf("host-%02d", i), dir: filepath.Join(dir, "fleet", fmt.Sprintf("host-%02d", i))}
		talk := filepath.Join(h.dir, "talk")
		os.MkdirAll(filepath.Join(talk, "sessions"), 0o755)
		h.log = filepath.Join(talk, "sessions", "s.jsonl")
		fleetCorpus(h.log, i, mib)
		h.pol = filepath.Join(h.dir, "policy.yaml")
		h.state = filepath.Join(h.dir, "state")
		os.WriteFile(h.pol, []byte(fmt.Sprintf("version: 1\nreplicate:\n  url: s3://bench/fleet/%s\n%sstores:\n  - name: talk\n    layout: memory-history\n    paths: [%q]\n    sessions: sessions/*.jsonl\n    consolidate: false\n", h.name, s3, talk)), 0o644)
		cmd := startHost(h)
		logSize := fileSize(h.log)
		var captured time.Time // when the spool first held the whole log
		for deadline := time.Now().Add(5 * time.Minute); ; time.Sleep(500 * time.Millisecond) {
			if captured.IsZero() && spoolOffset(h.state) >= logSize {
				captured = time.Now()
			}
			// Replicated: a round of the replica that began after the
			// whole log was in the spool found nothing to send.
			st := status(h.pol, h.state)
			if !captured.IsZero() && st.Replica != nil && !st.Replica.Pending && st.Replica.LastSync.After(captured) {
				break
			}
			if time.Now().After(deadline) {
				fail(fmt.Errorf("fleet: %s did not replicate within 5 min", h.name))
			}
		}
		cmd.Process.Signal(syscall.SIGTERM)
		cmd.Wait()
		hs = append(hs, h)
	}
	fmt.Fprintf(os.Stderr, "fleet: the hosts replicated in %v; the central node catches up...\n", time.Since(t0).Round(time.Second))

	central := filepath.Join(dir, "fleet", "central")
	os.MkdirAll(central, 0o755)
	cpol := filepath.Join(central, "policy.yaml")
	os.WriteFile(cpol, []byte("version: 1\nfleet:\n  url: s3://bench/fleet\n"+s3), 0o644)
	cstate := filepath.Join(central, "state")
	c := dieWithUs(exec.Command(bin, "run", "--policy", cpol, "--state-dir", cstate, "--log-format", "json"))
	c.Env = env
	t1 := time.Now()
	if err := c.Start(); err != nil {
		fail(err)
	}
	defer func() { c.Process.Signal(syscall.SIGTERM); c.Wait() }()
	for deadline := time.Now().Add(20 * time.Minute); ; time.Sleep(500 * time.Millisecond) {
		st := status(cpol, cstate)
		done := 0
		for _, f := range st.Fleet {
			// Restored, up to date with the bucket, and its searchable
			// copy made since its last change.
			if f.Lag == 0 && len(f.Databases) == 3 && f.Error == "" && !f.Copied.IsZero() && !f.Copied.Before(f.LastChange) {
				done++
			}
		}
		if done == hosts {
			break
		}
		if time.Now().After(deadline) {
			fail(fmt.Errorf("fleet: the central node did not catch up within 20 min (%d of %d hosts)", done, hosts))
		}
	}
	catchUp := time.Since(t1)
	fmt.Fprintf(os.Stderr, "fleet: caught up in %v; a new line's lag...\n", catchUp.Round(time.Second))

	// The lag of a new line: host 0 runs again and writes; the central
	// node's recall finds it.
	h0 := hs[0]
	run0 := startHost(h0)
	defer func() { run0.Process.Signal(syscall.SIGTERM); run0.Wait() }()
	recall := func(args ...string) (time.Duration, int) {
		cmd := exec.Command(bin, append([]string{"recall", "--limit", "10", "--json"}, args...)...)
		cmd.Env = env
		t := time.Now()
		out, err := cmd.Output()
		d := time.Since(t)
		var res []json.RawMessage
		if ee, ok := err.(*exec.ExitError); ok && ee.ExitCode() == 1 {
			return d, 0 // found nothing, as grep says it
		}
		if err != nil || json.Unmarshal(out, &res) != nil {
			fail(fmt.Errorf("fleet: recall %v: %v\n%s", args, err, out))
		}
		return d, len(res)
	}
	// The lag is from the write on the host until recall --all on the
	// central node finds it (the bucket, the restore, the copy and its
	// index on the way).
	lagOf := func(word string) time.Duration {
		f, _ := os.OpenFile(h0.log, os.O_WRONLY|os.O_APPEND, 0)
		fmt.Fprintf(f, `{"role":"user","content":"a new line naming the %s"}`+"\n", word)
		f.Close()
		tw := time.Now()
		for {
			if _, n := recall("--policy", cpol, "--state-dir", cstate, "--all", word); n > 0 {
				return time.Since(tw)
			}
			if time.Since(tw) > 2*time.Minute {
				fail(fmt.Errorf("fleet: %s not found at the central node within 2 min", word))
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	var lags []time.Duration
	for k := range 5 {
		lags = append(lags, lagOf(fmt.Sprintf("ptarmigan%d", k)))
	}
	sort.Slice(lags, func(i, j int) bool { return lags[i] < lags[j] })
	rare, n := recall("--policy", cpol, "--state-dir", cstate, "--all", "ptarmigan4")
	if n == 0 {
		fail(fmt.Errorf("fleet: recall --all does not find the new line"))
	}

	fmt.Fprintf(os.Stderr, "fleet: the central node idle, then a question...\n")
	time.Sleep(5 * time.Second)
	i0 := cpuSeconds(c.Process.Pid)
	time.Sleep(60 * time.Second)
	idle := (cpuSeconds(c.Process.Pid) - i0) / 60
	rss := peakRSSMiB(c.Process.Pid)
	// A quiet host (no change for over a minute) is asked half as often:
	// its next line's lag.
	quietLag := lagOf("ptarmigan-quiet")

	q := fmt.Sprintf("what did we decide about the kestrel-h%02d rollout?", 7%hosts)
	best := func(args ...string) time.Duration {
		b := time.Duration(1 << 62)
		for k := 0; k < 3 && b > 5*time.Second; k++ { // a slow one once
			if d, _ := recall(args...); d < b {
				b = d
			}
		}
		return b
	}
	all := best("--policy", cpol, "--state-dir", cstate, "--all", q)
	hq := hs[7%hosts]
	// Right, not only fast: the question's answer is the host's own line.
	cmd := exec.Command(bin, "recall", "--json", "--policy", cpol, "--state-dir", cstate, "--all", q)
	cmd.Env = env
	out, _ := cmd.Output()
	var top []struct {
		Host, Text string
	}
	if json.Unmarshal(out, &top) != nil || len(top) == 0 || top[0].Host != hq.name || !strings.Contains(top[0].Text, fmt.Sprintf("kestrel-h%02d", 7%hosts)) {
		fail(fmt.Errorf("fleet: the question over every host does not find its answer on %s first: %s", hq.name, out))
	}
	one := best("--policy", hq.pol, "--state-dir", hq.state, "--dir", filepath.Join(hq.dir, "talk"), q)
	restored, copied := dirBytes(filepath.Join(cstate, "fleet"))
	title := fmt.Sprintf("fleet: %d hosts of %d MiB of session each, replicated to S3 (versitygw); a central node with only fleet:", hosts, mib)
	return []row{
		{title, "", "", ""},
		{"  central catch-up from an empty state (every host restored, copied and indexed)", catchUp.Round(100 * time.Millisecond).String(), "", ""},
		{"  a new line on a host found by recall --all on the central node, p50 / max of 5", fmt.Sprintf("%v / %v", lags[2].Round(10*time.Millisecond), lags[4].Round(10*time.Millisecond)), "<= 20 s", verdict(lags[4] <= 20*time.Second)},
		{"  a rare word over every host (recall --all)", rare.Round(time.Millisecond).String(), "", ""},
		{"  central node: peak RSS; CPU idle over 60 s", fmt.Sprintf("%.0f MiB; %.2f%% of a core", rss, 100*idle), "", ""},
		{"  then a new line on that host, quiet for a minute, found by recall --all", quietLag.Round(10 * time.Millisecond).String(), "<= 20 s", verdict(quietLag <= 20*time.Second)},
		{"  central node's disk: the hosts' restored databases; their copies and index", fmt.Sprintf("%.0f MiB; %.0f MiB", float64(restored)/(1<<20), float64(copied)/(1<<20)), "", ""},
		{"  a question over every host (recall --all) vs the same on its one host (its own index)", fmt.Sprintf("%v vs %v", all.Round(time.Millisecond), one.Round(time.Millisecond)), "", ""},
	}
}

// fleetCorpus writes mib MiB of a host's session: ~250-byte messages of
// common words, the host's own rare word (kestrel-hNN) on three of them.
func fleetCorpus(path string, host, mib int) {
	vocab := strings.Fields("we the deploy staging cluster migration review test build release branch merge ticket owner notes plan rollout canary metric alert budget schedule agent memory file session line history fact")
	r := rand.New(rand.NewPCG(uint64(host), 7))
	f, err := os.Create(path)
	if err != nil {
		fail(err)
	}
	w := bufio.NewWriterSize(f, 1<<20)
	total := int64(mib) << 20
	est := int(total / 250)
	var n int64
	for i := 0; n < total; i++ {
		var b strings.Builder
		for k := range 36 {
			if k > 0 {
				b.WriteByte(' ')
			}
			b.WriteString(vocab[r.IntN(len(vocab))])
		}
		if i == est/4 || i == est/2 || i == 3*est/4 {
			fmt.Fprintf(&b, " we decided the kestrel-h%02d rollout waits for the canary", host)
		}
		line := fmt.Sprintf(`{"role":%q,"content":%q}`+"\n", []string{"user", "assistant"}[i%2], b.String())
		w.WriteString(line)
		n += int64(len(line))
	}
	w.Flush()
	f.Close()
}

// spoolOffset is how much of its logs a state directory's spool has
// captured (its size says nothing: the spool is compressed).
func spoolOffset(state string) int64 {
	db, err := sql.Open("sqlite", "file:"+filepath.Join(state, "spool.db")+"?mode=ro&_pragma=busy_timeout(5000)")
	if err != nil {
		return 0
	}
	defer db.Close()
	var n int64
	if db.QueryRow(`SELECT COALESCE(SUM(offset), 0) FROM logs`).Scan(&n) != nil {
		return 0
	}
	return n
}

func fileSize(path string) int64 {
	fi, err := os.Stat(path)
	if err != nil {
		fail(err)
	}
	return fi.Size()
}

// dirBytes sums what a central node keeps of its hosts: the restored
// databases, and the copies (with their index).
func dirBytes(fleet string) (restored, copied int64) {
	filepath.WalkDir(fleet, func(p string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return nil
		}
		fi, err := d.Info()
		if err != nil {
			return nil
		}
		if strings.Contains(p, string(filepath.Separator)+"copy"+string(filepath.Separator)) {
			copied += fi.Size()
		} else {
			restored += fi.Size()
		}
		return nil
	})
	return restored, copied
}
