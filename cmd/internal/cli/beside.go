package cli

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime/debug"
	"slices"
	"syscall"

	"github.com/spf13/cobra"
)

// Beside finds the binary name beside this one, and only there: the
// service runs as root, and a PATH lookup could run a binary another user
// put in a directory of theirs.
func Beside(name string) (string, error) {
	self, err := os.Executable()
	if err != nil {
		return "", fmt.Errorf("find %s: %w", name, err)
	}
	p := filepath.Join(filepath.Dir(self), name)
	if fi, err := os.Stat(p); err != nil || !fi.Mode().IsRegular() {
		return "", fmt.Errorf("find %s: there is none beside this binary (%s)", name, p)
	}
	return p, nil
}

// Become runs the binary at path with args in this process (exec: its
// arguments, its standard files and signals); it returns only when it
// cannot.
func Become(path string, args []string) int {
	err := syscall.Exec(path, append([]string{path}, args...), os.Environ())
	fmt.Fprintf(os.Stderr, "memwatch: run %s: %v\n", path, err)
	return ExitFailure
}

// BecomeBeside becomes the binary name installed beside this one with
// args (Become); when there is none it says what is missing.
func BecomeBeside(name string, args []string) int {
	path, err := Beside(name)
	if err != nil {
		fmt.Fprintf(os.Stderr, "memwatch: this command is %s's: install memwatch whole (memwatch, memwatchd and memwatch-search together), or run memwatchd directly (%v)\n", name, err)
		return ExitFailure
	}
	return Become(path, args)
}

// leanMemoryLimit is the heap at which a lean command's first garbage
// collection runs.
const leanMemoryLimit = 64 << 20

// LeanRoute is a lean binary's Program.Route (the client's, memwatch-
// search's): args that name none of its commands (cobra finds the command
// as it will run it, the global flags and their values stepped over:
// memwatchd's commands, help, no command at all; --version is its own)
// become memwatchd. Its own commands run as short processes: no garbage
// collection until the heap nears leanMemoryLimit (a search's memory is
// bounded well below it: make bench measures its RSS; a tenth of its time
// on LoCoMo's questions), unless GOGC or GOMEMLIMIT say otherwise.
func LeanRoute(root *cobra.Command, args []string) (code int, done bool) {
	c, _, err := root.Find(args)
	if err != nil || c == root && !slices.Contains(args, "--version") {
		return BecomeBeside("memwatchd", args), true
	}
	if os.Getenv("GOGC") == "" && os.Getenv("GOMEMLIMIT") == "" {
		debug.SetGCPercent(-1)
		debug.SetMemoryLimit(leanMemoryLimit)
	}
	return 0, false
}
