// Package child stops the processes the dev tools and the tests start
// (redis-server, a dev fleet's pacerd): ask first, then kill, and never
// return before the process is gone, so its socket and files are free.
package child

import (
	"os"
	"time"
)

// Stop sends sig to p and waits until exited is closed; if that takes
// longer than grace, it kills p and waits again. exited is closed by the
// goroutine that Waits for p, which alone may reap it.
func Stop(p *os.Process, sig os.Signal, exited <-chan struct{}, grace time.Duration) {
	p.Signal(sig)
	select {
	case <-exited:
	case <-time.After(grace):
		p.Kill()
		<-exited
	}
}
