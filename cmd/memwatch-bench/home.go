package main

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"math"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// The shape of a real home (issue #66): thousands of ordinary Claude Code
// sessions of tens to hundreds of KiB, their bytes mostly tool results
// read from real text (the Go module cache's and Go's own source files,
// /usr/share/doc), with the policy `memwatch init` writes, beside the
// peers a user would compare it with: SQLite FTS5 over the same messages'
// text (what most memory tools keep), `zstd -3` of the logs, `rg -in`.

// homeWord is planted in homeWordSessions sessions, nowhere else.
const (
	homeWord         = "quokkaflux"
	homeWordSessions = 10
	homeQuestion     = "what did we decide about the quokkaflux deploy timeout?"
)

var homeVocabulary = strings.Fields(`the a to of and in is it that for on with
this be we not can should what why how fix add test build deploy config
error bug review merge branch retry timeout cache index parse handler
server client request response file path line read write update remove
rename refactor function method type struct field value list map loop
check log debug trace panic nil return import package module version
release migrate schema table query row column token session user agent
memory layout rule job watcher spool daemon policy store root limit`)

// homeSources lists the text files the sessions' tool results are read
// from, in a fixed order.
func homeSources() []string {
	var srcs []string
	add := func(root string, keep func(string) bool) {
		filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
			if err == nil && !d.IsDir() && d.Type().IsRegular() && keep(p) {
				srcs = append(srcs, p)
			}
			return nil
		})
	}
	goEnv := func(k string) string {
		out, _ := exec.Command("go", "env", k).Output()
		return strings.TrimSpace(string(out))
	}
	code := func(p string) bool {
		return strings.HasSuffix(p, ".go") || strings.HasSuffix(p, ".md") || strings.HasSuffix(p, ".txt")
	}
	if m := goEnv("GOMODCACHE"); m != "" {
		add(m, code)
	}
	if r := goEnv("GOROOT"); r != "" {
		add(filepath.Join(r, "src"), code)
	}
	add("/usr/share/doc", func(string) bool { return true })
	return srcs
}

// readSource is a source file's text (a .gz one unpacked), at most 24 KiB
// of it (Claude Code's Read returns the first 2,000 lines, most files
// are smaller), numbered as Claude Code numbers a Read's lines.
func readSource(p string) string {
	f, err := os.Open(p)
	if err != nil {
		return ""
	}
	defer f.Close()
	var r io.Reader = f
	if strings.HasSuffix(p, ".gz") {
		z, err := gzip.NewReader(f)
		if err != nil {
			return ""
		}
		r = z
	}
	b, _ := io.ReadAll(io.LimitReader(r, 24<<10))
	if bytes.IndexByte(b, 0) >= 0 {
		return ""
	}
	var sb strings.Builder
	for i, l := range strings.Split(strings.TrimRight(string(b), "\n"), "\n") {
		fmt.Fprintf(&sb, "%6d\u2192%s\n", i+1, l)
	}
	return sb.String()
}

