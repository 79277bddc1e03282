package main

import (
	"bytes"
	"errors"
	"net/http"
	"testing"

	"github.com/memwatch/memwatch/cmd/internal/cli"
	"github.com/memwatch/memwatch/control"
)

// TestUsageExitCodes: every way of calling a command wrongly (a command
// that is not one, too few or too many arguments, a flag it does not
// have) exits 2, as grep's usage errors do, whatever cobra's words.
func TestUsageExitCodes(t *testing.T) {
	home := t.TempDir()
	t.Setenv("HOME", home)
	t.Setenv("XDG_CONFIG_HOME", home+"/.config")
	t.Setenv("XDG_STATE_HOME", home+"/.local/state")
	t.Setenv("MEMWATCH_POLICY", "")
	for _, tc := range []struct {
		args []string
		want int
	}{
		{[]string{"nosuchcommand"}, cli.ExitUsage},
		{[]string{"--policy", "x.yaml", "nosuchcommand"}, cli.ExitUsage},
		{[]string{"recall"}, cli.ExitUsage},
		{[]string{"show"}, cli.ExitUsage},
		{[]string{"show", "a#L1", "b#L2"}, cli.ExitUsage},
		{[]string{"undo"}, cli.ExitUsage},
		{[]string{"status", "a", "b"}, cli.ExitUsage},
		{[]string{"status", "--no-such-flag"}, cli.ExitUsage},
		{[]string{"recall", "-C", "abc", "word"}, cli.ExitUsage},
		{[]string{"version"}, cli.ExitOK},
		{[]string{"help", "recall"}, cli.ExitOK},
	} {
		var out, errb bytes.Buffer
		if got := execute(tc.args, &out, &errb); got != tc.want {
			t.Errorf("memwatch %q: exit %d, want %d\n%s", tc.args, got, tc.want, errb.String())
		}
	}
}

// TestRemoteErrorsByCode: a client knows what the daemon refused by the
// code beside its message, not by its words.
func TestRemoteErrorsByCode(t *testing.T) {
	for _, err := range []error{control.ErrNoSuchLine, control.ErrUnknownLog, control.ErrNotARoot} {
		code := control.ErrorCode(errors.Join(errors.New("show x"), err))
		if code == "" {
			t.Fatalf("%v: no code", err)
		}
		re := &control.RemoteError{Status: http.StatusNotFound, Msg: "anything at all", Code: code}
		if !errors.Is(re, err) || !errors.Is(re, control.ErrNotFound) {
			t.Errorf("code %q: does not unwrap to %v and ErrNotFound", code, err)
		}
		for _, other := range []error{control.ErrNoSuchLine, control.ErrUnknownLog, control.ErrNotARoot} {
			if other != err && errors.Is(re, other) {
				t.Errorf("code %q unwraps to %v too", code, other)
			}
		}
	}
	if re := (&control.RemoteError{Status: http.StatusBadRequest, Msg: "no such line"}); errors.Is(re, control.ErrNoSuchLine) || !errors.Is(re, control.ErrUsage) {
		t.Errorf("a 400 without a code: got %v", re)
	}
}
