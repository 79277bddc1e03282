// Package daemontest runs a real memwatch daemon in-process for tests of
// layouts and the control API: real watcher, real state store, real socket.
package daemontest

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/memwatch/memwatch/daemon"
	"github.com/memwatch/memwatch/layout/registry"
	"github.com/memwatch/memwatch/policy"
)

// Daemon is a running daemon.
type Daemon struct {
	StateDir string
	Socket   string
	stop     func()
}

// Stop stops the daemon and waits for it; it is also done at cleanup.
func (d *Daemon) Stop() { d.stop() }

// Run starts a daemon on the policy text with the state directory (a new
// one when empty) and waits until its control socket answers.
func Run(t testing.TB, src, stateDir string) *Daemon {
	t.Helper()
	p, err := policy.Parse("policy.yaml", []byte(src), registry.Specs())
	if err != nil {
		t.Fatal(err)
	}
	if stateDir == "" {
		stateDir = t.TempDir()
	}
	sock := filepath.Join(stateDir, "s.sock")
	dm, err := daemon.New(daemon.Config{Policy: p, PolicyPath: "policy.yaml", StateDir: stateDir, Socket: sock},
		slog.New(slog.NewTextHandler(t.Output(), nil)))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- dm.Run(ctx) }()
	var once sync.Once
	d := &Daemon{StateDir: stateDir, Socket: sock, stop: func() {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil {
				t.Error(err)
			}
		})
	}}
	t.Cleanup(d.stop)
	WaitFor(t, "the control socket", 10*time.Second, func() bool { _, err := os.Stat(sock); return err == nil })
	return d
}

// WaitFor polls cond until it holds, failing the test after timeout.
// MinWait is the least time WaitFor waits before it fails.
const MinWait = time.Minute

func WaitFor(t testing.TB, what string, timeout time.Duration, cond func() bool) {
	t.Helper()
	// A wait on a condition: the timeout only bounds a failure, so it is
	// generous whatever the caller asks (a loaded machine is slow, not
	// wrong); a test that promises a time measures it itself.
	timeout = max(timeout, MinWait)
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", timeout, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
