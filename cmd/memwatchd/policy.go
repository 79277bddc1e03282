package main

import (
	"context"

	"github.com/memwatch/memwatch/state"
)

// commandContext is what every command runs in: what a command does is
// journaled as manual; the daemon marks each of its jobs with what
// started it.
func commandContext() context.Context { return state.WithTrigger(context.Background(), "manual") }
