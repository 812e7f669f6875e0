// Package redisproc runs redis-server as a child process on a Unix socket,
// for the tests (via internal/redistest), the simulator and the development
// fleet, so that nothing depends on a server already running on a fixed port.
package redisproc

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/pacer/pacer/internal/child"
	"github.com/redis/go-redis/v9"
)

// Options says how to run the server. The zero value runs Debian's
// redis-server in a fresh temporary directory, without persistence.
type Options struct {
	// Binary is the redis-server to run (default: $PACER_REDIS_SERVER, else
	// redis-server from PATH).
	Binary string
	// Dir holds the socket, the log and any data. Empty: a temporary
	// directory, removed by Stop.
	Dir string
	// Persistent turns the AOF on with fsync on every write, as the ledger
	// runs in production, so Kill and Restart lose no acknowledged write.
	Persistent bool
	// AppendFsync, with Persistent, replaces the fsync policy "always" with
	// another ("everysec", "no"), to run a server that does not meet the
	// ledger's durability policy.
	AppendFsync string
	// TCP makes the server listen on an ephemeral loopback port as well as
	// its socket (Server.Addr): replication and Sentinel need TCP.
	TCP bool
	// ReplicaOf ("host:port") starts the server as a replica of that master;
	// it implies TCP.
	ReplicaOf string
	// Conf is written to redis.conf in Dir and given to redis-server before
	// the other options, for directives the command line cannot carry
	// (`rename-command CONFIG ""`).
	Conf string
	// Sentinel runs the server as a Redis Sentinel (`redis-server conf
	// --sentinel`) on a loopback port (Server.Addr); Conf must hold its
	// `sentinel monitor` lines (Sentinel rewrites that file as it learns).
	Sentinel bool
	// TLS makes the server listen with TLS, and only TLS, on an ephemeral
	// loopback port (Server.Addr). Its socket stays plain, for the readiness
	// check and for tests that look behind the ledger's back.
	TLS *TLS
	// Extra options for redis-server ("--maxmemory", "1mb"). With
	// "--requirepass" or ACL users in Conf, the readiness check takes NOAUTH
	// as an answer.
	Extra []string
}

// TLS is the server side of Options.TLS: PEM files.
type TLS struct {
	CertFile, KeyFile string
	// CAFile verifies client certificates; required by redis-server even
	// when ClientCerts is false.
	CAFile string
	// ClientCerts demands a client certificate (tls-auth-clients yes).
	ClientCerts bool
}

// Server is a running redis-server.
type Server struct {
	// Socket is the path of its Unix socket.
	Socket string
	// Addr is its loopback host:port with Options.TCP or ReplicaOf; else "".
	Addr    string
	dir     string
	ownsDir bool
	args    []string
	bin     string
	cmd     *exec.Cmd
	done    chan struct{}
}

// Binary returns the redis-server to run, or an error saying how to get one.
func Binary(name string) (string, error) {
	if name == "" {
		name = os.Getenv("PACER_REDIS_SERVER")
	}
	if name == "" {
		name = "redis-server"
	}
	p, err := exec.LookPath(name)
	if err != nil {
		return "", fmt.Errorf("%s not found: install it with `sudo apt-get install redis-server` (or `make deps`), or set PACER_REDIS_SERVER", name)
	}
	return p, nil
}

// Start starts redis-server and returns once it answers PING.
func Start(ctx context.Context, opt Options) (*Server, error) {
	bin, err := Binary(opt.Binary)
	if err != nil {
		return nil, err
	}
	s := &Server{dir: opt.Dir, bin: bin}
	if s.dir == "" {
		// Unix socket paths are limited to ~104 bytes: keep the directory short.
		if s.dir, err = os.MkdirTemp("", "pacer-redis-"); err != nil {
			return nil, err
		}
		s.ownsDir = true
	} else if err := os.MkdirAll(s.dir, 0o750); err != nil {
		return nil, err
	}
	s.Socket = filepath.Join(s.dir, "redis.sock")
	persist := []string{"--appendonly", "no", "--save", ""}
	if opt.Persistent {
		fsync := opt.AppendFsync
		if fsync == "" {
			fsync = "always"
		}
		persist = []string{"--appendonly", "yes", "--appendfsync", fsync, "--save", ""}
	}
	port, network, err := s.networkArgs(opt)
	if err != nil {
		s.Stop()
		return nil, err
	}
	persist = append(persist, network...)
	conf, err := s.confArgs(opt)
	if err != nil {
		s.Stop()
		return nil, err
	}
	s.args = append(append(append(conf,
		"--port", port, "--unixsocket", s.Socket, "--unixsocketperm", "700", "--dir", s.dir,
		"--daemonize", "no", "--loglevel", "warning", "--logfile", filepath.Join(s.dir, "redis.log"),
	), persist...), opt.Extra...)
	if err := s.start(ctx); err != nil {
		s.Stop()
		return nil, err
	}
	return s, nil
}

