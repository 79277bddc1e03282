package main

import (
	"context"

	"github.com/memwatch/memwatch/cmd/internal/cli"
	"github.com/memwatch/memwatch/control"
)

// answerRecall has the daemon of the policy answer req; when none runs,
// memwatchd (the full binary) searches instead (cli.ErrDelegate).
func (g client) AnswerRecall(ctx context.Context, req control.RecallRequest) (control.RecallResponse, error) {
	ctl, ok := g.leanControl()
	if !ok {
		return control.RecallResponse{}, cli.ErrDelegate
	}
	if res, ok, err := cli.AskRecall(ctx, ctl, req); ok {
		return res, err
	}
	return control.RecallResponse{}, cli.ErrDelegate
}