// genHome writes sessions Claude Code sessions of about mib MiB in all
// under home/.claude/projects (40 projects) and returns the log bytes and
// the sessions that hold homeWord.
func genHome(home string, mib, sessions int) (int64, []string) {
	srcs := homeSources()
	if len(srcs) == 0 {
		fail(fmt.Errorf("no source text to read the tool results from"))
	}
	rng := rand.New(rand.NewPCG(66, 1))
	rng.Shuffle(len(srcs), func(i, j int) { srcs[i], srcs[j] = srcs[j], srcs[i] })
	mean := float64(int64(mib)<<20) / float64(sessions)
	planted := map[int]bool{}
	for len(planted) < homeWordSessions {
		planted[rng.IntN(sessions)] = true
	}
	words := func(n int) string {
		w := make([]string, n)
		for i := range w {
			w[i] = homeVocabulary[rng.IntN(len(homeVocabulary))]
		}
		return strings.Join(w, " ")
	}
	var total int64
	var holding []string
	s := 0
	t0 := time.Date(2026, 9, 1, 9, 0, 0, 0, time.UTC)
	for i := range sessions {
		proj := fmt.Sprintf("-home-u-src-proj%02d", i%40)
		dir := filepath.Join(home, ".claude", "projects", proj)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			fail(err)
		}
		id := fmt.Sprintf("%08x-%04x-4%03x-8%03x-%012x", rng.Uint32(), rng.IntN(1<<16), rng.IntN(1<<12), rng.IntN(1<<12), rng.Uint64()&(1<<48-1))
		path := filepath.Join(dir, id+".jsonl")
		f, err := os.Create(path)
		if err != nil {
			fail(err)
		}
		w := bufio.NewWriterSize(f, 1<<16)
		// Sizes spread as real sessions' are: most small, a few large.
		size := int64(min(max(mean*math.Exp(rng.NormFloat64()*0.9-0.405), 4<<10), 4<<20))
		now := t0.Add(time.Duration(i) * 37 * time.Minute)
		parent := ""
		n := int64(0)
		// As Claude Code (JavaScript's JSON.stringify) writes its lines:
		// "<", ">" and "&" as they are, not \u003c.
		var line bytes.Buffer
		enc := json.NewEncoder(&line)
		enc.SetEscapeHTML(false)
		emit := func(typ string, msg any) {
			uuid := fmt.Sprintf("%08x-%04x-4000-8000-%012x", rng.Uint32(), rng.IntN(1<<16), rng.Uint64()&(1<<48-1))
			var par any
			if parent != "" {
				par = parent
			}
			now = now.Add(time.Duration(1+rng.IntN(20)) * time.Second)
			line.Reset()
			enc.Encode(map[string]any{
				"parentUuid": par, "isSidechain": false, "userType": "external",
				"cwd": "/home/u/src/" + proj[len("-home-u-src-"):], "sessionId": id, "version": "2.0.14",
				"gitBranch": "main", "type": typ, "message": msg, "uuid": uuid,
				"timestamp": now.Format(time.RFC3339Nano),
			})
			w.Write(line.Bytes())
			n += int64(line.Len())
			parent = uuid
		}
		turn := 0
		for n < size {
			prompt := words(8 + rng.IntN(20))
			reply := words(15 + rng.IntN(40))
			if planted[i] && turn == 0 { // the first prompt: every session has one
				prompt = "the " + homeWord + " deploy keeps hitting the timeout, we decided to raise it to 90s and retry twice; " + prompt
			}
			emit("user", map[string]any{"role": "user", "content": prompt})
			for k := 0; k < 1+rng.IntN(4) && n < size; k++ {
				src := srcs[s%len(srcs)]
				s++
				text := readSource(src)
				if text == "" {
					continue
				}
				tid := fmt.Sprintf("toolu_%016x", rng.Uint64())
				emit("assistant", map[string]any{"role": "assistant", "model": "claude-sonnet-4-5", "content": []any{
					map[string]any{"type": "text", "text": words(5 + rng.IntN(15))},
					map[string]any{"type": "tool_use", "id": tid, "name": "Read", "input": map[string]any{"file_path": src}},
				}})
				emit("user", map[string]any{"role": "user", "content": []any{
					map[string]any{"type": "tool_result", "tool_use_id": tid, "content": text},
				}})
			}
			emit("assistant", map[string]any{"role": "assistant", "model": "claude-sonnet-4-5", "content": []any{map[string]any{"type": "text", "text": reply}}})
			turn++
		}
		if err := w.Flush(); err != nil {
			fail(err)
		}
		f.Close()
		total += n
		if planted[i] {
			holding = append(holding, path)
		}
	}
	return total, holding
}

