package answer

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/memwatch/memwatch/confine"
	"github.com/memwatch/memwatch/control"
	"github.com/memwatch/memwatch/layout/registry"
	"github.com/memwatch/memwatch/policy"
	"github.com/memwatch/memwatch/scope"
)

// TestResolveKeepsTheNewestRoots: a search over more roots than it opens
// searches the most recently changed ones, whatever their paths' order,
// and counts the rest as left out.
func TestResolveKeepsTheNewestRoots(t *testing.T) {
	base := t.TempDir()
	p, err := policy.Parse("policy.yaml", []byte(fmt.Sprintf("version: 1\nstores:\n  - name: sessions\n    layout: session-detail\n    paths: [%q]\n", filepath.Join(base, "*"))), registry.Specs())
	if err != nil {
		t.Fatal(err)
	}
	s := p.Stores[0]
	var cands []scope.Candidate
	start := time.Now().Add(-time.Hour)
	for i := range 6 {
		dir := filepath.Join(base, fmt.Sprintf("s%d", i))
		if err := os.Mkdir(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		// s0 is the newest: the paths' order is the oldest last.
		at := start.Add(time.Duration(6-i) * time.Minute)
		if err := os.Chtimes(dir, at, at); err != nil {
			t.Fatal(err)
		}
		cands = append(cands, scope.Candidate{Store: s, ID: confine.ID{Path: dir}})
	}
	slices.Reverse(cands) // discovered oldest first
	x := &Recaller{Policy: p, Roots: cands, MaxRoots: 3, Open: func(s *policy.Store, path string) (*confine.Root, error) { return s.OpenRoot(path) }}
	roots, res, done, err := x.Resolve(context.Background(), control.RecallRequest{All: true})
	if err != nil {
		t.Fatal(err)
	}
	defer done()
	var got []string
	for _, r := range roots {
		got = append(got, filepath.Base(r.Root.Path()))
	}
	if want := []string{"s0", "s1", "s2"}; !slices.Equal(got, want) {
		t.Errorf("roots searched = %v, want %v (the newest)", got, want)
	}
	if res.Skipped != 3 {
		t.Errorf("skipped = %d, want 3", res.Skipped)
	}
}
