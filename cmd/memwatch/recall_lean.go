//go:build lean

package main

import (
	"context"

	"github.com/memwatch/memwatch/control"
)

// answerRecall has the daemon of the policy answer req; when none runs,
// memwatchd (the full binary) searches instead (errDelegate).
func (g *globals) answerRecall(ctx context.Context, req control.RecallRequest) (control.RecallResponse, error) {
	p, err := g.policyIfGiven()
	if err != nil {
		return control.RecallResponse{}, err
	}
	if res, ok, err := askRecall(ctx, socketPath(p, g.resolveStateDir(p)), req); ok {
		return res, err
	}
	return control.RecallResponse{}, errDelegate
}