// ftsScript indexes the messages' text of every session under argv[1]
// into an FTS5 table at argv[2] (one row a message, one transaction) and
// prints its CPU seconds.
const ftsScript = `
import json, os, sqlite3, sys, resource
db = sqlite3.connect(sys.argv[2])
db.execute("create virtual table m using fts5(session unindexed, line unindexed, text)")
def text(c):
    if isinstance(c, str): return c
    out = []
    if isinstance(c, list):
        for b in c:
            if isinstance(b, dict):
                for k in ("text", "content"):
                    if k in b: out.append(text(b[k]))
                if "input" in b: out.append(json.dumps(b["input"]))
    return "\n".join(out)
with db:
    for d, _, fs in os.walk(sys.argv[1]):
        for f in fs:
            if not f.endswith(".jsonl"): continue
            p = os.path.join(d, f)
            with open(p, encoding="utf-8", errors="replace") as fh:
                for i, l in enumerate(fh, 1):
                    try: m = json.loads(l)
                    except ValueError: continue
                    t = text((m.get("message") or {}).get("content"))
                    if t: db.execute("insert into m values (?, ?, ?)", (p, i, t))
db.close()
r = resource.getrusage(resource.RUSAGE_SELF)
print(r.ru_utime + r.ru_stime)
`

// catchUp starts the daemon d from a cold start and reads its log until
// it says it caught up: its CPU then (user+sys, and sys), its peak RSS,
// how long it took, and the rest of its log (0 CPU: it never said so).
func catchUp(d *exec.Cmd) (cpu, sys, peak float64, took time.Duration, sc *bufio.Scanner) {
	fmt.Fprintf(os.Stderr, "home: the daemon's catch-up from a cold start...\n")
	syscall.Sync()
	stderr, _ := d.StderrPipe()
	if err := d.Start(); err != nil {
		fail(err)
	}
	t0 := time.Now()
	sc = bufio.NewScanner(stderr)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		peak = max(peak, peakRSSMiB(d.Process.Pid))
		var m map[string]any
		if json.Unmarshal(sc.Bytes(), &m) != nil {
			continue
		}
		if strings.HasPrefix(fmt.Sprint(m["msg"]), "caught up") {
			took = time.Since(t0)
			user, s := cpuSplit(d.Process.Pid)
			return user + s, s, max(peak, peakRSSMiB(d.Process.Pid)), took, sc
		}
	}
	return 0, 0, peak, 0, sc
}

// runsOf lists a measure's runs: "9.3 and 9.9 s".
func runsOf(runs []float64) string {
	var parts []string
	for _, r := range runs {
		parts = append(parts, fmt.Sprintf("%.1f", r))
	}
	return strings.Join(parts, " and ") + " s"
}

