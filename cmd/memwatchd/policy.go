package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/user"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/memwatch/memwatch/cmd/internal/cli"
	"github.com/memwatch/memwatch/control"
	"github.com/memwatch/memwatch/layout/registry"
	"github.com/memwatch/memwatch/policy"
	"github.com/memwatch/memwatch/state"
)

// commandContext is what every command runs in: what a command does is
// journaled as manual; the daemon marks each of its jobs with what
// started it.
func commandContext() context.Context { return state.WithTrigger(context.Background(), "manual") }

// isPolicyError reports a policy that does not load (exit 2).
func isPolicyError(err error) bool {
	var pe policy.Errors
	return errors.As(err, &pe)
}

// loadPolicy loads the policy the rule names (cli/target.go), for the
// commands that need one: none is a usage error (exit 2) saying where
// memwatch looked and how to make one.
func (g *globals) loadPolicy() (*policy.Policy, error) {
	path, named, exists := g.PolicyRule()
	if !exists {
		if named {
			return nil, cli.UsageError{Err: fmt.Errorf("policy %s: no such file or directory", path)}
		}
		looked := path
		if path != cli.SystemPolicy && os.Geteuid() != 0 {
			looked = path + " and " + cli.SystemPolicy
		}
		return nil, cli.UsageError{Err: fmt.Errorf("no policy: memwatch looked for %s; write one with memwatch init --write, or give --policy FILE", looked)}
	}
	g.Policy = path
	p, err := policy.Load(path, registry.Specs())
	if err != nil {
		var pe policy.Errors
		if errors.As(err, &pe) {
			return nil, err
		}
		return nil, cli.UsageError{Err: err}
	}
	return p, nil
}

// policyIfGiven loads the policy a client command uses to find the daemon
// and its state (cli/target.go's rule); nil when there is none. With none at
// all, this user's own running daemon (as it announced itself) is this
// user's: its policy is used.
func (g *globals) policyIfGiven() (*policy.Policy, error) {
	_, named, exists := g.PolicyRule()
	if !exists && !named {
		noDir := g.StateDir == "" && os.Getenv("MEMWATCH_STATE_DIR") == ""
		d, ok := control.Discover()
		if !ok || !noDir || d.Policy == "" {
			return nil, nil
		}
		g.Policy = d.Policy
	}
	return g.loadPolicy()
}

// readPolicy is policyIfGiven for the commands that only read (status,
// log, recall, show, versions): a policy that does not load (a typo saved
// a moment ago) is said as a warning, and they go on, asking the daemon,
// which runs the last good version of it.
func (g *globals) readPolicy() (*policy.Policy, error) {
	p, err := g.policyIfGiven()
	if err == nil || !isPolicyError(err) {
		return p, err
	}
	if !g.warned {
		g.warned = true
		fmt.Fprintf(g.Stderr, "memwatch: warning: the policy does not load; asking the daemon, which runs its last good version (memwatch validate names every error):\n%v\n", err)
	}
	return nil, nil
}

// resolveStateDir picks the state directory: --state-dir, then
// $MEMWATCH_STATE_DIR, then the policy's state_dir, then systemd's
// $STATE_DIRECTORY, then a per-user default.
func (g *globals) resolveStateDir(p *policy.Policy) string {
	dir, named := g.namedStateDir(p)
	if named {
		return dir
	}
	// A daemon started with its own --state-dir announces it: use it when
	// it runs this command's policy (loaded or not) and no daemon answers
	// in the default directory.
	path, _, _ := g.PolicyRule()
	if d, ok := control.Discover(); ok && d.StateDir != dir && control.PolicyID(d.Policy) == control.PolicyID(path) && !answers(filepath.Join(dir, "memwatch.sock")) {
		return d.StateDir
	}
	return dir
}

// answers reports whether a daemon listens on the socket.
func answers(socket string) bool {
	c, err := net.DialTimeout("unix", socket, 200*time.Millisecond)
	if errors.Is(err, syscall.EAGAIN) {
		return true // its queue is full: it listens, busy
	}
	if err != nil {
		return false
	}
	c.Close()
	return true
}

// namedStateDir is the state directory named by a flag, the environment
// or the policy (named is true), else the default.
func (g *globals) namedStateDir(p *policy.Policy) (dir string, named bool) {
	switch {
	case g.StateDir != "":
		return g.StateDir, true
	case os.Getenv("MEMWATCH_STATE_DIR") != "":
		return os.Getenv("MEMWATCH_STATE_DIR"), true
	case p != nil && p.StateDir != "":
		return p.StateDir, true
	case os.Getenv("STATE_DIRECTORY") != "":
		return strings.Split(os.Getenv("STATE_DIRECTORY"), ":")[0], true
	}
	return defaultStateDir(), false
}

// defaultStateDir is the state directory when nothing names one.
func defaultStateDir() string {
	if os.Geteuid() == 0 {
		return "/var/lib/memwatch"
	}
	if x := os.Getenv("XDG_STATE_HOME"); x != "" {
		return filepath.Join(x, "memwatch")
	}
	home, err := os.UserHomeDir()
	if err != nil {
		if u, uerr := user.Current(); uerr == nil {
			home = u.HomeDir
		}
	}
	return filepath.Join(home, ".local", "state", "memwatch")
}

// socketPath is the control socket a client dials: control.socket, or the
// socket the daemon of the rule's policy announced, or the one the daemon
// of that state directory announced, or memwatch.sock in the state
// directory, or, when no daemon of this state directory runs, the system
// service's.
func (g *globals) socketPath(p *policy.Policy, stateDir string) string {
	if p != nil && p.Control.Socket != "" {
		return p.Control.Socket
	}
	if rd, _, _ := strings.Cut(os.Getenv("RUNTIME_DIRECTORY"), ":"); rd != "" {
		return filepath.Join(rd, "memwatch.sock")
	}
	if path, _, _ := g.PolicyRule(); g.StateDir == "" && os.Getenv("MEMWATCH_STATE_DIR") == "" {
		if s, ok := cli.AnnouncedSocket(path); ok {
			return s
		}
	}
	if d, ok := control.Discover(); ok && d.StateDir == stateDir && d.Socket != "" {
		return d.Socket
	}
	own := filepath.Join(stateDir, "memwatch.sock")
	if _, err := os.Stat(own); err != nil {
		if fi, err := os.Stat(control.SystemSocket); err == nil && fi.Mode()&os.ModeSocket != 0 {
			return control.SystemSocket
		}
	}
	return own
}

// control talks to the daemon of the command's policy.
func (g *globals) control(p *policy.Policy, stateDir string) *control.Client {
	c := control.NewClient(g.socketPath(p, stateDir))
	if path, _, exists := g.PolicyRule(); exists {
		c.Expect(control.PolicyID(path), "")
	}
	return c
}
