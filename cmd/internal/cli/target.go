package cli

import (
	"os"
	"path/filepath"

	"github.com/memwatch/memwatch/control"
)

// Which policy a command uses, and which daemon it talks to: one rule
// for every command, lean or not.
//
//  1. --policy;
//  2. else $MEMWATCH_POLICY;
//  3. else, for a user other than root, theirs:
//     $XDG_CONFIG_HOME/memwatch/policy.yaml (~/.config/memwatch/policy.yaml)
//     when it exists;
//  4. else the system's, /etc/memwatch/policy.d.
//
// memwatch init --write with no file writes where the rule looks first:
// the user's file, or, as root, /etc/memwatch/policy.d/memwatch.yaml. A
// client talks only to the daemon that runs that very policy: each answer
// names the daemon's (control.PolicyHeader).

// SystemPolicy is the system service's policy directory.
const SystemPolicy = "/etc/memwatch/policy.d"

// UserPolicy is a user's own policy file.
func UserPolicy() string {
	if x := os.Getenv("XDG_CONFIG_HOME"); x != "" {
		return filepath.Join(x, "memwatch", "policy.yaml")
	}
	home, _ := os.UserHomeDir()
	return filepath.Join(home, ".config", "memwatch", "policy.yaml")
}

// policyRule is the policy this command uses (see above); named says the
// flag or the environment named it; exists that it is there.
func (g *Globals) PolicyRule() (path string, named, exists bool) {
	switch {
	case g.Policy != "":
		path, named = g.Policy, true
	case os.Getenv("MEMWATCH_POLICY") != "":
		path, named = os.Getenv("MEMWATCH_POLICY"), true
	case os.Geteuid() != 0 && fileExists(UserPolicy()):
		path = UserPolicy()
	case os.Geteuid() != 0 && !fileExists(SystemPolicy):
		path = UserPolicy() // neither: where the user's would be
	default:
		path = SystemPolicy
	}
	return path, named, fileExists(path)
}

func fileExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}

// AnnouncedSocket is the socket of the daemon running policy, as it
// announced itself (control.Discover), or, for the system's policy, the
// system service's socket; ok is false when neither is known.
func AnnouncedSocket(policy string) (string, bool) {
	want := control.PolicyID(policy)
	if d, ok := control.Discover(); ok && d.Socket != "" && control.PolicyID(d.Policy) == want {
		return d.Socket, true
	}
	if want == control.PolicyID(SystemPolicy) {
		if fi, err := os.Stat(SystemSocket); err == nil && fi.Mode()&os.ModeSocket != 0 {
			return SystemSocket, true
		}
	}
	return "", false
}

// SystemSocket is the control socket of the system service.
const SystemSocket = control.SystemSocket
