//go:build lean

package main

import (
	"context"

	"github.com/memwatch/memwatch/control"
)

// answerRecall has the daemon of the policy answer req; when none runs,
// memwatchd (the full binary) searches instead (errDelegate).
func (g *globals) answerRecall(ctx context.Context, req control.RecallRequest) (control.RecallResponse, error) {
	ctl, ok := g.leanControl()
	if !ok {
		return control.RecallResponse{}, errDelegate
	}
	if res, ok, err := askRecall(ctx, ctl, req); ok {
		return res, err
	}
	return control.RecallResponse{}, errDelegate
}
