package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/memwatch/memwatch/cmd/internal/cli"
	"github.com/memwatch/memwatch/control"
	"github.com/memwatch/memwatch/policy"
	"github.com/memwatch/memwatch/spool"
	"github.com/memwatch/memwatch/state"
	"github.com/memwatch/memwatch/ui"
	"github.com/memwatch/memwatch/undo"
	"github.com/memwatch/memwatch/versions"
)

// DefaultUIListen is where memwatch ui serves its pages.
const DefaultUIListen = "127.0.0.1:7878"

func uiCmd(g *globals) *cobra.Command {
	var listen string
	cmd := &cobra.Command{
		Use:   "ui [--listen ADDR]",
		Short: "Serve the review pages: see, search and undo what memwatch did",
		Long: `Serve the review pages in a browser: every store and root, what memwatch
changed and why (with the diff of each change and the archive it came
from), what the agents wrote, an Undo button, a search over the memory
with citations, and the disk and LLM tokens memwatch used. The pages
update live as memwatch works.

It reads the policy and the state directory like memwatch log, whether
or not the daemon runs (run it as the state directory's owner: sudo for
the system service). Undo goes through the daemon when it runs. It
listens on a loopback port (default ` + DefaultUIListen + `) and prints the
address to open, which holds a key: without it the pages answer nothing,
so other local users cannot read them. Stop it with Ctrl-C.

The daemon serves the same pages under /ui/ on its control API when the
policy sets ui: {enabled: true}.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			log, err := g.logger()
			if err != nil {
				return err
			}
			p, err := g.PolicyIfGiven()
			if err != nil {
				return err
			}
			if p == nil {
				return cli.UsageError{Err: errors.New("memwatch ui needs the policy: give --policy (or set MEMWATCH_POLICY)")}
			}
			dir := g.ResolveStateDir(p)
			if _, err := os.Stat(filepath.Join(dir, state.FileName)); err != nil {
				return fmt.Errorf("no journal in %s (is --state-dir or --policy right? run as the state directory's owner): %w", dir, err)
			}
			ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			db, err := state.Open(ctx, dir)
			if err != nil {
				return err
			}
			defer db.Close()
			cfg := ui.Config{StateDir: dir, Policy: func() *policy.Policy { return p }, DB: db, Prefix: "/"}
			if vs, err := versions.OpenReadOnly(ctx, dir); err == nil {
				defer vs.Close()
				cfg.Versions = vs
			}
			if sp, err := spool.OpenReadOnly(ctx, dir); err == nil {
				defer sp.Close()
				cfg.Spool = sp
			}
			ctl := g.Control(p, dir)
			cfg.API = func(ctx context.Context, method, path string, body, out any) error {
				err := ctl.DoJSON(ctx, method, path, body, out)
				if errors.Is(err, control.ErrNoDaemon) {
					return ui.ErrNoDaemon
				}
				return err
			}
			cfg.UndoOffline = func(ctx context.Context, id int64, force bool) (undo.Result, error) {
				return undoOffline(dir, p, id, force, false)
			}
			key := make([]byte, 16)
			if _, err := rand.Read(key); err != nil {
				return err
			}
			cfg.Key = hex.EncodeToString(key)
			srv, err := ui.New(cfg, log)
			if err != nil {
				return err
			}
			l, err := net.Listen("tcp", listen)
			if errors.Is(err, syscall.EADDRINUSE) {
				return fmt.Errorf("ui: %s is in use (another memwatch ui, or another program): give --listen 127.0.0.1:0 for a free port, which it prints", listen)
			}
			if err != nil {
				return fmt.Errorf("ui: listen on %s: %w", listen, err)
			}
			if ip := l.Addr().(*net.TCPAddr).IP; !ip.IsLoopback() {
				log.Warn("memwatch ui listens beyond this machine: anyone who has its address (with the key) reads every store's memory", "listen", l.Addr().String())
			}
			hs := &http.Server{Handler: srv.Handler(), ReadHeaderTimeout: 5 * time.Second, BaseContext: func(net.Listener) context.Context { return ctx }}
			var wg sync.WaitGroup
			wg.Add(2)
			errs := make(chan error, 2)
			go func() { defer wg.Done(); errs <- srv.Run(ctx) }()
			go func() {
				defer wg.Done()
				if err := hs.Serve(l); err != nil && !errors.Is(err, http.ErrServerClosed) {
					errs <- err
				}
			}()
			fmt.Fprintf(g.Stdout, "memwatch ui: open http://%s/?key=%s\n", l.Addr(), cfg.Key)
			g.Flush() // whoever started it reads the address now
			select {
			case <-ctx.Done():
			case err = <-errs:
			}
			stop()
			shut, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			_ = hs.Shutdown(shut)
			cancel()
			wg.Wait()
			return err
		},
	}
	cmd.Flags().StringVar(&listen, "listen", DefaultUIListen, "address to serve the pages on (host:port; loopback unless you mean to share them)")
	return cmd
}
