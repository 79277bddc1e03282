package main

import (
	"context"

	"github.com/memwatch/memwatch/cmd/internal/cli"
	"github.com/memwatch/memwatch/control"
)

// fileStatus: a memory file's structure is memwatchd's.
func (g client) FileStatus(string, bool) error { return cli.ErrDelegate }

// daemonStatus asks the daemon of the policy how it is; when none
// answers, memwatchd says so (cli.ErrDelegate).
func (g client) DaemonStatus(ctx context.Context) (control.Status, error) {
	ctl, ok := g.leanControl()
	if !ok {
		return control.Status{}, cli.ErrDelegate
	}
	st, err := ctl.Status(ctx)
	return st, delegateUnanswered(err)
}
