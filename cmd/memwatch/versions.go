package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/memwatch/memwatch/cmd/internal/cli"
	"github.com/memwatch/memwatch/control"
)

// versions asks the daemon of the policy for the versions of a file (or
// the files with versions of a root); a host's file (on a central node),
// or no daemon answering, is memwatchd's (cli.ErrDelegate).
func (g client) Versions(ctx context.Context, host, arg string, o cli.Listing) error {
	if host != "" || strings.Contains(arg, ":") {
		return cli.ErrDelegate
	}
	ctl, ok := g.leanControl()
	if !ok {
		return cli.ErrDelegate
	}
	path, err := filepath.Abs(arg)
	if err != nil {
		return err
	}
	if fi, err := os.Stat(path); err == nil && fi.IsDir() {
		files, err := ctl.VersionedFiles(ctx, path)
		if err != nil {
			return delegateUnanswered(err)
		}
		for _, f := range files {
			fmt.Fprintln(g.Stdout, f)
		}
		return nil
	}
	var vs []control.Version
	if err := ctl.Versions(ctx, path, &vs); err != nil {
		return delegateUnanswered(err)
	}
	return cli.PrintVersions(g.Globals, path, vs, o)
}

// delegateUnanswered hands the command to memwatchd when no daemon
// answered; the daemon's own answer (a refusal) is the command's.
func delegateUnanswered(err error) error {
	if errors.Is(err, control.ErrNoDaemon) {
		return cli.ErrDelegate
	}
	return err
}
