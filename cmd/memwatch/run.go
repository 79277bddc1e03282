package main

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/memwatch/memwatch/daemon"
	"github.com/memwatch/memwatch/mcpserver"
)

func runCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "run --policy PATH",
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
			p, err := g.loadPolicy()
			if err != nil {
				return err
			}
			if err := daemon.CheckLayouts(p); err != nil {
				return err
			}
			stateDir := g.daemonStateDir(p)
			for _, w := range p.Warnings(stateDir) {
				log.Warn("policy warning (memwatch validate --strict refuses it)", "warning", w.Error())
			}
			d, err := daemon.New(daemon.Config{Policy: p, PolicyPath: g.policy, StateDir: stateDir,
				Socket: socketPath(p, stateDir), Version: version, Notify: sdNotify, Watchdog: watchdogInterval()}, log)
			if err != nil {
				return err
			}
			tools, err := mcpserver.New(mcpserver.Config{Policy: d.Policy, Version: version, Rewriter: d.Rewriter(), Undo: d.Undo,
				Index: filepath.Join(stateDir, daemon.IndexDir), Generation: d.Generation}, log)
			if err != nil {
				d.Close()
				return err
			}
			d.Handle("/mcp", tools.Handler())
			ctx, cancel := context.WithCancelCause(context.Background())
			defer cancel(nil)
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
						log.Info("SIGHUP: reloading policy", "policy", g.policy)
						_ = d.Reload(ctx)
					case s == syscall.SIGHUP:
					case stopping:
						log.Warn("second signal: exiting now", "signal", s.String())
						os.Exit(exitFailure)
					default:
						stopping = true
						cancel(fmt.Errorf("signal %s", s))
					}
				}
			}
		},
	}
}

// watchdogInterval reads systemd's WATCHDOG_USEC (for this process only).
func watchdogInterval() time.Duration {
	if pid := os.Getenv("WATCHDOG_PID"); pid != "" && pid != strconv.Itoa(os.Getpid()) {
		return 0
	}
	usec, err := strconv.ParseInt(os.Getenv("WATCHDOG_USEC"), 10, 64)
	if err != nil || usec <= 0 {
		return 0
	}
	return time.Duration(usec) * time.Microsecond
}

// sdNotify sends a notification to systemd when NOTIFY_SOCKET is set.
func sdNotify(state string) {
	addr := os.Getenv("NOTIFY_SOCKET")
	if addr == "" {
		return
	}
	if addr[0] == '@' {
		addr = "\x00" + addr[1:] // abstract socket
	}
	conn, err := net.DialUnix("unixgram", nil, &net.UnixAddr{Name: addr, Net: "unixgram"})
	if err != nil {
		return
	}
	defer conn.Close()
	_, _ = conn.Write([]byte(state))
}
