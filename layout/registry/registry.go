// Package registry is the one list of the layouts this build implements.
// The policy decoder learns their names and options from Specs, the daemon
// and the commands find a store's layout with For.
package registry

import (
	"github.com/memwatch/memwatch/layout"
	"github.com/memwatch/memwatch/layout/apprecords"
	"github.com/memwatch/memwatch/layout/factsepisodes"
	"github.com/memwatch/memwatch/layout/memoryhistory"
	"github.com/memwatch/memwatch/layout/nowhistory"
	"github.com/memwatch/memwatch/layout/sessiondetail"
	"github.com/memwatch/memwatch/policy"
	"github.com/memwatch/memwatch/recall"
)

// All returns every layout, in the order the documentation lists them.
func All() []layout.Layout {
	return []layout.Layout{
		nowhistory.Layout{},
		factsepisodes.Layout{},
		memoryhistory.Layout{},
		sessiondetail.Layout{},
		apprecords.Layout{},
	}
}

// For returns the layout named name.
func For(name string) (layout.Layout, bool) {
	for _, l := range All() {
		if l.Name() == name {
			return l, true
		}
	}
	return nil, false
}

// Names lists the layouts' names, in documentation order.
func Names() []string {
	var out []string
	for _, l := range All() {
		out = append(out, l.Name())
	}
	return out
}

// Specs is what policy.Load and policy.Parse need of the layouts.
func Specs() []policy.LayoutSpec {
	var out []policy.LayoutSpec
	for _, l := range All() {
		out = append(out, policy.LayoutSpec{Name: l.Name(), NewOptions: l.NewOptions})
	}
	return out
}

// SearchSources is what a store's layout makes searchable by recall; false
// when it has nothing to search.
func SearchSources(s *policy.Store) ([]recall.Source, bool) {
	l, ok := For(s.Layout)
	if !ok {
		return nil, false
	}
	sl, ok := l.(layout.Searchable)
	if !ok {
		return nil, false
	}
	return sl.Sources(s), true
}

// LogGlobs are the globs of a store's session logs, relative to a root
// (none when its layout reads no logs).
func LogGlobs(s *policy.Store) []string {
	l, ok := For(s.Layout)
	if !ok {
		return nil
	}
	sl, ok := l.(layout.SessionLogs)
	if !ok {
		return nil
	}
	var out []string
	for _, src := range sl.Logs(s) {
		if src.Glob != "" {
			out = append(out, src.Glob)
		}
	}
	return out
}
