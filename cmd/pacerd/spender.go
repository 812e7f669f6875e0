package main

import (
	"github.com/pacer/pacer/daemon"
	"github.com/pacer/pacer/transport"
)

// The socket server declares what it needs of a daemon (transport's
// interfaces, at the consumer); pacerd is where the two meet, so the check
// that daemon.Daemon has it all, waiting SPENDs included, lives here.
var _ transport.WaitingSpender = (*daemon.Daemon)(nil)
