package main

import (
	"path/filepath"
	"testing"

	"github.com/memwatch/memwatch/policy"
)

// A daemon binds its own socket, never the system service's: a user's
// daemon started while the system service runs (memwatch install --user
// beside the package) must not try /run/memwatch/memwatch.sock.
func TestListenSocketIsTheDaemonsOwn(t *testing.T) {
	state := t.TempDir()
	named := &policy.Policy{}
	named.Control.Socket = "/tmp/x.sock"
	for _, tc := range []struct {
		name, runtimeDir string
		p                *policy.Policy
		want             string
	}{
		{"state dir", "", nil, filepath.Join(state, "memwatch.sock")},
		{"policy", "", named, "/tmp/x.sock"},
		{"systemd runtime dir", "/run/memwatch", nil, "/run/memwatch/memwatch.sock"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv("RUNTIME_DIRECTORY", tc.runtimeDir)
			if got := listenSocket(tc.p, state); got != tc.want {
				t.Errorf("listenSocket: got %q, want %q", got, tc.want)
			}
		})
	}
}
