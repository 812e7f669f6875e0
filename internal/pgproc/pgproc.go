// Package pgproc runs a real PostgreSQL server as a child cluster, for the
// tests (via internal/pgtest) and the development fleet (pacer-dev): the
// Debian package's initdb and pg_ctl, a cluster in a temporary directory,
// listening only on a Unix socket there (no TCP port), so that nothing
// depends on a server already running. initdb refuses to run as root, so
// under root the server runs as the unprivileged user nobody. fsync is off:
// these clusters are thrown away.
package pgproc

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
)

// DefaultBin is where Debian's postgresql-15 keeps its server programs (off
// PATH; `dpkg -L postgresql-15` lists them). $PACER_PG_BIN overrides it.
const DefaultBin = "/usr/lib/postgresql/15/bin"

// startTimeout bounds pg_ctl's wait for the server, in seconds: generous,
// since a loaded 2-core machine (load average 20) can take a minute.
const startTimeout = "600"

// Server is one PostgreSQL cluster.
type Server struct {
	// Dir holds the data directory, the socket and the log.
	Dir string
	bin string
	// runAs is the user the server runs as ("" for ourselves).
	runAs string
	// durable: fsync on (StartDurable).
	durable bool
	dbs     atomic.Int64
}

// Start runs initdb and starts the server. A missing postgresql-15 is an
// error saying how to get it.
func Start(ctx context.Context) (*Server, error) { return start(ctx, false) }

// StartDurable is Start with fsync on, as production runs PostgreSQL: each
// commit waits for its WAL on disk (synchronous_commit is on in both). For
// benchmarks that measure what a commit costs.
func StartDurable(ctx context.Context) (*Server, error) { return start(ctx, true) }

func start(ctx context.Context, durable bool) (*Server, error) {
	bin := os.Getenv("PACER_PG_BIN")
	if bin == "" {
		bin = DefaultBin
	}
	if _, err := os.Stat(filepath.Join(bin, "initdb")); err != nil {
		return nil, fmt.Errorf("pgproc: no initdb in %s (%v): install Debian's postgresql-15 (scripts/deps.sh does) or set PACER_PG_BIN to the directory holding initdb and pg_ctl", bin, err)
	}
	dir, err := os.MkdirTemp("", "pacer-pg-")
	if err != nil {
		return nil, err
	}
	s := &Server{Dir: dir, bin: bin, durable: durable}
	if os.Geteuid() == 0 {
		s.runAs = "nobody"
		u, err := user.Lookup(s.runAs)
		if err != nil {
			os.RemoveAll(dir)
			return nil, fmt.Errorf("pgproc: running as root, and no user %q to run PostgreSQL as: %w", s.runAs, err)
		}
		uid, _ := strconv.Atoi(u.Uid)
		if err := os.Chown(dir, uid, -1); err != nil {
			os.RemoveAll(dir)
			return nil, err
		}
	}
	if err := s.cmd(ctx, "initdb", "-D", s.dataDir(), "-U", "pacer", "--auth=trust", "-E", "UTF8", "--locale=C", "--no-sync"); err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	if err := s.Start(ctx); err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	return s, nil
}

func (s *Server) dataDir() string { return filepath.Join(s.Dir, "data") }

// cmd runs one of the server's programs, as runAs when set.
func (s *Server) cmd(ctx context.Context, prog string, args ...string) error {
	path := filepath.Join(s.bin, prog)
	var c *exec.Cmd
	if s.runAs != "" {
		c = exec.CommandContext(ctx, "runuser", append([]string{"-u", s.runAs, "--", path}, args...)...)
	} else {
		c = exec.CommandContext(ctx, path, args...)
	}
	out, err := c.CombinedOutput()
	if err != nil {
		return fmt.Errorf("pgproc: %s %v: %w\n%s", prog, args, err, out)
	}
	return nil
}

// Start starts the (stopped) server and waits until it accepts connections.
func (s *Server) Start(ctx context.Context) error {
	fsync := "off"
	if s.durable {
		fsync = "on"
	}
	opts := "-c listen_addresses='' -c unix_socket_directories=" + s.Dir + " -c fsync=" + fsync + " -c max_connections=200"
	return s.cmd(ctx, "pg_ctl", "-D", s.dataDir(), "-w", "-t", startTimeout, "-l", filepath.Join(s.Dir, "log"), "-o", opts, "start")
}

// Crash stops the server at once, as a crash would (pg_ctl stop -m
// immediate: no checkpoint; it recovers from its WAL on Start).
func (s *Server) Crash(ctx context.Context) error {
	return s.cmd(ctx, "pg_ctl", "-D", s.dataDir(), "-w", "-t", startTimeout, "-m", "immediate", "stop")
}

