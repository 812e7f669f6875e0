package redisproc_test

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/pacer/pacer/internal/redisproc"
)

// The process the helper below runs in: it starts a server, prints its
// pid and waits to be killed.
func init() {
	if os.Getenv("REDISPROC_ORPHAN_HELPER") == "" {
		return
	}
	s, err := redisproc.Start(context.Background(), redisproc.Options{})
	if err != nil {
		fmt.Println("error", err)
		os.Exit(1)
	}
	pid, err := s.Pid()
	if err != nil {
		fmt.Println("error", err)
		os.Exit(1)
	}
	fmt.Println("pid", pid)
	select {}
}

// A process that starts a redis-server and is SIGKILLed (a test binary
// past its -timeout, a dev tool killed) takes the server with it: none is
// left running on its own, holding its socket, files and CPU.
func TestServerDiesWithItsStarter(t *testing.T) {
	if _, err := redisproc.Binary(""); err != nil {
		t.Fatal(err)
	}
	c := exec.Command(os.Args[0], "-test.run=^$")
	c.Env = append(os.Environ(), "REDISPROC_ORPHAN_HELPER=1")
	out, err := c.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	line, err := bufio.NewReader(out).ReadString('\n')
	pid, perr := strconv.Atoi(strings.TrimSpace(strings.TrimPrefix(line, "pid ")))
	if err != nil || perr != nil || !strings.HasPrefix(line, "pid ") {
		c.Process.Kill()
		c.Wait()
		t.Fatalf("the helper said %q (%v)", line, err)
	}
	if err := syscall.Kill(pid, 0); err != nil {
		t.Fatalf("the server %d is not running before its starter is killed: %v", pid, err)
	}
	c.Process.Kill()
	c.Wait()
	// The kernel signals it at once; a minute is for a machine at load 20.
	deadline := time.Now().Add(time.Minute)
	for !gone(pid) {
		if time.Now().After(deadline) {
			syscall.Kill(pid, syscall.SIGKILL)
			t.Fatalf("redis-server %d still runs a minute after its starter was killed", pid)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// gone reports whether pid no longer runs: it does not exist, or it is a
// zombie (its parent, now init, has not reaped it yet).
func gone(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return true
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i >= 0 && i+2 < len(s) && s[i+2] == 'Z'
}
