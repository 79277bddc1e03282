package background

import (
	"slices"
	"testing"
)

func TestPassesAnotherAfterAChangeDuringOne(t *testing.T) {
	p := NewPasses()
	// A quiet pass: nothing follows.
	p.Begin("r")
	if p.End("r", false) {
		t.Error("a pass with no change during it asked for another")
	}
	// A pass in slices; a change merged into its next slice: one more
	// pass, and only one.
	p.Changed("r", false)
	p.Begin("r")
	p.End("r", true)
	p.Changed("r", false)
	p.Begin("r")
	if !p.End("r", false) {
		t.Fatal("a change during a pass in slices: no new pass")
	}
	p.Begin("r")
	if p.End("r", false) {
		t.Error("the pass after it asked for yet another")
	}
	// A capture dropped during a pass: not captured until a pass that
	// began after it ends.
	p.Begin("r")
	p.End("r", true)
	p.Changed("r", true)
	if got := p.Uncaptured(); !slices.Equal(got, []string{"r"}) {
		t.Errorf("uncaptured %v, want [r]", got)
	}
	p.Begin("r")
	if !p.End("r", false) {
		t.Error("a drop during a pass: no new pass")
	}
	if got := p.Uncaptured(); len(got) != 1 {
		t.Errorf("the pass that began before the drop covered it: uncaptured %v", got)
	}
	p.Begin("r")
	p.End("r", false)
	if got := p.Uncaptured(); len(got) != 0 {
		t.Errorf("after a whole pass: uncaptured %v, want none", got)
	}
	if len(p.gen) != 0 || len(p.from) != 0 || len(p.inPass) != 0 {
		t.Errorf("a quiet root is still remembered: %v %v %v", p.gen, p.from, p.inPass)
	}
}
