package daemon

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"

	"github.com/pmezard/go-difflib/difflib"

	"github.com/memwatch/memwatch/compact"
	"github.com/memwatch/memwatch/layout"
	"github.com/memwatch/memwatch/rewrite"
	"github.com/memwatch/memwatch/state"
)

// CompactRequest is the body of POST /v1/compact.
type CompactRequest struct {
	Path      string `json:"path"`                // a root, or a file in one
	Compactor string `json:"compactor,omitempty"` // override: heuristic or llm
	DryRun    bool   `json:"dry_run,omitempty"`
}

// CompactResult says what a compaction did or would do.
type CompactResult struct {
	Store          string `json:"store"`
	Root           string `json:"root"`
	Target         string `json:"target"`
	Compactor      string `json:"compactor"`
	DryRun         bool   `json:"dry_run"`
	Verdict        string `json:"verdict"` // accepted, rejected: <reason>, nothing to change
	Diff           string `json:"diff,omitempty"`
	InputTokens    int    `json:"input_tokens_estimate"`
	Tokens         int64  `json:"tokens_used"`
	BeforeSize     int    `json:"before_size"`
	AfterSize      int    `json:"after_size"`
	Outcome        string `json:"outcome,omitempty"`
	Archive        string `json:"archive,omitempty"`
	Journal        int64  `json:"journal,omitempty"`
	FallbackReason string `json:"note,omitempty"`
}

// Compact runs a layout's compaction for the root containing req.Path now.
// While the daemon runs it takes the root's job slot, so it cannot race a job.
func (d *Daemon) Compact(ctx context.Context, req CompactRequest) (CompactResult, error) {
	path, err := filepath.Abs(req.Path)
	if err != nil {
		return CompactResult{}, err
	}
	rt, rootPath := d.storeFor(path)
	if rt == nil {
		return CompactResult{}, fmt.Errorf("compact %s: no store root contains it; roots come from the policy's paths globs", path)
	}
	root, err := rt.store.OpenRoot(rootPath)
	if err != nil {
		return CompactResult{}, fmt.Errorf("compact: %w", err)
	}
	defer root.Close()
	lc, ok := rt.layout.(layout.Compactable)
	if !ok {
		return CompactResult{}, fmt.Errorf("compact: layout %s has no compaction", rt.layout.Name())
	}
	env := *rt.env
	compactor := rt.store.Compactor
	switch req.Compactor {
	case "":
	case "heuristic":
		env.LLM, compactor = nil, "heuristic"
	case "llm":
		if env.LLM == nil {
			ep, ok := d.policy.LLM[rt.store.LLM]
			if !ok {
				return CompactResult{}, fmt.Errorf("compact: --compactor llm needs endpoint %q under llm: in the policy", rt.store.LLM)
			}
			if env.LLM, err = compact.NewClient(ep, d.db, d.log); err != nil {
				return CompactResult{}, err
			}
		}
		compactor = "llm"
	default:
		return CompactResult{}, fmt.Errorf("compact: --compactor must be heuristic or llm, not %q", req.Compactor)
	}
	rreq, rec := lc.CompactRequest(&env, root, true)
	res := CompactResult{Store: rt.store.Name, Root: rootPath, Target: rreq.Target, Compactor: compactor, DryRun: req.DryRun}
	do := func(ctx context.Context) error {
		if req.DryRun {
			return dryRun(ctx, rreq, rec, &res)
		}
		out, err := d.rw.Apply(ctx, rreq, rec)
		if err != nil {
			return err
		}
		res.Outcome, res.Archive, res.Journal, res.Tokens = out.Status, out.Archive, out.Record, rec.Tokens
		res.BeforeSize, res.AfterSize, res.FallbackReason = int(rec.BeforeSize), int(rec.AfterSize), rec.Reason
		res.InputTokens = compact.EstimateTokensOf(int(rec.BeforeSize))
		res.Verdict = verdict(out)
		return nil
	}
	if d.running.Load() {
		return res, d.engine.Exclusive(ctx, rt.store.Name, rootPath, "compact-now", do)
	}
	return res, do(ctx)
}

func verdict(out rewrite.Outcome) string {
	switch out.Status {
	case state.Done:
		return "accepted"
	case state.Rejected:
		return "rejected: " + out.Reason
	}
	return "nothing to change"
}

// dryRun computes the new content and its guard verdict; it writes nothing.
func dryRun(ctx context.Context, req rewrite.Request, rec *state.Record, res *CompactResult) error {
	old, err := req.Root.ReadFile(req.Target)
	if err != nil {
		return fmt.Errorf("compact: %w", err)
	}
	res.BeforeSize, res.InputTokens = len(old), compact.EstimateTokens(string(old))
	out, err := req.Compute(layout.WithDryRun(ctx), old)
	res.Tokens, res.FallbackReason = rec.Tokens, rec.Reason
	var rej *rewrite.Rejected
	switch {
	case errors.Is(err, rewrite.ErrUnchanged):
		res.Verdict, res.AfterSize = "nothing to change", len(old)
		return nil
	case errors.As(err, &rej):
		res.Verdict, res.AfterSize = "rejected: "+rej.Reason, len(old)
		return nil
	case err != nil:
		return err
	}
	res.Verdict, res.AfterSize = "accepted", len(out)
	res.Diff, _ = difflib.GetUnifiedDiffString(difflib.UnifiedDiff{
		A: difflib.SplitLines(string(old)), B: difflib.SplitLines(string(out)),
		FromFile: req.Target, ToFile: req.Target + " (compacted)", Context: 2,
	})
	return nil
}

// storeFor finds the store and root containing path.
func (d *Daemon) storeFor(path string) (*storeRT, string) {
	d.mu.RLock()
	defer d.mu.RUnlock()
	for _, s := range d.policy.Stores {
		for _, r := range s.Roots() {
			if path == r || strings.HasPrefix(path, r+string(filepath.Separator)) {
				return d.stores[s.Name], r
			}
		}
	}
	return nil, ""
}
