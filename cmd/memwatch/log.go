package main

import (
	"context"
	"errors"

	"github.com/memwatch/memwatch/cmd/internal/cli"
	"github.com/memwatch/memwatch/control"
)

// journal is the daemon of the policy, which log asks for records; when
// none answers, memwatchd (the full binary) reads the journal instead
// (cli.ErrDelegate).
type journal struct {
	ctl *control.Client
	// asked: the daemon answered once (a failure after that is its, not a
	// reason to hand the command over).
	asked bool
}

func (g client) OpenJournal(context.Context) (cli.Journal, error) {
	ctl, ok := g.leanControl()
	if !ok {
		return nil, cli.ErrDelegate
	}
	return &journal{ctl: ctl}, nil
}

func (j *journal) Close() {}

func (j *journal) Read(ctx context.Context, f control.JournalQuery) ([]control.Record, error) {
	recs, err := cli.ReadDaemon(ctx, j.ctl, f)
	switch {
	case err == nil:
		j.asked = true
		return recs, nil
	case errors.Is(err, control.ErrUsage) || j.asked:
		return nil, err
	}
	return nil, cli.ErrDelegate
}

// checkNames: the daemon refuses a name that names nothing itself.
func (j *journal) CheckNames(context.Context, control.JournalQuery) error { return nil }

func (j *journal) Kept(ctx context.Context, f control.JournalQuery) int {
	return cli.KeptDaemon(ctx, j.ctl, f)
}