// Stop stops the server and removes its directory.
func (s *Server) Stop() {
	_ = s.Crash(context.Background())
	os.RemoveAll(s.Dir)
}

// DSN is the connection string of database db (as user pacer, over the socket).
func (s *Server) DSN(db string) string {
	return fmt.Sprintf("host=%s port=5432 user=pacer dbname=%s sslmode=disable", s.Dir, db)
}

// CreateDB creates a fresh database and returns its DSN.
func (s *Server) CreateDB(ctx context.Context) (string, error) {
	name := "t" + strconv.FormatInt(s.dbs.Add(1), 10)
	conn, err := pgx.Connect(ctx, s.DSN("postgres"))
	if err != nil {
		return "", fmt.Errorf("pgproc: %w", err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+name); err != nil {
		return "", fmt.Errorf("pgproc: create database: %w", err)
	}
	return s.DSN(name), nil
}

// CreateNamedDB creates database name and returns its DSN.
func (s *Server) CreateNamedDB(ctx context.Context, name string) (string, error) {
	conn, err := pgx.Connect(ctx, s.DSN("postgres"))
	if err != nil {
		return "", fmt.Errorf("pgproc: %w", err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize()); err != nil {
		return "", fmt.Errorf("pgproc: create database: %w", err)
	}
	return s.DSN(name), nil
}

// CPU is the processor time (user and system) the server has used so far:
// the postmaster's, its live processes' and its exited ones'. Linux only
// (/proc); for benchmarks that say what PostgreSQL's share was.
func (s *Server) CPU() (time.Duration, error) {
	var ticks int64
	err := s.each(func(st stat, postmaster bool) {
		ticks += st.utime + st.stime
		if postmaster {
			ticks += st.cutime + st.cstime
		}
	})
	if err != nil {
		return 0, fmt.Errorf("pgproc: cpu: %w", err)
	}
	return time.Duration(ticks) * time.Second / clockTicks, nil
}

// Freeze stops the postmaster and every server process (SIGSTOP): the
// server is unreachable as behind a network that drops everything: a
// connection or a query hangs, none is refused. Thaw resumes them.
func (s *Server) Freeze() error { return s.signal(syscall.SIGSTOP) }

// Thaw resumes a frozen server (SIGCONT).
func (s *Server) Thaw() error { return s.signal(syscall.SIGCONT) }

func (s *Server) signal(sig syscall.Signal) error {
	var errs []error
	err := s.each(func(st stat, _ bool) {
		pid, err := strconv.Atoi(st.pid)
		if err == nil {
			err = syscall.Kill(pid, sig)
		}
		if err != nil && !errors.Is(err, syscall.ESRCH) {
			errs = append(errs, err)
		}
	})
	if err != nil {
		return fmt.Errorf("pgproc: %v: %w", sig, err)
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("pgproc: %v: %w", sig, err)
	}
	return nil
}

// each calls fn with the postmaster's /proc stat and each of its children's.
func (s *Server) each(fn func(st stat, postmaster bool)) error {
	b, err := os.ReadFile(filepath.Join(s.dataDir(), "postmaster.pid"))
	if err != nil {
		return err
	}
	pid, _, _ := strings.Cut(string(b), "\n")
	procs, err := filepath.Glob("/proc/[0-9]*/stat")
	if err != nil {
		return err
	}
	for _, p := range procs {
		st, err := procStat(p)
		if err != nil {
			continue // exited since the glob
		}
		if st.pid == pid || st.ppid == pid {
			fn(st, st.pid == pid)
		}
	}
	return nil
}

// clockTicks is Linux's USER_HZ, the unit of /proc/PID/stat's times.
const clockTicks = 100

type stat struct {
	pid, ppid                    string
	utime, stime, cutime, cstime int64
}

// procStat reads /proc/PID/stat: the fields after the command's closing
// parenthesis are state, ppid, …, utime (14th field), stime, cutime, cstime.
func procStat(path string) (stat, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return stat{}, err
	}
	pid, _, _ := strings.Cut(string(b), " ")
	i := strings.LastIndexByte(string(b), ')')
	f := strings.Fields(string(b[i+1:]))
	if i < 0 || len(f) < 15 {
		return stat{}, fmt.Errorf("pgproc: %s: short", path)
	}
	st := stat{pid: pid, ppid: f[1]}
	for j, p := range []*int64{&st.utime, &st.stime, &st.cutime, &st.cstime} {
		if *p, err = strconv.ParseInt(f[11+j], 10, 64); err != nil {
			return stat{}, fmt.Errorf("pgproc: %s: %w", path, err)
		}
	}
	return st, nil
}
