package cli

import (
	"bytes"
	"strings"
	"testing"

	"github.com/spf13/cobra"
)

// TestGroupRefusesUnknownCommand: a command that only groups others
// refuses a word naming none of them (exit 2, as the top level does)
// rather than printing its help and exiting 0.
func TestGroupRefusesUnknownCommand(t *testing.T) {
	ran := false
	prog := Program{Commands: func(root *cobra.Command, g *Globals) {
		group := &cobra.Command{Use: "state", Short: "the state directory"}
		group.AddCommand(&cobra.Command{Use: "restore", Short: "rebuild it", RunE: func(*cobra.Command, []string) error { ran = true; return nil }})
		root.AddCommand(group)
	}}
	for _, tc := range []struct {
		args []string
		code int
		says string
	}{
		{[]string{"state", "migrate"}, ExitUsage, `unknown command "migrate" for "memwatch state"`},
		{[]string{"state", "resotre"}, ExitUsage, "did you mean restore?"},
		{[]string{"state"}, ExitOK, "Available Commands"},
		{[]string{"state", "--help"}, ExitOK, "Available Commands"},
		{[]string{"state", "restore"}, ExitOK, ""},
		{[]string{"frobnicate"}, ExitUsage, "unknown command"},
	} {
		var out bytes.Buffer
		ran = false
		code := Execute(prog, tc.args, &out, &out)
		if code != tc.code || !strings.Contains(out.String(), tc.says) {
			t.Errorf("%v: exit %d, want %d saying %q\n%s", tc.args, code, tc.code, tc.says, out.String())
		}
		if want := len(tc.args) == 2 && tc.args[1] == "restore"; ran != want {
			t.Errorf("%v: restore ran %v, want %v", tc.args, ran, want)
		}
	}
}
