// Package writertest runs the kinds of writers agents really are, as real
// processes (the test binary, re-executed), against a file memwatch
// rewrites, and accounts afterwards for every entry they wrote: in the
// live file, removed by one of memwatch's compactions (and so in its
// archive), or missing. A copy in a kept file does not count: the agent
// never looks there.
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

// Kinds are the writers agents are.
var Kinds = []Kind{
	{"inplace", 10 * time.Millisecond, 300, false},   // read, change, write back in place (O_TRUNC)
	{"rename", 10 * time.Millisecond, 300, false},    // read, change, write a temp file and rename it over
	{"rewrite", 30 * time.Millisecond, 300, false},   // both, alternating
	{"truncate", 20 * time.Millisecond, 300, false},  // read, ftruncate to 0, write from offset 0, one descriptor
	{"reopen", 15 * time.Millisecond, 300, false},    // O_APPEND reopened for every entry
	{"held-append", 5 * time.Millisecond, 300, true}, // one O_APPEND descriptor held throughout
	{"held-seek", 5 * time.Millisecond, 300, true},   // O_WRONLY held, seek to the end for each write
}

// Scale multiplies the writes (make stress sets MEMWATCH_WRITERS_SCALE=10).
func Scale() int {
	if n, err := strconv.Atoi(os.Getenv("MEMWATCH_WRITERS_SCALE")); err == nil && n > 0 {
		return n
	}
	return 1
}

// Line is the heading of the i-th entry a writer of kind writes: a
// now-history History entry with a timestamp that grows with i, so
// compactions keep the newest.
func Line(kind string, i int) string {
	t := time.Date(2026, 1, 1, 0, 0, 0, 0, time.Local).Add(time.Duration(i) * time.Minute)
	return fmt.Sprintf("## %s | entry %s %d\n", t.Format("2006-01-02-1504"), kind, i)
}

// Entry is the i-th entry: its heading and about body bytes of lines
// that are its own (no line repeats another entry's).
func Entry(kind string, i, body int) string {
	var b strings.Builder
	b.WriteString(Line(kind, i))
	for j := 0; b.Len() < body; j++ {
		fmt.Fprintf(&b, "- %s %d detail %d: %s\n", kind, i, j, strings.Repeat("memory ", 12))
	}
	return b.String() + "\n"
}

const envKind = "MEMWATCH_TEST_WRITER"

// Main runs the writer and exits when the process was started as one.
func Main() {
	kind := os.Getenv(envKind)
	if kind == "" {
		return
	}
	n, _ := strconv.Atoi(os.Getenv(envKind + "_N"))
	first, _ := strconv.Atoi(os.Getenv(envKind + "_FIRST"))
	body, _ := strconv.Atoi(os.Getenv(envKind + "_BODY"))
	every, _ := time.ParseDuration(os.Getenv(envKind + "_EVERY"))
	if err := run(kind, os.Getenv(envKind+"_PATH"), first, n, body, every); err != nil {
		fmt.Fprintln(os.Stderr, "writer:", err)
		os.Exit(1)
	}
	os.Exit(0)
}

// run writes n entries numbered from first; kind may carry a "/tag" suffix
// that only names the entries, so one test can run the same kind in
// several rounds (or go on with one writer's numbering from first).
func run(kind, path string, first, n, body int, every time.Duration) error {
	behaviour, _, _ := strings.Cut(kind, "/")
	switch behaviour {
	case "inplace", "rename", "rewrite", "truncate":
		trace := openTrace(kind)
		defer trace.Close()
		for i := first; i < first+n; i++ {
			old, err := os.ReadFile(path)
			if err != nil && !errors.Is(err, fs.ErrNotExist) {
				return err
			}
			if i > 0 && !strings.Contains(string(old), Line(kind, i-1)) {
				// The moment a write is lost: the agent read a version
				// without its previous write and writes from it.
				fmt.Fprintf(trace, "%s write %d read %d bytes without entry %d\n", time.Now().Format("15:04:05.000000"), i, len(old), i-1)
			}
			next := append(old, Entry(kind, i, body)...)
			if err := rmw(behaviour, path, next, i); err != nil {
				return err
			}
			fmt.Fprintf(trace, "%s wrote %d: read %d bytes\n", time.Now().Format("15:04:05.000000"), i, len(old))
			time.Sleep(every)
		}
	case "reopen":
		for i := first; i < first+n; i++ {
			f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
			if err != nil {
				return err
			}
			if _, err := f.WriteString(Entry(kind, i, body)); err != nil {
				return err
			}
			f.Close()
			time.Sleep(every)
		}
	case "held-append", "held-seek":
		flag := os.O_WRONLY | os.O_CREATE
		if behaviour == "held-append" {
			flag |= os.O_APPEND
		}
		f, err := os.OpenFile(path, flag, 0o644)
		if err != nil {
			return err
		}
		defer f.Close()
		for i := first; i < first+n; i++ {
			if behaviour == "held-seek" {
				if _, err := f.Seek(0, io.SeekEnd); err != nil {
					return err
				}
			}
			if _, err := f.WriteString(Entry(kind, i, body)); err != nil {
				return err
			}
			time.Sleep(every)
		}
	default:
		return fmt.Errorf("unknown writer %q", kind)
	}
	return nil
}

