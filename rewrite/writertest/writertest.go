// Package writertest runs the kinds of writers agents really are, as real
// processes (the test binary, re-executed), against a file memwatch
// rewrites, and checks afterwards that nothing they wrote was lost.
//
// A test binary using it calls Main first thing in its TestMain.
package writertest

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

// Kind is one way agents write.
type Kind struct {
	Name  string
	Every time.Duration // pause between writes
	N     int           // writes at scale 1
	Held  bool          // keeps the file open: memwatch must defer, never replace
}

// Kinds are the writers of issue [writes], (a) to (e).
var Kinds = []Kind{
	{"rewrite", 30 * time.Millisecond, 300, false},  // (a) in-place and temp+rename, alternating
	{"reopen", 500 * time.Microsecond, 4000, false}, // (b) O_APPEND reopened for every line
	{"held-append", time.Millisecond, 2000, true},   // (c) one O_APPEND descriptor held
	{"held-seek", time.Millisecond, 2000, true},     // (d) O_WRONLY held, seek to the end per write
	{"truncate", 30 * time.Millisecond, 300, false}, // (e) truncate and rewrite in place
}

// Scale multiplies the writes (make soak sets MEMWATCH_WRITERS_SCALE=50).
func Scale() int {
	if n, err := strconv.Atoi(os.Getenv("MEMWATCH_WRITERS_SCALE")); err == nil && n > 0 {
		return n
	}
	return 1
}

// Line is the i-th entry a writer of kind writes: a now-history History
// entry with a timestamp that grows with i, so compactions keep the newest.
func Line(kind string, i int) string {
	t := time.Date(2026, 1, 1, 0, 0, 0, 0, time.Local).Add(time.Duration(i) * time.Minute)
	return fmt.Sprintf("## %s | entry %s %d\n", t.Format("2006-01-02-1504"), kind, i)
}

const envKind = "MEMWATCH_TEST_WRITER"

// Main runs the writer and exits when the process was started as one.
func Main() {
	kind := os.Getenv(envKind)
	if kind == "" {
		return
	}
	n, _ := strconv.Atoi(os.Getenv(envKind + "_N"))
	every, _ := time.ParseDuration(os.Getenv(envKind + "_EVERY"))
	if err := run(kind, os.Getenv(envKind+"_PATH"), n, every); err != nil {
		fmt.Fprintln(os.Stderr, "writer:", err)
		os.Exit(1)
	}
	os.Exit(0)
}

// run writes n entries; kind may carry a "/tag" suffix that only names the
// entries, so one test can run the same kind in several rounds.
func run(kind, path string, n int, every time.Duration) error {
	switch behaviour, _, _ := strings.Cut(kind, "/"); behaviour {
	case "rewrite", "truncate":
		for i := range n {
			old, err := os.ReadFile(path)
			if err != nil && !errors.Is(err, fs.ErrNotExist) {
				return err
			}
			next := append(old, Line(kind, i)...)
			if strings.HasPrefix(kind, "rewrite") && i%2 == 1 {
				tmp := fmt.Sprintf("%s.agent-tmp-%d", path, i)
				if err := os.WriteFile(tmp, next, 0o644); err != nil {
					return err
				}
				if err := os.Rename(tmp, path); err != nil {
					return err
				}
			} else if err := os.WriteFile(path, next, 0o644); err != nil { // O_TRUNC, then write
				return err
			}
			time.Sleep(every)
		}
	case "reopen":
		for i := range n {
			f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
			if err != nil {
				return err
			}
			if _, err := f.WriteString(Line(kind, i)); err != nil {
				return err
			}
			f.Close()
			time.Sleep(every)
		}
	case "held-append", "held-seek":
		flag := os.O_WRONLY | os.O_CREATE
		if strings.HasPrefix(kind, "held-append") {
			flag |= os.O_APPEND
		}
		f, err := os.OpenFile(path, flag, 0o644)
		if err != nil {
			return err
		}
		defer f.Close()
		for i := range n {
			if strings.HasPrefix(kind, "held-seek") {
				if _, err := f.Seek(0, io.SeekEnd); err != nil {
					return err
				}
			}
			if _, err := f.WriteString(Line(kind, i)); err != nil {
				return err
			}
			time.Sleep(every)
		}
	default:
		return fmt.Errorf("unknown writer %q", kind)
	}
	return nil
}

// Start runs a writer process of kind against path and returns a channel
// that receives its exit. The process is killed at the test's end.
func Start(t testing.TB, kind, path string, n int, every time.Duration) <-chan error {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	// A race-enabled binary sleeps a second at exit unless told not to.
	cmd.Env = append(os.Environ(), envKind+"="+kind, envKind+"_PATH="+path,
		envKind+"_N="+strconv.Itoa(n), envKind+"_EVERY="+every.String(),
		"GORACE="+strings.TrimSpace(os.Getenv("GORACE")+" atexit_sleep_ms=0"))
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill() })
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	return done
}

var entryRE = regexp.MustCompile(`entry (\S+) (\d+)`)

// Seen collects the entries found in every regular file under dir: the
// target, its archives and whatever memwatch kept.
func Seen(t testing.TB, dir string) map[string]map[int]bool {
	t.Helper()
	seen := map[string]map[int]bool{}
	filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() {
			return nil
		}
		b, err := os.ReadFile(p)
		if err != nil {
			t.Errorf("read %s: %v", p, err)
			return nil
		}
		for _, m := range entryRE.FindAllSubmatch(b, -1) {
			i, _ := strconv.Atoi(string(m[2]))
			if seen[string(m[1])] == nil {
				seen[string(m[1])] = map[int]bool{}
			}
			seen[string(m[1])][i] = true
		}
		return nil
	})
	return seen
}

// Lost returns the entries 0..n-1 of kind that are in no file.
func Lost(seen map[string]map[int]bool, kind string, n int) []int {
	var lost []int
	for i := range n {
		if !seen[kind][i] {
			lost = append(lost, i)
		}
	}
	return lost
}
