// Package redistest starts real redis-server processes for tests, on Unix
// sockets in temporary directories, so that no test depends on a server
// already running on a fixed port.
package redistest

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// Server is a redis-server child process. Persistence (appendonly, fsync always)
// is on, as production runs it, so Restart keeps the data.
type Server struct {
	// Socket is the path of the server's Unix socket.
	Socket string
	dir    string
	cmd    *exec.Cmd
	tb     testing.TB
	extra  []string
}

// Binary returns the redis-server path, or an error saying how to install it.
func Binary() (string, error) {
	if p := os.Getenv("PACER_REDIS_SERVER"); p != "" {
		return p, nil
	}
	p, err := exec.LookPath("redis-server")
	if err != nil {
		return "", fmt.Errorf("redis-server not found in PATH: install it with `sudo apt-get install redis-server` (or run `make deps`), or set PACER_REDIS_SERVER")
	}
	return p, nil
}

// Start starts a redis-server for the test and stops it at cleanup. Extra
// arguments are passed as redis-server options ("--maxmemory", "1mb").
func Start(tb testing.TB, extra ...string) *Server {
	tb.Helper()
	// Unix socket paths are limited to ~104 bytes: t.TempDir() can be too long.
	dir, err := os.MkdirTemp("", "pacer-redis-")
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { os.RemoveAll(dir) })
	s := &Server{Socket: filepath.Join(dir, "redis.sock"), dir: dir, tb: tb, extra: extra}
	s.start()
	tb.Cleanup(s.Stop)
	return s
}

func (s *Server) start() {
	s.tb.Helper()
	bin, err := Binary()
	if err != nil {
		s.tb.Fatal(err)
	}
	args := append([]string{
		"--port", "0", "--unixsocket", s.Socket, "--unixsocketperm", "700",
		"--dir", s.dir, "--appendonly", "yes", "--appendfsync", "always", "--save", "",
		"--daemonize", "no", "--loglevel", "warning", "--logfile", filepath.Join(s.dir, "redis.log"),
	}, s.extra...)
	s.cmd = exec.Command(bin, args...)
	s.cmd.Stdout, s.cmd.Stderr = os.Stderr, os.Stderr
	if err := s.cmd.Start(); err != nil {
		s.tb.Fatalf("start redis-server: %v", err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		c, err := net.Dial("unix", s.Socket)
		if err == nil {
			c.Close()
			break
		}
		if time.Now().After(deadline) {
			log, _ := os.ReadFile(filepath.Join(s.dir, "redis.log"))
			s.tb.Fatalf("redis-server did not listen on %s within 10s: %v\n%s", s.Socket, err, log)
		}
		time.Sleep(5 * time.Millisecond)
	}
	// AOF loading: wait until the server answers commands.
	c := redis.NewClient(&redis.Options{Network: "unix", Addr: s.Socket})
	defer c.Close()
	for {
		err := c.Ping(context.Background()).Err()
		if err == nil {
			return
		}
		if time.Now().After(deadline) || !strings.Contains(err.Error(), "LOADING") {
			s.tb.Fatalf("redis-server on %s: %v", s.Socket, err)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// Client returns a new client for the server, closed at cleanup.
func (s *Server) Client() *redis.Client {
	c := redis.NewClient(&redis.Options{Network: "unix", Addr: s.Socket})
	s.tb.Cleanup(func() { c.Close() })
	return c
}

// Kill stops the server with SIGKILL, as a crash would.
func (s *Server) Kill() {
	if s.cmd == nil || s.cmd.Process == nil {
		return
	}
	s.cmd.Process.Kill()
	s.cmd.Wait()
	s.cmd = nil
	os.Remove(s.Socket)
}

// Restart kills the server and starts it again on the same socket and data
// directory; with appendfsync always no acknowledged write is lost.
func (s *Server) Restart() {
	s.tb.Helper()
	s.Kill()
	s.start()
}

// Stop stops the server if it is running.
func (s *Server) Stop() {
	if s.cmd == nil || s.cmd.Process == nil {
		return
	}
	s.cmd.Process.Signal(os.Interrupt)
	done := make(chan struct{})
	go func() { s.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		s.cmd.Process.Kill()
		<-done
	}
	s.cmd = nil
}