// openTrace opens the trace file of a writer in $MEMWATCH_TEST_WRITER_TRACE
// (when set): one line for each read that lacks the writer's previous
// write, the instant a loss happens. Otherwise it discards.
func openTrace(kind string) io.WriteCloser {
	dir := os.Getenv(envKind + "_TRACE")
	if dir == "" {
		return nopCloser{io.Discard}
	}
	f, err := os.OpenFile(filepath.Join(dir, strings.ReplaceAll(kind, "/", "_")+".trace"), os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		return nopCloser{io.Discard}
	}
	return f
}

type nopCloser struct{ io.Writer }

func (nopCloser) Close() error { return nil }

// rmw writes next back the way a read-modify-write agent of behaviour does.
func rmw(behaviour, path string, next []byte, i int) error {
	switch {
	case behaviour == "rename" || behaviour == "rewrite" && i%2 == 1:
		tmp := fmt.Sprintf("%s.agent-tmp-%d", path, i)
		if err := os.WriteFile(tmp, next, 0o644); err != nil {
			return err
		}
		return os.Rename(tmp, path)
	case behaviour == "truncate":
		f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
		if err != nil {
			return err
		}
		defer f.Close()
		if err := f.Truncate(0); err != nil {
			return err
		}
		_, err = f.WriteAt(next, 0)
		return err
	default:
		return os.WriteFile(path, next, 0o644) // O_TRUNC, then write
	}
}

// Run is one writer process to start.
type Run struct {
	Kind  string // a Kinds name, maybe with a "/tag"
	Path  string
	N     int
	First int // the number of its first entry: a later round goes on from the last
	Every time.Duration
	Body  int // bytes of each entry beyond its heading
}

// Start runs a writer process and returns a channel that receives its
// exit. The process is killed at the test's end.
func Start(t testing.TB, r Run) <-chan error {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	// A race-enabled binary sleeps a second at exit unless told not to.
	cmd.Env = append(os.Environ(), envKind+"="+r.Kind, envKind+"_PATH="+r.Path,
		envKind+"_N="+strconv.Itoa(r.N), envKind+"_FIRST="+strconv.Itoa(r.First), envKind+"_EVERY="+r.Every.String(), envKind+"_BODY="+strconv.Itoa(r.Body),
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

var entryRE = regexp.MustCompile(`entry (\S+) (\d+)\n`)

// Entries returns the entries of each kind whose heading is in data.
func Entries(data []byte) map[string]map[int]bool {
	seen := map[string]map[int]bool{}
	for _, m := range entryRE.FindAllSubmatch(data, -1) {
		i, _ := strconv.Atoi(string(m[2]))
		if seen[string(m[1])] == nil {
			seen[string(m[1])] = map[int]bool{}
		}
		seen[string(m[1])][i] = true
	}
	return seen
}

// Account is where a writer's entries are at the end.
type Account struct {
	Writes  int
	Live    int   // in the live file
	Removed int   // not live: taken out by one of memwatch's compactions, and in its archive
	Missing []int // neither: writes the agent lost
	// InKept counts the missing entries a kept copy holds: a backup the
	// agent never reads.
	InKept int
}

// Check accounts for entries 0..n-1 of kind. live is the live file;
// removed, the entries memwatch's compactions took out (each in an archive
// whose compaction result lacks it); kept, the kept copies.
func Check(live []byte, kind string, n int, removed map[int]bool, kept [][]byte) Account {
	a := Account{Writes: n}
	in := Entries(live)[kind]
	inKept := map[int]bool{}
	for _, k := range kept {
		for i := range Entries(k)[kind] {
			inKept[i] = true
		}
	}
	for i := range n {
		switch {
		case in[i]:
			a.Live++
		case removed[i]:
			a.Removed++
		default:
			a.Missing = append(a.Missing, i)
			if inKept[i] {
				a.InKept++
			}
		}
	}
	return a
}

// RemovedBy returns the entries of kind in archive that compact drops: a
// compaction that archived this pre-image took them out of the live file.
func RemovedBy(archive []byte, kind string, compact func([]byte) []byte) map[int]bool {
	out := map[int]bool{}
	kept := Entries(compact(archive))[kind]
	for i := range Entries(archive)[kind] {
		if !kept[i] {
			out[i] = true
		}
	}
	return out
}
