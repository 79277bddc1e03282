package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"runtime/debug"
	"strings"
	"sync"
	"syscall"
	"time"

	sddaemon "github.com/coreos/go-systemd/v22/daemon"

	"github.com/spf13/cobra"

	"github.com/memwatch/memwatch/answer"
	"github.com/memwatch/memwatch/cmd/internal/cli"
	"github.com/memwatch/memwatch/confine"
	"github.com/memwatch/memwatch/control"
	"github.com/memwatch/memwatch/daemon"
	"github.com/memwatch/memwatch/mcpserver"
	"github.com/memwatch/memwatch/policy"
	"github.com/memwatch/memwatch/spool"
	"github.com/memwatch/memwatch/ui"
)

// defaultMemoryLimit is the daemon's soft memory target (see run).
const defaultMemoryLimit = 192 << 20

// defaultGCPercent is the daemon's GOGC (see run).
const defaultGCPercent = 200

func runCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "run [--policy PATH]",
		Short: "Run the daemon in the foreground",
		Long: `Run memwatch in the foreground until SIGTERM or SIGINT.

It scans every store root once, then watches them. SIGHUP reloads the
policy (an invalid policy is logged and the old one kept). A second
SIGTERM/SIGINT exits at once. Exit codes: 0 clean stop, 1 runtime
failure, 2 usage or policy error.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			log, err := g.logger()
			if err != nil {
				return err
			}
			// The files' stamp before they are read: a client that finds
			// them changed since lets memwatchd load them and say what
			// is wrong (control.PolicyStampHeader).
			path, _, _ := g.PolicyRule()
			stamp := control.PolicyStamp(path)
			p, err := g.LoadPolicy()
			if err != nil {
				return err
			}
			// A soft memory target: the garbage collector works harder near
			// it instead of letting a burst of input double the heap
			// (GOMEMLIMIT overrides it).
			if os.Getenv("GOMEMLIMIT") == "" {
				debug.SetMemoryLimit(defaultMemoryLimit)
			}
			// Under that target, the heap may grow to three times what is
			// live before a collection: a catch-up collected half as often
			// costs 10-15% less CPU, for a peak RSS of about 180 MiB
			// instead of 130 on the home bench (GOGC overrides it).
			if os.Getenv("GOGC") == "" {
				debug.SetGCPercent(defaultGCPercent)
			}
			stateDir := g.daemonStateDir(p)
			for _, w := range p.Warnings(stateDir) {
				log.Warn("policy warning (memwatch validate --strict refuses it)", "warning", w.Error())
			}
			d, err := daemon.New(daemon.Config{Policy: p, PolicyPath: g.Policy, PolicyStamp: stamp, StateDir: stateDir,
				Socket: listenSocket(p, stateDir), Version: version, Notify: sdNotify, Watchdog: watchdogInterval()}, log)
			if err != nil {
				return err
			}
			tools, err := mcpserver.New(mcpserver.Config{Policy: d.Policy, Version: version, Rewriter: d.Rewriter(), Undo: d.Undo,
				Index: filepath.Join(stateDir, daemon.IndexDir), Generation: d.Generation, Held: d.Held, Versions: d.Versions, VersionContent: d.VersionContent, StateDir: fleetState(p, stateDir),
				Show: func(ctx context.Context, root *confine.Root, c spool.Citation) ([]spool.Shown, error) {
					return answer.ShowIn(ctx, d.Spool(), root, c)
				}}, log)
			if err != nil {
				d.Close()
				return err
			}
			d.Handle("/mcp", tools.Handler())
			ctx, cancel := context.WithCancelCause(context.Background())
			defer cancel(nil)
			if p.UI.Enabled {
				// The review pages, on the control API's listeners, with their
				// authentication and each caller's scope (read at start: a
				// reload does not turn them on or off).
				pages, err := ui.New(ui.Config{StateDir: stateDir, Policy: d.Policy, DB: d.DB(), Versions: d.VersionStore(), Spool: d.Spool(),
					API: ui.InProcess(d.API()), Prefix: "/ui/"}, log)
				if err != nil {
					d.Close()
					return err
				}
				d.Handle("/ui/", pages.Handler())
				var wg sync.WaitGroup
				wg.Add(1)
				go func() { defer wg.Done(); _ = pages.Run(ctx) }()
				defer wg.Wait()
				defer cancel(nil) // stop the pages before waiting for them
			}
			sigs := make(chan os.Signal, 4)
			signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP)
			defer signal.Stop(sigs)
			done := make(chan error, 1)
			go func() { done <- d.Run(ctx) }()
			stopping := false
			for {
				select {
				case err := <-done:
					return err
				case s := <-sigs:
					switch {
					case s == syscall.SIGHUP && !stopping:
						log.Info("SIGHUP: reloading policy", "policy", g.Policy)
						_ = d.Reload(ctx)
					case s == syscall.SIGHUP:
					case stopping:
						log.Warn("second signal: exiting now", "signal", s.String())
						os.Exit(cli.ExitFailure)
					default:
						stopping = true
						cancel(fmt.Errorf("signal %s", s))
					}
				}
			}
		},
	}
}

// watchdogInterval is systemd's WatchdogSec for this process; 0 when off.
func watchdogInterval() time.Duration {
	d, err := sddaemon.SdWatchdogEnabled(false)
	if err != nil {
		return 0
	}
	return d
}

// sdNotify sends a notification to systemd when NOTIFY_SOCKET is set; a
// failed notification is not the daemon's failure (systemd's timeout says it).
func sdNotify(state string) { _, _ = sddaemon.SdNotify(false, state) }

// listenSocket is the control socket a daemon of this state directory
// binds: control.socket, or memwatch.sock in systemd's RuntimeDirectory
// (/run/memwatch, which every local user may reach; the daemon serves each
// within its roots), or memwatch.sock in the state directory. Never another
// daemon's socket.
func listenSocket(p *policy.Policy, stateDir string) string {
	if p != nil && p.Control.Socket != "" {
		return p.Control.Socket
	}
	if rd, _, _ := strings.Cut(os.Getenv("RUNTIME_DIRECTORY"), ":"); rd != "" {
		return filepath.Join(rd, "memwatch.sock")
	}
	return filepath.Join(stateDir, "memwatch.sock")
}

// fleetState is the state directory on a central node (fleet:), where
// the hosts' copies are, else "".
func fleetState(p *policy.Policy, stateDir string) string {
	if p.Fleet == nil {
		return ""
	}
	return stateDir
}
