package main

import (
	"github.com/memwatch/memwatch/control"
)

// The daemon's typed client (control.Client) under the names the
// commands use.
var errNoDaemon = control.ErrNoDaemon

type controlClient = control.Client

func newControl(socket string) *controlClient { return control.NewClient(socket) }