func homeBench(bin, dir string, mib, sessions int) []row {
	home := filepath.Join(dir, "home")
	bin, _ = filepath.Abs(bin) // run from the home
	fmt.Fprintf(os.Stderr, "home: generating %d sessions, about %d MiB...\n", sessions, mib)
	logBytes, holding := genHome(home, mib, sessions)
	projects := filepath.Join(home, ".claude", "projects")
	title := fmt.Sprintf("a home of %d Claude Code sessions in 40 projects, %d MiB of logs (tool results read from Go's and the module cache's source, /usr/share/doc)", sessions, logBytes>>20)
	rows := []row{{title, "", "", ""}}

	env := []string{
		"HOME=" + home,
		"XDG_CONFIG_HOME=" + filepath.Join(home, ".config"),
		"XDG_STATE_HOME=" + filepath.Join(home, ".local", "state"),
		"XDG_RUNTIME_DIR=" + filepath.Join(dir, "home-run"),
		"MEMWATCH_POLICY=" + filepath.Join(home, ".config", "memwatch", "policy.yaml"),
		// As root the state's default is the machine's (/var/lib/memwatch).
		"MEMWATCH_STATE_DIR=" + filepath.Join(home, ".local", "state", "memwatch"),
	}
	os.MkdirAll(filepath.Join(dir, "home-run"), 0o700)
	command := func(args ...string) *exec.Cmd {
		c := exec.Command(bin, args...)
		c.Dir, c.Env = home, append(os.Environ(), env...)
		return c
	}
	if out, err := command("init", "--home", home, "--write").CombinedOutput(); err != nil {
		fail(fmt.Errorf("memwatch init --write: %v: %s", err, out))
	}
	state := filepath.Join(home, ".local", "state", "memwatch")
	written := map[string]bool{}
	filepath.WalkDir(projects, func(p string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			written[p] = true
		}
		return nil
	})

	// The peers first, on a page cache as warm as memwatch's. Each
	// measured run starts with nothing of the one before left to write
	// back (the home just generated, the peer's database): the kernel's
	// writeback of another program's files is no one's catch-up.
	exec.Command("sh", "-c", "cat "+filepath.Join(projects, "*", "*.jsonl")+" > /dev/null").Run()
	// Each side twice, in turns (FTS5, memwatch, FTS5, memwatch), the
	// better run of each compared: the kernel's share of either swings by
	// a second from run to run on this kind of machine (free page
	// reporting, an ext4 without a journal skipping inodes freed in the
	// last 30 s), and one run each made the ratio a coin to flip.
	fts := func() (float64, int64) {
		if _, err := exec.LookPath("python3"); err != nil {
			return 0, 0
		}
		fmt.Fprintf(os.Stderr, "home: SQLite FTS5 over the same messages...\n")
		db := filepath.Join(dir, "home-fts.db")
		defer os.Remove(db)
		syscall.Sync()
		out, err := exec.Command("python3", "-c", ftsScript, projects, db).Output()
		if err != nil {
			return 0, 0
		}
		cpu, _ := strconv.ParseFloat(strings.TrimSpace(string(out)), 64)
		var size int64
		if fi, err := os.Stat(db); err == nil {
			size = fi.Size()
		}
		return cpu, size
	}
	ftsCPU, ftsSize := fts()
	ftsRuns := []float64{ftsCPU}
	// memwatch's first run, in a state directory of its own, outside the
	// home: its catch-up's CPU only.
	first := dieWithUs(command("run", "--log-format", "json"))
	first.Env = append(first.Env, "MEMWATCH_STATE_DIR="+filepath.Join(dir, "home-state-first"))
	firstCPU, firstSys, firstPeak, firstTook, _ := catchUp(first)
	first.Process.Kill()
	first.Wait()
	if c, _ := fts(); c > 0 {
		ftsRuns = append(ftsRuns, c)
		ftsCPU = min(ftsCPU, c)
	}
	var zstdSize int64
	if _, err := exec.LookPath("zstd"); err == nil {
		out, err := exec.Command("sh", "-c", "tar -cf - -C "+home+" .claude | zstd -3 -q -c | wc -c").Output()
		if err == nil {
			zstdSize, _ = strconv.ParseInt(strings.TrimSpace(string(out)), 10, 64)
		}
	}

	daemon := dieWithUs(command("run", "--log-format", "json"))
	catchCPU, catchSys, peak, took, sc := catchUp(daemon)
	defer func() { daemon.Process.Kill(); daemon.Wait() }()
	if catchCPU == 0 {
		return append(rows, row{"home: catch-up", "no figure: the daemon never said it caught up", "", "FAIL"})
	}
	catchRuns := []float64{catchCPU}
	bestCPU, bestSys := catchCPU, catchSys
	if firstCPU > 0 {
		catchRuns = append([]float64{firstCPU}, catchRuns...)
		peak = max(peak, firstPeak)
		if firstCPU < catchCPU {
			bestCPU, bestSys, took = firstCPU, firstSys, firstTook
		}
	}
	// The count of credentials runs right after the catch-up (status
	// shows it); the searches are timed once the daemon is idle, as a
	// person searching a home caught up meets it.
	counted := make(chan float64, 1)
	go func() {
		defer func() {
			for sc.Scan() { // the rest of its log, unread
			}
		}()
		for sc.Scan() {
			var m map[string]any
			if json.Unmarshal(sc.Bytes(), &m) == nil && m["msg"] == countedMsg {
				counted <- cpuSeconds(daemon.Process.Pid) - catchCPU
				return
			}
		}
	}()
	countCPU := -1.0
	select {
	case countCPU = <-counted:
	case <-time.After(2 * time.Minute): // a daemon that counts none
	}
	stateSize := dirSize(state)
	var beside int64
	filepath.WalkDir(home, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || written[p] || strings.HasPrefix(p, state) || strings.HasPrefix(p, filepath.Join(home, ".config")) {
			return nil
		}
		if fi, err := d.Info(); err == nil {
			beside += fi.Size()
		}
		return nil
	})
	ratio := float64(stateSize+beside) / float64(logBytes)
	rows = append(rows,
		row{"  catch-up from a cold start (start to caught up), CPU", fmt.Sprintf("%.1f s (%.1f in the kernel; %.1f s wall), the better of %s", bestCPU, bestSys, took.Seconds(), runsOf(catchRuns)), "", ""})
	if countCPU >= 0 {
		rows = append(rows, row{"  then the count of credentials, CPU", fmt.Sprintf("%.1f s", countCPU), "", ""})
	}
	if ftsCPU > 0 {
		rows = append(rows, row{"  same, vs SQLite FTS5 indexing the messages' text (python3)", fmt.Sprintf("%.1f s, the better of %s: %.2fx FTS5", ftsCPU, runsOf(ftsRuns), bestCPU/ftsCPU), "<= 1x", verdict(bestCPU <= ftsCPU)})
	}
	rows = append(rows,
		row{"  peak RSS through the catch-up", fmt.Sprintf("%.0f MiB", peak), "<= 300 MiB", verdict(peak <= 300)},
		row{"  state (and anything beside the logs) / the logs", fmt.Sprintf("%.2fx (%.0f MiB)", ratio, float64(stateSize+beside)/(1<<20)), "<= 0.5x", verdict(ratio <= 0.5)})
	if zstdSize > 0 {
		rows = append(rows, row{"  same, zstd -3 of the logs", fmt.Sprintf("%.2fx", float64(zstdSize)/float64(logBytes)), "", ""})
	}
	if ftsSize > 0 {
		rows = append(rows, row{"  same, the FTS5 database", fmt.Sprintf("%.2fx", float64(ftsSize)/float64(logBytes)), "", ""})
	}

	// Searches from the home, as a person types them.
	var res []struct{ Citation string }
	out, _ := command("recall", "--all", "--limit", "10", "--json", homeWord).Output()
	json.Unmarshal(out, &res)
	found := map[string]bool{}
	for _, r := range res {
		found[strings.SplitN(r.Citation, "#", 2)[0]] = true
	}
	missing := 0
	for _, h := range holding {
		if !found[h] {
			missing++
		}
	}
	exp := command("recall", "--all", "--limit", "10", "--explain", homeWord)
	var errb bytes.Buffer
	exp.Stdout, exp.Stderr = io.Discard, &errb
	exp.Run()
	explain := ""
	for _, l := range strings.Split(errb.String(), "\n") {
		if strings.Contains(l, "answered by") {
			explain = strings.TrimPrefix(l, "recall: ")
		}
	}
	rows = append(rows, row{"  " + homeWord + " (in 10 sessions): sessions found by recall --all --limit 10", fmt.Sprintf("%d of %d", len(holding)-missing, len(holding)), "all", verdict(missing == 0)},
		row{"  --explain: " + explain, "", "", ""})
	if _, err := exec.LookPath("rg"); err != nil {
		return append(rows, row{"  rg is not installed: no search figures (apt-get install ripgrep)", "", "", ""})
	}
	fmt.Fprintf(os.Stderr, "home: timing searches...\n")
	out2 := filepath.Join(dir, "home-out")
	rg := []string{"rg", "-in", homeWord, projects}
	mw, peer := pairedRunsIn(home, 30, out2, env, []string{bin, "recall", "--all", "--limit", "10", homeWord}, rg)
	q, peer2 := pairedRunsIn(home, 30, out2, env, []string{bin, "recall", "--all", "--limit", "10", homeQuestion}, rg)
	rows = append(rows,
		row{"  a rare word: recall --all --limit 10 vs rg -in, from $HOME", fmt.Sprintf("%s vs %s (%.1fx)", ms(mw), ms(peer), peer.Seconds()/mw.Seconds()), ">= 5x", verdict(5*mw <= peer)},
		row{"  the question \"" + homeQuestion + "\" vs rg -in of its word", fmt.Sprintf("%s vs %s (%.1fx)", ms(q), ms(peer2), peer2.Seconds()/q.Seconds()), ">= 2x", verdict(2*q <= peer2)})
	return append(rows, homeWrites(daemon.Process.Pid, projects)...)
}
