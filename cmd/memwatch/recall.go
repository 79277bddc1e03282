package main

import (
	"context"

	"github.com/memwatch/memwatch/cmd/internal/cli"
	"github.com/memwatch/memwatch/control"
)

// AnswerRecall has the daemon of the policy answer req; when none runs,
// memwatch-search (or memwatchd) searches instead (cli.ErrDelegate).
func (g client) AnswerRecall(ctx context.Context, req control.RecallRequest) (control.RecallResponse, error) {
	if ctl, ok := g.leanControl(); ok {
		if res, ok, err := cli.AskRecall(ctx, ctl, req); ok {
			return res, err
		}
	}
	g.d.search = true
	return control.RecallResponse{}, cli.ErrDelegate
}
