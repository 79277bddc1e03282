// Package local is what the commands that read memory do as the user
// running them when no daemon answers: find the policy, the state
// directory and the daemon (as memwatchd does for every command), and
// search here. memwatchd and memwatch-search (the search alone, without
// the replica, metrics, MCP and service code memwatchd links, so that it
// starts in about half the time) share it.
package local

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"os/user"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/memwatch/memwatch/answer"
	"github.com/memwatch/memwatch/cmd/internal/cli"
	"github.com/memwatch/memwatch/confine"
	"github.com/memwatch/memwatch/control"
	"github.com/memwatch/memwatch/fleet/mirror"
	"github.com/memwatch/memwatch/layout/registry"
	"github.com/memwatch/memwatch/policy"
	"github.com/memwatch/memwatch/recall"
	"github.com/memwatch/memwatch/scope"
	"github.com/memwatch/memwatch/spool"
)

// Env is a command's shared flags and what it found: its policy, its
// state directory and its daemon.
type Env struct {
	*cli.Globals
	// warned: a policy that does not load was said already.
	warned bool
}

// warnf says something on stderr.
func (g *Env) warnf(format string, args ...any) {
	fmt.Fprintf(g.Stderr, format+"\n", args...)
}

// IsPolicyError reports a policy that does not load (exit 2).
func IsPolicyError(err error) bool {
	var pe policy.Errors
	return errors.As(err, &pe)
}

// LoadPolicy loads the policy the rule names (cli/target.go), for the
// commands that need one: none is a usage error (exit 2) saying where
// memwatch looked and how to make one.
func (g *Env) LoadPolicy() (*policy.Policy, error) {
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

// PolicyIfGiven loads the policy a client command uses to find the daemon
// and its state (cli/target.go's rule); nil when there is none. With none at
// all, this user's own running daemon (as it announced itself) is this
// user's: its policy is used, while it is there (a daemon being stopped
// whose policy was removed is none).
func (g *Env) PolicyIfGiven() (*policy.Policy, error) {
	_, named, exists := g.PolicyRule()
	if !exists && !named {
		noDir := g.StateDir == "" && os.Getenv("MEMWATCH_STATE_DIR") == ""
		d, ok := control.Discover()
		if !ok || !noDir || d.Policy == "" {
			return nil, nil
		}
		g.Policy = d.Policy
		p, err := g.LoadPolicy()
		if err != nil {
			if _, serr := os.Stat(d.Policy); errors.Is(serr, fs.ErrNotExist) {
				// Gone before or while it loaded: that daemon is
				// being stopped, its policy removed.
				g.Policy = ""
				return nil, nil
			}
		}
		return p, err
	}
	return g.LoadPolicy()
}

// ReadPolicy is PolicyIfGiven for the commands that only read (status,
// log, recall, show, versions): a policy that does not load (a typo saved
// a moment ago) is said as a warning, and they go on, asking the daemon,
// which runs the last good version of it.
func (g *Env) ReadPolicy() (*policy.Policy, error) {
	p, err := g.PolicyIfGiven()
	if err == nil || !IsPolicyError(err) {
		return p, err
	}
	if !g.warned {
		g.warned = true
		fmt.Fprintf(g.Stderr, "memwatch: warning: the policy does not load; asking the daemon, which runs its last good version (memwatch validate names every error):\n%v\n", err)
	}
	return nil, nil
}

// ResolveStateDir picks the state directory: --state-dir, then
// $MEMWATCH_STATE_DIR, then the policy's state_dir, then systemd's
// $STATE_DIRECTORY, then a per-user default.
func (g *Env) ResolveStateDir(p *policy.Policy) string {
	dir, named := g.NamedStateDir(p)
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

// NamedStateDir is the state directory named by a flag, the environment
// or the policy (named is true), else the default.
func (g *Env) NamedStateDir(p *policy.Policy) (dir string, named bool) {
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
	return DefaultStateDir(), false
}

// DefaultStateDir is the state directory when nothing names one.
func DefaultStateDir() string {
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

// SocketPath is the control socket a client dials: control.socket, or the
// socket the daemon of the rule's policy announced, or the one the daemon
// of that state directory announced, or memwatch.sock in the state
// directory, or, when no daemon of this state directory runs, the system
// service's.
func (g *Env) SocketPath(p *policy.Policy, stateDir string) string {
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
func (g *Env) Control(p *policy.Policy, stateDir string) *control.Client {
	c := control.NewClient(g.SocketPath(p, stateDir))
	if path, _, exists := g.PolicyRule(); exists {
		c.Expect(control.PolicyID(path), "")
	}
	return c
}

// AnswerRecall has the daemon of the policy answer req when it runs (its
// warm index, within what this user may read), else searches here, as
// this user: the same answer.Recaller either way.
func (g *Env) AnswerRecall(ctx context.Context, req control.RecallRequest) (control.RecallResponse, error) {
	p, err := g.ReadPolicy()
	if err != nil {
		return control.RecallResponse{}, err
	}
	stateDir := g.ResolveStateDir(p)
	if res, ok, err := cli.AskRecall(ctx, g.Control(p, stateDir), req); ok {
		return res, err
	}
	x := &answer.Recaller{Policy: p, Plain: true, Cache: &scope.Cache{}}
	if x.Policy == nil {
		x.Policy = &policy.Policy{}
	}
	for _, s := range x.Policy.Stores {
		if _, ok := registry.SearchSources(s); !ok {
			continue
		}
		for _, id := range s.RootIDs() {
			x.Roots = append(x.Roots, scope.Candidate{Store: s, ID: id})
		}
	}
	x.Open = func(s *policy.Store, path string) (*confine.Root, error) {
		return confine.Open(path, confine.Options{Within: s.Within()})
	}
	// What this user may read: the kernel decides.
	x.Reaches = func(_ *policy.Store, id confine.ID) bool { return syscall.Access(id.Path, 0x4|0x1) == nil }
	idx := recall.ReadableIndex(stateDir)
	sp, err := spool.OpenReadOnly(ctx, stateDir)
	if err == nil {
		defer sp.Close()
	} else {
		sp = nil
	}
	x.Options = func(o *recall.Options) {
		o.Index = idx
		if sp != nil {
			// As the daemon: one query says which roots hold lines beyond
			// their live files, and the others are asked nothing (a home's
			// forty roots, each its own query, were a tenth of a search).
			gens := sp.Gens(ctx)
			o.Generation, o.Held = gens.Of, gens.Held
		}
	}
	roots, res, done, err := x.Resolve(ctx, req)
	defer done()
	if err != nil {
		return res, err
	}
	// A central node (fleet:) searches its copy of the hosts it follows.
	if p != nil && p.Fleet != nil && req.Dir == "" && req.Store == "" && (req.All || req.Host != "" || len(p.Stores) == 0) {
		var want func(string, int) bool
		if req.Host != "" {
			roots = nil
			want = func(h string, _ int) bool { return h == req.Host }
		}
		fr, fdone, errs := mirror.FleetRoots(stateDir, want)
		defer fdone()
		for _, err := range errs {
			g.warnf("recall: %v", err)
		}
		if req.Host != "" && len(fr) == 0 {
			return res, control.Usagef("no host %q is followed here (memwatch status lists the hosts)", req.Host)
		}
		roots = append(roots, fr...)
	} else if req.Host != "" {
		return res, control.Usagef("--host searches a host a central node follows: give the central node's policy (one with fleet:), and no --dir or --store")
	}
	return x.Search(ctx, req, roots, res)
}
