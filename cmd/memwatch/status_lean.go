//go:build lean

package main

import (
	"context"

	"github.com/memwatch/memwatch/control"
)

// fileStatus: a memory file's structure is memwatchd's.
func (g *globals) fileStatus(string, bool) error { return errDelegate }

// daemonStatus asks the daemon of the policy how it is; when none
// answers, memwatchd says so (errDelegate).
func (g *globals) daemonStatus(ctx context.Context) (control.Status, error) {
	ctl, ok := g.leanControl()
	if !ok {
		return control.Status{}, errDelegate
	}
	st, err := ctl.Status(ctx)
	return st, delegateUnanswered(err)
}
