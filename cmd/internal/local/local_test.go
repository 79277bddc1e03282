package local

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/memwatch/memwatch/cmd/internal/cli"
)

// TestPolicyIfGivenAnnounced: with no policy of its own, a command takes
// the one this user's running daemon announced, while that policy is
// there; a daemon being stopped whose policy was removed is no daemon
// (the command goes on without a policy, not failing on another's file).
func TestPolicyIfGivenAnnounced(t *testing.T) {
	if _, err := os.Stat(cli.SystemPolicy); err == nil && os.Geteuid() == 0 {
		t.Skip("this machine has a system policy: root's commands use it")
	}
	dir := t.TempDir()
	t.Setenv("XDG_RUNTIME_DIR", filepath.Join(dir, "run"))
	t.Setenv("XDG_CONFIG_HOME", filepath.Join(dir, "config")) // no policy of the user's
	t.Setenv("MEMWATCH_POLICY", "")
	t.Setenv("MEMWATCH_STATE_DIR", "")
	os.MkdirAll(filepath.Join(dir, "run", "memwatch"), 0o700)
	state := filepath.Join(dir, "state")
	os.MkdirAll(state, 0o700)
	pol := filepath.Join(dir, "policy.yaml")
	os.WriteFile(pol, []byte("version: 1\nstores:\n  - name: s\n    layout: session-detail\n    paths: [\""+filepath.Join(dir, "ws", "*")+"\"]\n"), 0o600)
	ann, _ := json.Marshal(map[string]any{"pid": os.Getpid(), "state_dir": state, "socket": filepath.Join(state, "memwatch.sock"), "policy": pol})
	if err := os.WriteFile(filepath.Join(dir, "run", "memwatch", "daemon.json"), ann, 0o600); err != nil {
		t.Fatal(err)
	}
	g := &Env{Globals: &cli.Globals{Stderr: os.Stderr}}
	p, err := g.PolicyIfGiven()
	if err != nil || p == nil || g.Policy != pol {
		t.Fatalf("announced policy there: got %v, %v (policy %q), want it loaded from %s", p, err, g.Policy, pol)
	}
	os.Remove(pol)
	g = &Env{Globals: &cli.Globals{Stderr: os.Stderr}}
	if p, err := g.PolicyIfGiven(); p != nil || err != nil {
		t.Errorf("announced policy removed: got %v, %v, want no policy and no error", p, err)
	}
}
