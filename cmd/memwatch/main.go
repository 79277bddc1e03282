// Command memwatch maintains the on-disk memory of AI agents.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/user"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/memwatch/memwatch/control"
	"github.com/memwatch/memwatch/layout/registry"
	"github.com/memwatch/memwatch/policy"
	"github.com/memwatch/memwatch/state"
)

// version is set at build time with -ldflags "-X main.version=...".
var version = "dev"

// Exit codes.
const (
	exitOK      = 0
	exitFailure = 1
	exitUsage   = 2
)

// usageError marks errors that are the user's input: bad flags or policy.
type usageError struct{ err error }

func (u usageError) Error() string { return u.err.Error() }
func (u usageError) Unwrap() error { return u.err }

func main() {
	if code, done := delegate(os.Args[1:]); done {
		os.Exit(code)
	}
	os.Exit(execute(os.Args[1:], os.Stdout, os.Stderr))
}

// globals are the flags every subcommand shares.
type globals struct {
	policy    string
	stateDir  string
	logFormat string
	logLevel  string
	stderr    io.Writer
	stdout    io.Writer
	// rawOut is stdout as given: what prints agents' text itself makes it
	// inert (print.go) before it adds colour.
	rawOut io.Writer
}

func execute(args []string, stdout, stderr io.Writer) int {
	g := &globals{stdout: terminalOut(stdout), rawOut: stdout, stderr: stderr}
	root := &cobra.Command{
		Use:   "memwatch",
		Short: "Keep AI agents' on-disk memory bounded, organized and searchable",
		Long: `memwatch watches the memory directories of AI agents and maintains them with
no change to the agents: it archives and compacts oversize memory files,
keeps views current, and journals every change so it can be undone.

Start with:  memwatch validate --policy FILE   then   memwatch run --policy FILE`,
		SilenceUsage:  true,
		SilenceErrors: true,
		Version:       version,
	}
	root.SetVersionTemplate(versionLine()) // --version prints what memwatch version does
	root.SetOut(stdout)
	root.SetErr(stderr)
	root.SetArgs(args)
	pf := root.PersistentFlags()
	pf.StringVar(&g.policy, "policy", "", "policy file, or directory of *.yaml files")
	pf.StringVar(&g.stateDir, "state-dir", "", "state directory (default: policy state_dir, $STATE_DIRECTORY, /var/lib/memwatch as root, else $XDG_STATE_HOME/memwatch)")
	pf.StringVar(&g.logFormat, "log-format", "auto", "log format: auto (colour on a terminal, JSON otherwise), text or json")
	pf.StringVar(&g.logLevel, "log-level", "info", "log level: debug, info, warn or error")
	root.SetFlagErrorFunc(func(c *cobra.Command, err error) error { return usageError{err} })
	addCommands(root, g)
	// What a command does is journaled as manual; the daemon marks each of
	// its jobs with what started it.
	err := root.ExecuteContext(state.WithTrigger(context.Background(), "manual"))
	if err == nil {
		return exitOK
	}
	var q quietExit
	if errors.As(err, &q) {
		return q.code
	}
	if errors.Is(err, errDelegate) {
		return runFull(args)
	}
	fmt.Fprintln(stderr, "memwatch:", err)
	var ue usageError
	var pe policy.Errors
	if errors.As(err, &ue) || errors.As(err, &pe) || errors.Is(err, control.ErrUsage) || strings.HasPrefix(err.Error(), "unknown command") || strings.Contains(err.Error(), "arg(s)") || strings.HasPrefix(err.Error(), "unknown flag") || strings.HasPrefix(err.Error(), "unknown shorthand flag") {
		return exitUsage
	}
	return exitFailure
}

// errDelegate asks memwatchd, the full binary, to run the command instead
// (the lean memwatch, when no daemon answers what it asked).
var errDelegate = errors.New("this command is memwatchd's")

// warnf says something on stderr.
func (g *globals) warnf(format string, args ...any) {
	fmt.Fprintf(g.stderr, format+"\n", args...)
}

// loadPolicy loads --policy; errors are usage errors (exit 2).
func (g *globals) loadPolicy() (*policy.Policy, error) {
	if g.policy == "" {
		return nil, usageError{errors.New("--policy is required: a policy file or a directory of *.yaml files")}
	}
	p, err := policy.Load(g.policy, registry.Specs())
	if err != nil {
		var pe policy.Errors
		if errors.As(err, &pe) {
			return nil, err
		}
		return nil, usageError{err}
	}
	return p, nil
}

// DefaultPolicy is where memwatch looks for a policy when none is named:
// the system one as root, the user's own otherwise.
func DefaultPolicy() string {
	if os.Geteuid() == 0 {
		return "/etc/memwatch/policy.d"
	}
	if x := os.Getenv("XDG_CONFIG_HOME"); x != "" {
		return filepath.Join(x, "memwatch", "policy.yaml")
	}
	home, _ := os.UserHomeDir()
	return filepath.Join(home, ".config", "memwatch", "policy.yaml")
}

// policyIfGiven loads the policy a client command should use to find the
// daemon and its state: --policy, else $MEMWATCH_POLICY, else the default
// policy when it exists; nil when there is none.
func (g *globals) policyIfGiven() (*policy.Policy, error) {
	if g.policy == "" {
		noDir := g.stateDir == "" && os.Getenv("MEMWATCH_STATE_DIR") == ""
		if env := os.Getenv("MEMWATCH_POLICY"); env != "" {
			g.policy = env
		} else if _, err := os.Stat(DefaultPolicy()); err == nil && noDir {
			g.policy = DefaultPolicy()
		} else if d, ok := control.Discover(); ok && noDir && d.Policy != "" {
			g.policy = d.Policy // the running daemon's, started with its own --policy
		} else {
			return nil, nil
		}
	}
	return g.loadPolicy()
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
	// no daemon answers in the default directory.
	if d, ok := control.Discover(); ok && d.StateDir != dir && !answers(filepath.Join(dir, "memwatch.sock")) {
		return d.StateDir
	}
	return dir
}

// answers reports whether a daemon listens on the socket.
func answers(socket string) bool {
	c, err := net.DialTimeout("unix", socket, 200*time.Millisecond)
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
	case g.stateDir != "":
		return g.stateDir, true
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
// socket the daemon of that state directory announced, or memwatch.sock in
// the state directory, or, when no daemon of this state directory runs,
// the system service's.
func socketPath(p *policy.Policy, stateDir string) string {
	if p != nil && p.Control.Socket != "" {
		return p.Control.Socket
	}
	if rd, _, _ := strings.Cut(os.Getenv("RUNTIME_DIRECTORY"), ":"); rd != "" {
		return filepath.Join(rd, "memwatch.sock")
	}
	if d, ok := control.Discover(); ok && d.StateDir == stateDir && d.Socket != "" {
		return d.Socket
	}
	own := filepath.Join(stateDir, "memwatch.sock")
	if _, err := os.Stat(own); err != nil {
		if fi, err := os.Stat(SystemSocket); err == nil && fi.Mode()&os.ModeSocket != 0 {
			return SystemSocket
		}
	}
	return own
}

// SystemSocket is the control socket of the system service (systemd's
// RuntimeDirectory=memwatch).
const SystemSocket = "/run/memwatch/memwatch.sock"

func printJSON(g *globals, v any) error {
	enc := json.NewEncoder(g.stdout)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}
