package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	"github.com/memwatch/memwatch/answer"
	"github.com/memwatch/memwatch/cmd/internal/cli"
	"github.com/memwatch/memwatch/control"
	"github.com/memwatch/memwatch/policy"
	"github.com/memwatch/memwatch/state"
)

// journal is where log reads records: the state's database when this
// user can open it, else the daemon (which gives the records of the
// caller's own roots).
type journal struct {
	db  *state.DB
	p   *policy.Policy
	ctl *control.Client
}

func (g *globals) OpenJournal(ctx context.Context) (cli.Journal, error) {
	p, err := g.ReadPolicy()
	if err != nil {
		return nil, err
	}
	dir := g.ResolveStateDir(p)
	if stateUnreadable(dir) {
		return &journal{p: p, ctl: g.Control(p, dir)}, nil
	}
	if _, err := os.Stat(filepath.Join(dir, state.FileName)); err != nil {
		return nil, fmt.Errorf("no journal in %s (is --state-dir or --policy right?): %w", dir, err)
	}
	db, err := state.Open(ctx, dir)
	if err != nil {
		return nil, err
	}
	return &journal{db: db, p: p}, nil
}

func (j *journal) Close() {
	if j.db != nil {
		j.db.Close()
	}
}

func (j *journal) Read(ctx context.Context, f control.JournalQuery) ([]control.Record, error) {
	if j.db != nil {
		return j.db.Journal(ctx, filterOf(f))
	}
	recs, err := cli.ReadDaemon(ctx, j.ctl, f)
	if err != nil {
		return nil, fmt.Errorf("no journal you can read here, and the daemon did not answer: %w", err)
	}
	return recs, nil
}

// checkNames: an empty answer to a --store or --rule that names nothing
// is a usage error (the daemon says so itself).
func (j *journal) CheckNames(ctx context.Context, f control.JournalQuery) error {
	if j.db == nil || (f.Store == "" && f.Rule == "" && f.Root == "") {
		return nil
	}
	if err := answer.CheckJournalNames(ctx, j.db, j.p, f.Store, f.Rule); err != nil {
		return cli.UsageError{Err: err}
	}
	if err := answer.CheckJournalRoot(j.p, f.Root, nil); err != nil {
		return cli.UsageError{Err: err}
	}
	return nil
}

// kept counts the kept copies of what f selects (0 when f lists them).
func (j *journal) Kept(ctx context.Context, f control.JournalQuery) int {
	if j.db == nil {
		return cli.KeptDaemon(ctx, j.ctl, f)
	}
	if f.Rule == control.RuleKept {
		return 0
	}
	all, err := j.db.Journal(ctx, state.Filter{Store: f.Store, Root: f.Root, Rule: control.RuleKept, Limit: 100_000})
	if err != nil {
		return 0
	}
	return len(all)
}

// filterOf is the state's filter for a journal query.
func filterOf(q control.JournalQuery) state.Filter {
	return state.Filter{Store: q.Store, Root: q.Root, Rule: q.Rule, Since: q.Since, Until: q.Until, AfterID: q.AfterID, Limit: q.Limit}
}
