package layout

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/memwatch/memwatch/confine"
)

// TestEachFileFollowsChanges: an evaluation started by changes told file
// by file goes through those files alone, until a change is not told so,
// FullPassEvery has gone by or the evaluation is not one of changes.
func TestEachFileFollowsChanges(t *testing.T) {
	dir := t.TempDir()
	for _, name := range []string{"a.jsonl", "b.jsonl", "c.jsonl", "skip.jsonl", "notes.md"} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte("{}\n"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Mkdir(filepath.Join(dir, "d.jsonl"), 0o700); err != nil {
		t.Fatal(err)
	}
	root, err := confine.Open(dir, confine.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer root.Close()
	now := time.Unix(1_800_000_000, 0)
	scans := &Scans{}
	env := &Env{Scans: scans, Now: func() time.Time { return now }}
	follow := FollowingChanges(context.Background())
	var failOn string
	each := func(ctx context.Context) []string {
		t.Helper()
		var got []string
		err := env.EachFile(ctx, root, "rule", "*.jsonl", "skip.*", func(rel string) error {
			got = append(got, rel)
			if rel == failOn {
				return errors.New("failed")
			}
			return nil
		})
		if err != nil && failOn == "" {
			t.Fatal(err)
		}
		slices.Sort(got)
		return got
	}
	all := []string{"a.jsonl", "b.jsonl", "c.jsonl"}
	for i, step := range []struct {
		name    string
		changed []string // nil: none; empty: the root whole
		ctx     context.Context
		advance time.Duration
		failOn  string
		want    []string
	}{
		{name: "the first evaluation goes through all", ctx: follow, want: all},
		{name: "one changed", changed: []string{"b.jsonl"}, ctx: follow, want: []string{"b.jsonl"}},
		{name: "nothing changed since", ctx: follow, want: nil},
		{name: "an evaluation not of changes goes through all", changed: []string{"b.jsonl"}, ctx: context.Background(), want: all},
		{name: "changes met by a pass of all are not gone through again", ctx: follow, want: nil},
		{name: "only the matching files that are there", changed: []string{"a.jsonl", "gone.jsonl", "d.jsonl", "skip.jsonl", "notes.md"}, ctx: follow, want: []string{"a.jsonl"}},
		{name: "a change not told file by file", changed: []string{}, ctx: follow, want: all},
		{name: "a failed evaluation", changed: []string{"a.jsonl", "c.jsonl"}, ctx: follow, failOn: "a.jsonl", want: []string{"a.jsonl"}},
		{name: "is gone through again", ctx: follow, want: []string{"a.jsonl", "c.jsonl"}},
		{name: "a pass of all every FullPassEvery", changed: []string{"c.jsonl"}, ctx: follow, advance: FullPassEvery, want: all},
		{name: "and after it the changes", changed: []string{"c.jsonl"}, ctx: follow, advance: FullPassEvery - time.Second, want: []string{"c.jsonl"}},
	} {
		now = now.Add(step.advance)
		switch {
		case step.changed == nil:
		case len(step.changed) == 0:
			scans.Changed(root.Path())
		default:
			scans.Changed(root.Path(), step.changed...)
		}
		failOn = step.failOn
		if got := each(step.ctx); !slices.Equal(got, step.want) {
			t.Errorf("step %d, %s: got %q, want %q", i, step.name, got, step.want)
		}
	}
}

// TestChangedBounded: past maxChanged files the root's next evaluation
// goes through all, and what every rule went through is forgotten.
func TestChangedBounded(t *testing.T) {
	s := &Scans{}
	root, key := "/r", "k"
	now := time.Unix(1_800_000_000, 0)
	s.passBegins(root, key)
	s.passed(root, key, 0, true, now)
	for i := range maxChanged {
		s.Changed(root, string(rune('a'+i%26))+string(rune(i)))
	}
	rels, upto, ok := s.changedSince(root, key, now)
	if !ok || len(rels) != maxChanged {
		t.Fatalf("got %d files (ok %v), want %d", len(rels), ok, maxChanged)
	}
	s.passed(root, key, upto, false, now)
	if n := len(s.changed[root].files); n != 0 {
		t.Errorf("got %d files kept after every rule went through them, want 0", n)
	}
	for i := range maxChanged + 1 {
		s.Changed(root, string(rune(i)))
	}
	if _, _, ok := s.changedSince(root, key, now); ok {
		t.Errorf("got the changed files past maxChanged, want a pass of all")
	}
}

// TestChangedBoundedInAll: past maxChangedAll files kept in all roots, a
// root's change is a pass through every file; the count follows what
// passes forget.
func TestChangedBoundedInAll(t *testing.T) {
	s := &Scans{}
	now := time.Unix(1_800_000_000, 0)
	roots := maxChangedAll / maxChanged
	for r := range roots {
		root := fmt.Sprint("/r", r)
		s.passBegins(root, "k")
		s.passed(root, "k", 0, true, now)
		rels := make([]string, maxChanged)
		for i := range rels {
			rels[i] = fmt.Sprint(i)
		}
		s.Changed(root, rels...)
	}
	if s.files != maxChangedAll {
		t.Fatalf("got %d files kept, want %d", s.files, maxChangedAll)
	}
	s.passBegins("/last", "k")
	s.passed("/last", "k", 0, true, now)
	s.Changed("/last", "a.jsonl")
	if _, _, ok := s.changedSince("/last", "k", now); ok {
		t.Errorf("got the changed files past maxChangedAll, want a pass of all")
	}
	_, upto, _ := s.changedSince("/r0", "k", now)
	s.passed("/r0", "k", upto, false, now)
	if want := maxChangedAll - maxChanged; s.files != want {
		t.Errorf("got %d files kept after a root's were gone through, want %d", s.files, want)
	}
	s.Changed("/last", "a.jsonl")
	if rels, _, ok := s.changedSince("/last", "k", now); ok {
		t.Errorf("got %q after a change not followed, want a pass of all", rels)
	}
}

// TestChangedForgottenPastStalePasses: the pass of a rule that will go
// through every file next (a root's earlier identity, a minute old) keeps
// no changed file; one under way keeps those it has not gone through.
func TestChangedForgottenPastStalePasses(t *testing.T) {
	s := &Scans{}
	root := "/r"
	now := time.Unix(1_800_000_000, 0)
	for _, key := range []string{"old", "new"} {
		s.passBegins(root, key)
		s.passed(root, key, 0, true, now)
	}
	now = now.Add(FullPassEvery)
	s.passBegins(root, "new") // "old" is not evaluated again
	s.passed(root, "new", 0, true, now)
	s.Changed(root, "a.jsonl")
	_, upto, ok := s.changedSince(root, "new", now)
	if !ok {
		t.Fatal("got no changed files to follow, want a.jsonl")
	}
	s.passed(root, "new", upto, false, now)
	if n := len(s.changed[root].files); n != 0 || s.files != 0 {
		t.Errorf("got %d files kept (%d in all) past a stale pass, want 0", n, s.files)
	}
	s.passBegins(root, "slow") // a first pass, in slices, under way
	s.Changed(root, "b.jsonl")
	_, upto, _ = s.changedSince(root, "new", now)
	s.passed(root, "new", upto, false, now)
	if rels, _, _ := s.changedSince(root, "slow", now); len(rels) != 0 {
		t.Errorf("got %q to follow for a pass under way, want a pass of all", rels)
	}
	if _, ok := s.changed[root].files["b.jsonl"]; !ok {
		t.Errorf("got b.jsonl forgotten while a pass under way has not gone through it")
	}
}
