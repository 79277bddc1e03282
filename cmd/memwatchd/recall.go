package main

import (
	"context"
	"syscall"

	"github.com/memwatch/memwatch/answer"
	"github.com/memwatch/memwatch/cmd/internal/cli"
	"github.com/memwatch/memwatch/confine"
	"github.com/memwatch/memwatch/control"
	"github.com/memwatch/memwatch/fleet/mirror"
	"github.com/memwatch/memwatch/layout/registry"
	"github.com/memwatch/memwatch/policy"
	"github.com/memwatch/memwatch/recall"
	"github.com/memwatch/memwatch/scope"
	"github.com/memwatch/memwatch/spool"
)

// answerRecall has the daemon of the policy answer req when it runs (its
// warm index, within what this user may read), else searches here, as
// this user: the same answer.Recaller either way.
func (g *globals) AnswerRecall(ctx context.Context, req control.RecallRequest) (control.RecallResponse, error) {
	p, err := g.readPolicy()
	if err != nil {
		return control.RecallResponse{}, err
	}
	stateDir := g.resolveStateDir(p)
	if res, ok, err := cli.AskRecall(ctx, g.control(p, stateDir), req); ok {
		return res, err
	}
	x := &answer.Recaller{Policy: p, Plain: true, Cache: &scope.Cache{}}
	if x.Policy == nil {
		x.Policy = &policy.Policy{}
	}
	for _, s := range x.Policy.Stores {
		if _, ok := registry.SearchSources(s); !ok {
			continue
		}
		for _, id := range s.RootIDs() {
			x.Roots = append(x.Roots, scope.Candidate{Store: s, ID: id})
		}
	}
	x.Open = func(s *policy.Store, path string) (*confine.Root, error) {
		return confine.Open(path, confine.Options{Within: s.Within()})
	}
	// What this user may read: the kernel decides.
	x.Reaches = func(_ *policy.Store, id confine.ID) bool { return syscall.Access(id.Path, 0x4|0x1) == nil }
	idx := recall.ReadableIndex(stateDir)
	sp, err := spool.OpenReadOnly(ctx, stateDir)
	if err == nil {
		defer sp.Close()
	} else {
		sp = nil
	}
	x.Options = func(o *recall.Options) {
		o.Index = idx
		if sp != nil {
			o.Generation = sp.Gens(ctx).Of
			o.Held = sp.SearchHeld
		}
	}
	roots, res, done, err := x.Resolve(ctx, req)
	defer done()
	if err != nil {
		return res, err
	}
	// A central node (fleet:) searches its copy of the hosts it follows.
	if p != nil && p.Fleet != nil && req.Dir == "" && req.Store == "" && (req.All || req.Host != "" || len(p.Stores) == 0) {
		var want func(string, int) bool
		if req.Host != "" {
			roots = nil
			want = func(h string, _ int) bool { return h == req.Host }
		}
		fr, fdone, errs := mirror.FleetRoots(stateDir, want)
		defer fdone()
		for _, err := range errs {
			g.warnf("recall: %v", err)
		}
		if req.Host != "" && len(fr) == 0 {
			return res, control.Usagef("no host %q is followed here (memwatch status lists the hosts)", req.Host)
		}
		roots = append(roots, fr...)
	} else if req.Host != "" {
		return res, control.Usagef("--host searches a host a central node follows: give the central node's policy (one with fleet:), and no --dir or --store")
	}
	return x.Search(ctx, req, roots, res)
}
