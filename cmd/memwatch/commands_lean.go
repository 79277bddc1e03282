//go:build lean

package main

import (
	"cmp"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime/debug"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/memwatch/memwatch/control"
)

// The lean memwatch: the commands an agent or a person runs to read
// memory (recall, show, log, versions, status) start in a few
// milliseconds, as they do not link the daemon (Litestream, the AWS SDK,
// Prometheus, the MCP SDK: some 200 package initializers and 1,100 page
// faults, about 10 ms a process).
// Every other command is memwatchd's, the full binary installed beside
// it, which this one becomes (exec: the same process, its arguments, its
// standard files and signals).

// leanCommands are the commands this binary runs itself.
var leanCommands = map[string]bool{"recall": true, "show": true, "log": true, "versions": true, "status": true, "version": true}

// leanMemoryLimit is the heap at which a lean command's first garbage
// collection runs.
const leanMemoryLimit = 64 << 20

// fullBinary is the name of the full binary.
const fullBinary = "memwatchd"

func addCommands(root *cobra.Command, g *globals) {
	root.AddCommand(recallCmd(g), showCmd(g), logCmd(g), versionsCmd(g), statusCmd(g), versionCmd(g))
}

// valueFlags are the global flags that take their value as the next
// argument.
var valueFlags = map[string]bool{"--policy": true, "--state-dir": true, "--log-format": true, "--log-level": true}

// delegate runs memwatchd with args when the command they name is not one
// of this binary's; it returns only when it did not.
func delegate(args []string) (code int, done bool) {
	cmd := ""
	for i := 0; i < len(args); i++ {
		a := args[i]
		if valueFlags[a] {
			i++
			continue
		}
		if a == "--version" {
			return 0, false
		}
		if len(a) > 0 && a[0] != '-' {
			cmd = a
			break
		}
	}
	if leanCommands[cmd] {
		if os.Getenv("GOGC") == "" && os.Getenv("GOMEMLIMIT") == "" {
			// A search is a process of a few milliseconds: no collection
			// until its heap nears leanMemoryLimit (a search's memory is
			// bounded well below: make bench measures its RSS), a tenth
			// of its time on LoCoMo's questions.
			debug.SetGCPercent(-1)
			debug.SetMemoryLimit(leanMemoryLimit)
		}
		return 0, false
	}
	return runFull(args), true
}

// runFull becomes memwatchd with args; it returns only when it cannot.
func runFull(args []string) int {
	path, err := findFull()
	if err != nil {
		fmt.Fprintln(os.Stderr, "memwatch:", err)
		return exitFailure
	}
	err = syscall.Exec(path, append([]string{path}, args...), os.Environ())
	fmt.Fprintf(os.Stderr, "memwatch: run %s: %v\n", path, err)
	return exitFailure
}

// findFull finds memwatchd beside this binary, and only there: the service
// runs as root, and a PATH lookup could run a memwatchd another user put
// in a directory of theirs.
func findFull() (string, error) {
	self, err := os.Executable()
	if err != nil {
		return "", fmt.Errorf("find memwatchd: %w", err)
	}
	p := filepath.Join(filepath.Dir(self), fullBinary)
	if fi, err := os.Stat(p); err != nil || !fi.Mode().IsRegular() {
		return "", fmt.Errorf("this command is memwatchd's, the full binary, and there is none beside this one (%s): install memwatch whole (memwatch and memwatchd together), or run memwatchd directly", p)
	}
	return p, nil
}

// fullState: the lean memwatch keeps nothing beside the flags.
type fullState struct{}

// commandContext: the lean commands journal nothing.
func commandContext() context.Context { return context.Background() }

// isPolicyError: the lean memwatch loads no policy.
func isPolicyError(error) bool { return false }

// leanControl is the daemon of the command's policy, as it announced
// itself; ok is false when none is known (memwatchd then runs the
// command, finding the daemon through the policy itself, or doing the
// work).
func (g *globals) leanControl() (*controlClient, bool) {
	path, _, exists := g.policyRule()
	var socket string
	if dir := cmp.Or(g.stateDir, os.Getenv("MEMWATCH_STATE_DIR")); dir != "" {
		// A state directory named: its daemon's socket, where the daemon
		// keeps it unless the policy says otherwise (then memwatchd,
		// which reads the policy, resolves it).
		socket = filepath.Join(dir, "memwatch.sock")
		if fi, err := os.Stat(socket); err != nil || fi.Mode()&os.ModeSocket == 0 {
			return nil, false
		}
	} else {
		var ok bool
		if socket, ok = announcedSocket(path); !ok {
			return nil, false
		}
	}
	c := newControl(socket)
	if exists {
		c.Expect(control.PolicyID(path), control.PolicyStamp(path))
	}
	return c, true
}