// networkArgs are the server's port and its TCP, TLS and replication
// arguments; they set s.Addr when the server listens on TCP.
func (s *Server) networkArgs(opt Options) (port string, args []string, err error) {
	port = "0"
	if opt.TCP || opt.ReplicaOf != "" || opt.Sentinel {
		p, err := FreePort()
		if err != nil {
			return "", nil, err
		}
		port = strconv.Itoa(p)
		s.Addr = net.JoinHostPort("127.0.0.1", port)
		args = append(args, "--bind", "127.0.0.1")
	}
	if opt.TLS != nil {
		p, err := FreePort()
		if err != nil {
			return "", nil, err
		}
		clients := "no"
		if opt.TLS.ClientCerts {
			clients = "yes"
		}
		s.Addr = net.JoinHostPort("127.0.0.1", strconv.Itoa(p))
		port = "0"
		args = append(args, "--bind", "127.0.0.1", "--tls-port", strconv.Itoa(p),
			"--tls-cert-file", opt.TLS.CertFile, "--tls-key-file", opt.TLS.KeyFile,
			"--tls-ca-cert-file", opt.TLS.CAFile, "--tls-auth-clients", clients)
	}
	if opt.ReplicaOf != "" {
		host, mport, err := net.SplitHostPort(opt.ReplicaOf)
		if err != nil {
			return "", nil, fmt.Errorf("replica of %q: %w", opt.ReplicaOf, err)
		}
		args = append(args, "--replicaof", host, mport)
	}
	return port, args, nil
}

// confArgs are the arguments that come first: a configuration file written
// from opt.Conf, and --sentinel.
func (s *Server) confArgs(opt Options) ([]string, error) {
	var conf []string
	if opt.Conf != "" {
		path := filepath.Join(s.dir, "redis.conf")
		if err := os.WriteFile(path, []byte(opt.Conf), 0o600); err != nil {
			return nil, err
		}
		conf = []string{path}
	}
	if opt.Sentinel {
		if opt.Conf == "" {
			return nil, errors.New("a Sentinel needs Options.Conf with its `sentinel monitor` lines")
		}
		conf = append(conf, "--sentinel")
	}
	return conf, nil
}

// startWithin bounds how long a started redis-server may take to answer a
// PING.
const startWithin = time.Minute

func (s *Server) start(ctx context.Context) error {
	os.Remove(s.Socket) // a killed server leaves its socket behind
	s.cmd = exec.Command(s.bin, s.args...)
	s.cmd.Stdout, s.cmd.Stderr = os.Stderr, os.Stderr
	child.DieWithParent(s.cmd)
	if err := s.cmd.Start(); err != nil {
		s.cmd = nil
		return fmt.Errorf("start redis-server: %w", err)
	}
	s.done = make(chan struct{})
	go func(c *exec.Cmd, done chan struct{}) { c.Wait(); close(done) }(s.cmd, s.done)

	// Generous: a loaded machine (a load average of 20, fsyncs queued
	// behind other tests') can hold a start for seconds; a server that never
	// comes up still fails the test, a minute later.
	deadline := time.Now().Add(startWithin)
	for {
		c, err := net.Dial("unix", s.Socket)
		if err == nil {
			c.Close()
			break
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			log, _ := os.ReadFile(filepath.Join(s.dir, "redis.log"))
			return fmt.Errorf("redis-server did not listen on %s within %s: %v\n%s", s.Socket, startWithin, err, log)
		}
		time.Sleep(5 * time.Millisecond)
	}
	// While it loads its AOF, it answers LOADING: wait for a real PONG.
	c := redis.NewClient(&redis.Options{Network: "unix", Addr: s.Socket})
	defer c.Close()
	for {
		err := c.Ping(ctx).Err()
		if err == nil || strings.HasPrefix(err.Error(), "NOAUTH") {
			return nil // up; a server with requirepass answers NOAUTH
		}
		var nerr net.Error
		slow := errors.As(err, &nerr) && nerr.Timeout() // no answer yet, on a loaded machine
		if time.Now().After(deadline) || !(slow || strings.Contains(err.Error(), "LOADING")) {
			return fmt.Errorf("redis-server on %s: %w", s.Socket, err)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// FreePort returns a loopback TCP port that was free a moment ago (the
// kernel's choice of an ephemeral port; a race with another process taking it
// is possible but rare, and shows as a start failure).
func FreePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

// Kill stops the server with SIGKILL, as a crash would; its data stays.
func (s *Server) Kill() {
	if s.cmd == nil {
		return
	}
	s.cmd.Process.Kill()
	<-s.done
	s.cmd = nil
}

// Dead reports whether the server was killed (Kill) and not restarted.
func (s *Server) Dead() bool { return s.cmd == nil }

// Restart kills the server and starts it again on the same socket and data.
func (s *Server) Restart(ctx context.Context) error {
	s.Kill()
	return s.start(ctx)
}

// Stop shuts the server down (SIGINT, SIGKILL after 5 s) and removes its
// directory if Start made it.
func (s *Server) Stop() {
	if s.cmd != nil {
		child.Stop(s.cmd.Process, os.Interrupt, s.done, 5*time.Second)
		s.cmd = nil
	}
	if s.ownsDir {
		os.RemoveAll(s.dir)
	}
}

// ErrNotRunning is returned by Pid for a stopped server.
var ErrNotRunning = errors.New("redis-server not running")

// Pid returns the server's process id.
func (s *Server) Pid() (int, error) {
	if s.cmd == nil {
		return 0, ErrNotRunning
	}
	return s.cmd.Process.Pid, nil
}

// Pause freezes the server (SIGSTOP): connections stay open and calls hang,
// as they do when the network to Redis is cut. Resume undoes it.
func (s *Server) Pause() error {
	if s.cmd == nil {
		return ErrNotRunning
	}
	return s.cmd.Process.Signal(syscall.SIGSTOP)
}

// Resume continues a paused server (SIGCONT).
func (s *Server) Resume() error {
	if s.cmd == nil {
		return ErrNotRunning
	}
	return s.cmd.Process.Signal(syscall.SIGCONT)
}
