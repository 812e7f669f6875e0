// Package proctest is the scaffolding tests share for the processes they
// start: a build of one of pacer's commands, a started process whose output
// is kept and shown when the test fails, a wait for it to listen, a buffer
// that several goroutines write to, and promtool.
package proctest

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// Buffer is a bytes.Buffer safe for writers on several goroutines (a
// process's stderr, a logger). Its zero value is empty and ready.
type Buffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *Buffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

// String returns what was written so far.
func (s *Buffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// Reset empties the buffer.
func (s *Buffer) Reset() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.b.Reset()
}

// Build compiles the Go package pkg (an import path or a directory) into
// dir, with the race detector if race, and returns the binary's path. It
// takes no testing.TB, so TestMain can call it.
func Build(dir, pkg string, race bool) (string, error) {
	bin := filepath.Join(dir, filepath.Base(strings.TrimSuffix(pkg, "/")))
	args := []string{"build", "-o", bin}
	if race {
		args = append(args, "-race")
	}
	out, err := exec.Command("go", append(args, pkg)...).CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("go build %s: %w\n%s", pkg, err, out)
	}
	return bin, nil
}

// Proc is a started process; its stderr (and stdout) are kept in Output.
type Proc struct {
	Cmd    *exec.Cmd
	Output *Buffer
	done   chan struct{}
	err    error
}

// Start starts bin with args and the test's environment plus env. At the
// test's cleanup the process is killed and waited for, and if the test
// failed its output is logged under name.
func Start(tb testing.TB, name, bin string, args, env []string) *Proc {
	tb.Helper()
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), env...)
	return StartCmd(tb, name, cmd)
}

// StartCmd is Start for a command the caller prepared (its environment,
// extra files); its stdout and stderr go to Output.
func StartCmd(tb testing.TB, name string, cmd *exec.Cmd) *Proc {
	tb.Helper()
	p := &Proc{Cmd: cmd, Output: &Buffer{}, done: make(chan struct{})}
	p.Cmd.Stdout, p.Cmd.Stderr = p.Output, p.Output
	if err := p.Cmd.Start(); err != nil {
		tb.Fatalf("start %s: %v", name, err)
	}
	go func() { p.err = p.Cmd.Wait(); close(p.done) }()
	tb.Cleanup(func() {
		p.Cmd.Process.Kill()
		<-p.done
		if tb.Failed() {
			tb.Logf("%s output:\n%s", name, p.Output.String())
		}
	})
	return p
}

// Done is closed once the process has exited; Err is then its Wait error.
func (p *Proc) Done() <-chan struct{} { return p.done }

// Err returns the process's exit error once Done is closed.
func (p *Proc) Err() error {
	<-p.done
	return p.err
}

// WaitListen dials network/addr until it answers, the process exits, or
// within has passed (pass what a start takes at a load average of 20, not
// on an idle machine). Dialling, not a stat: a killed process leaves its
// socket file behind.
func (p *Proc) WaitListen(tb testing.TB, network, addr string, within time.Duration) {
	tb.Helper()
	for deadline := time.Now().Add(within); ; {
		if c, err := net.Dial(network, addr); err == nil {
			c.Close()
			return
		}
		select {
		case <-p.done:
			tb.Fatalf("%s exited before it listened on %s: %v\n%s", p.Cmd.Path, addr, p.err, p.Output.String())
		default:
		}
		if time.Now().After(deadline) {
			tb.Fatalf("%s did not listen on %s within %v:\n%s", p.Cmd.Path, addr, within, p.Output.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// ErrNoPromtool says promtool is not installed, and how to get it.
var ErrNoPromtool = errors.New("promtool not found: install Debian's prometheus package (apt-get install --no-install-recommends prometheus; scripts/deps.sh does)")

// Promtool runs promtool with args in dir and returns its combined output.
// A missing promtool is ErrNoPromtool: the caller fails with it, never
// skips.
func Promtool(dir string, args ...string) (string, error) {
	bin, err := exec.LookPath("promtool")
	if err != nil {
		return "", ErrNoPromtool
	}
	cmd := exec.Command(bin, args...)
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("promtool %s: %w\n%s", strings.Join(args, " "), err, out)
	}
	return string(out), nil
}
