package answer

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"strings"

	"github.com/memwatch/memwatch/control"
	"github.com/memwatch/memwatch/layout/registry"
	"github.com/memwatch/memwatch/policy"
	"github.com/memwatch/memwatch/rewrite"
	"github.com/memwatch/memwatch/state"
)

// CheckJournalNames refuses a store or rule that names nothing: neither a
// store of the policy (p, when one is loaded) nor a store or rule the
// journal has ever recorded, nor a rule of the safe rewrite or of a
// layout in use (valid before it ever acted).
func CheckJournalNames(ctx context.Context, db *state.DB, p *policy.Policy, store, rule string) error {
	stores, rules, err := db.JournalNames(ctx)
	if err != nil {
		return err
	}
	layouts := registry.Names()
	if p != nil {
		layouts = nil
		for _, s := range p.Stores {
			if !slices.Contains(stores, s.Name) {
				stores = append(stores, s.Name)
			}
			layouts = append(layouts, s.Layout)
		}
	}
	for _, r := range []string{rewrite.RuleKept, rewrite.RuleRestore, "undo"} {
		if !slices.Contains(rules, r) {
			rules = append(rules, r)
		}
	}
	for _, name := range layouts {
		if l, ok := registry.For(name); ok {
			for _, r := range l.Rules() {
				if !slices.Contains(rules, r.Name) {
					rules = append(rules, r.Name)
				}
			}
		}
	}
	slices.Sort(rules)
	if store != "" && !slices.Contains(stores, store) {
		return fmt.Errorf("store %s: no such store (known: %s)", control.Clip(store), strings.Join(stores, ", "))
	}
	if rule != "" && !slices.Contains(rules, rule) {
		return fmt.Errorf("rule %s: no such rule (known: %s)", control.Clip(rule), strings.Join(rules, ", "))
	}
	return nil
}

// CheckJournalRoot says why --root names nothing: no store of the policy
// (of those reaches says the caller may know of; nil: every one) has it
// as a root. A root the journal holds records of is never refused here.
func CheckJournalRoot(p *policy.Policy, root string, reaches func(*policy.Store) bool) error {
	if p == nil || root == "" {
		return nil
	}
	for _, s := range p.Stores {
		if s.MatchesRoot(filepath.Clean(root)) && (reaches == nil || reaches(s)) {
			return nil
		}
	}
	return fmt.Errorf("root %s: %w you reach (memwatch status lists them)", control.Clip(root), control.ErrNotARoot)
}
