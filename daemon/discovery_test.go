package daemon

import (
	"reflect"
	"testing"

	"github.com/memwatch/memwatch/control"
)

func TestSharedRoots(t *testing.T) {
	theirs := control.Status{Stores: []control.StoreStatus{
		{Name: "claude-code", Roots: []string{"/home/u/.claude/projects/-a", "/home/u/.claude/projects/-b/"}},
		{Name: "codex", Roots: []string{"/home/u/.codex"}},
	}}
	mine := map[string][]string{
		"cc":    {"/home/u/.claude/projects/-b", "/home/u/.claude/projects/-c"},
		"notes": {"/home/u/notes"},
		"codex": {"/home/u/.codex"},
	}
	got := sharedRoots(theirs, mine)
	want := []string{"/home/u/.claude/projects/-b", "/home/u/.codex"}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("sharedRoots = %v, want %v", got, want)
	}
	if got := sharedRoots(control.Status{}, mine); len(got) != 0 {
		t.Errorf("no other daemon's roots: got %v", got)
	}
}
