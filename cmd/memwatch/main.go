// Command memwatch is the client: the commands an agent or a person runs
// to read memory (recall, show, log, versions, status) start in a few
// milliseconds, as they do not link the daemon (Litestream, the AWS SDK,
// Prometheus, the MCP SDK: some 200 package initializers and 1,100 page
// faults, about 10 ms a process); it links cli and control alone.
// Every other command is memwatchd's, the full binary installed beside
// it, which this one becomes (exec: the same process, its arguments, its
// standard files and signals); a search no daemon answers is
// memwatch-search's, the search alone (cmd/memwatch-search).
package main

import (
	"cmp"
	"os"
	"path/filepath"

	"github.com/spf13/cobra"

	"github.com/memwatch/memwatch/cmd/internal/cli"
	"github.com/memwatch/memwatch/control"
)

// fullBinary is the name of the full binary, searchBinary of the search
// with no daemon.
const (
	fullBinary   = "memwatchd"
	searchBinary = "memwatch-search"
)

// version is set at build time with -ldflags "-X main.version=...".
var version = "dev"

func main() {
	d := &delegation{}
	os.Exit(cli.Execute(cli.Program{
		Version:  version,
		Commands: func(root *cobra.Command, g *cli.Globals) { addCommands(root, g, d) },
		Route:    cli.LeanRoute,
		Delegate: d.run,
	}, os.Args[1:], os.Stdout, os.Stderr))
}

// addCommands adds the commands this binary runs itself: reading memory.
func addCommands(root *cobra.Command, g *cli.Globals, d *delegation) {
	g.Backend = client{g, d}
	// memwatchd answers completion (route sends it every command not
	// added here): cobra's default completion command, built at every
	// run, was a twentieth of a search's process.
	root.CompletionOptions.DisableDefaultCmd = true
	root.AddCommand(cli.RecallCmd(g), cli.ShowCmd(g), cli.LogCmd(g), cli.VersionsCmd(g), cli.StatusCmd(g), cli.VersionCmd(g))
}

// client answers the shared commands by asking the daemon of the policy;
// when none answers, memwatchd runs the command (cli.ErrDelegate).
type client struct {
	*cli.Globals
	d *delegation
}

// delegation is where a command this binary hands over goes: a search
// with no daemon to memwatch-search (the search alone, which starts in
// about half memwatchd's time), anything else, or a search when
// memwatch-search is not installed, to memwatchd.
type delegation struct {
	search bool // set by the command that handed over: a search
}

func (d *delegation) run(args []string) int {
	if d.search {
		if path, err := cli.Beside(searchBinary); err == nil {
			return cli.Become(path, args)
		}
	}
	return cli.BecomeBeside(fullBinary, args)
}

// leanControl is the daemon of the command's policy, as it announced
// itself; ok is false when none is known (memwatchd then runs the
// command, finding the daemon through the policy itself, or doing the
// work).
func (g client) leanControl() (*control.Client, bool) {
	path, _, exists := g.PolicyRule()
	var socket string
	if dir := cmp.Or(g.StateDir, os.Getenv("MEMWATCH_STATE_DIR")); dir != "" {
		// A state directory named: its daemon's socket, where the daemon
		// keeps it unless the policy says otherwise (then memwatchd,
		// which reads the policy, resolves it).
		socket = filepath.Join(dir, "memwatch.sock")
		if fi, err := os.Stat(socket); err != nil || fi.Mode()&os.ModeSocket == 0 {
			return nil, false
		}
	} else {
		var ok bool
		if socket, ok = cli.AnnouncedSocket(path); !ok {
			return nil, false
		}
	}
	c := control.NewClient(socket)
	if exists {
		c.Expect(control.PolicyID(path), control.PolicyStamp(path))
	}
	return c, true
}
