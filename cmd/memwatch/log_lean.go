//go:build lean

package main

import (
	"context"
	"errors"

	"github.com/memwatch/memwatch/control"
)

// journal is the daemon of the policy, which log asks for records; when
// none answers, memwatchd (the full binary) reads the journal instead
// (errDelegate).
type journal struct {
	ctl *controlClient
	// asked: the daemon answered once (a failure after that is its, not a
	// reason to hand the command over).
	asked bool
}

func (g *globals) openJournal(context.Context) (*journal, error) {
	ctl, ok := g.leanControl()
	if !ok {
		return nil, errDelegate
	}
	return &journal{ctl: ctl}, nil
}

func (j *journal) close() {}

func (j *journal) read(ctx context.Context, f control.JournalQuery) ([]control.Record, error) {
	recs, err := readDaemon(ctx, j.ctl, f)
	switch {
	case err == nil:
		j.asked = true
		return recs, nil
	case errors.Is(err, control.ErrUsage) || j.asked:
		return nil, err
	}
	return nil, errDelegate
}

// checkNames: the daemon refuses a name that names nothing itself.
func (j *journal) checkNames(context.Context, control.JournalQuery) error { return nil }

func (j *journal) kept(ctx context.Context, f control.JournalQuery) int {
	return keptDaemon(ctx, j.ctl, f)
}
