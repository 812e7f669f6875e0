// Package child stops the processes the dev tools and the tests start
// (redis-server, a dev fleet's pacerd): ask first, then kill, and never
// return before the process is gone, so its socket and files are free.
package child

import (
	"os"
	"os/exec"
	"syscall"
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

// DieWithParent makes c's process receive SIGKILL when the process that
// starts it dies (Linux's parent-death signal), so a test binary killed by
// its timeout or a dev tool killed with SIGKILL leaves no server behind,
// running on with its socket, its files and its CPU. Call it before
// c.Start. (The kernel sends it when the starting thread exits; the Go
// runtime keeps its threads for the process's life.)
func DieWithParent(c *exec.Cmd) {
	if c.SysProcAttr == nil {
		c.SysProcAttr = &syscall.SysProcAttr{}
	}
	c.SysProcAttr.Pdeathsig = syscall.SIGKILL
}
