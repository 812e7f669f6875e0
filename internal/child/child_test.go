package child_test

import (
	"bufio"
	"os/exec"
	"syscall"
	"testing"
	"time"

	"github.com/pacer/pacer/internal/child"
)

// start runs a shell script, waits for its first line ("ready": it has set
// up what it means to), and closes the returned channel when it exits.
func start(t *testing.T, script string) (*exec.Cmd, <-chan struct{}) {
	t.Helper()
	c := exec.Command("sh", "-c", script)
	out, err := c.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	if line, err := bufio.NewReader(out).ReadString('\n'); line != "ready\n" {
		t.Fatalf("the script said %q, %v; want ready", line, err)
	}
	done := make(chan struct{})
	go func() { c.Wait(); close(done) }()
	return c, done
}

// A process that honours the signal stops on it; one that ignores it is
// killed once the grace is over. Either way Stop returns only once it is
// gone.
func TestStop(t *testing.T) {
	c, done := start(t, "echo ready; exec sleep 60")
	child.Stop(c.Process, syscall.SIGTERM, done, time.Minute)
	if ws := c.ProcessState.Sys().(syscall.WaitStatus); !ws.Signaled() || ws.Signal() != syscall.SIGTERM {
		t.Errorf("sleep ended with %v, want SIGTERM", c.ProcessState)
	}

	// The trap is set before the script says it is ready, so the signal
	// cannot arrive before it.
	c, done = start(t, `trap "" TERM; echo ready; while :; do sleep 1; done`)
	child.Stop(c.Process, syscall.SIGTERM, done, 200*time.Millisecond)
	if ws := c.ProcessState.Sys().(syscall.WaitStatus); !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
		t.Errorf("a process ignoring SIGTERM ended with %v, want SIGKILL", c.ProcessState)
	}
}
