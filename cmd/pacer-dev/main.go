// Command pacer-dev brings up a local pacer fleet for development and demos:
// a real redis-server (the ledger), an embedded etcd (the reconciler election)
// and an embedded NATS server (broadcasts), a demo campaign, and several
// pacerd processes on their own Unix sockets. `make run` starts it.
//
// The embedded servers live here, not in pacerd: production daemons talk to
// the fleet's own etcd and NATS.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/pacer/pacer/internal/child"
	"github.com/pacer/pacer/internal/embedded"
	"github.com/pacer/pacer/internal/redisproc"
	"github.com/pacer/pacer/lease"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	ctx, orphaned := stopWhenOrphaned(ctx, time.Second)
	defer orphaned()
	if err := run(ctx, os.Args[1:], os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "pacer-dev:", err)
		os.Exit(1)
	}
}

// stopWhenOrphaned cancels ctx when the parent process goes away. make
// does not pass a SIGTERM it receives on to its children: without this,
// `kill <make's pid>` would leave the fleet running with no one to stop it.
func stopWhenOrphaned(ctx context.Context, every time.Duration) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancel(ctx)
	parent := os.Getppid()
	go func() {
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				if os.Getppid() != parent {
					cancel()
					return
				}
			}
		}
	}()
	return ctx, cancel
}

// Fixed default ports, so that the commands printed (and .run/env) stay the
// same from one run to the next; flags move them when they are taken.
const (
	defaultEtcdPort     = 12379
	defaultEtcdPeerPort = 12380
	defaultNATSPort     = 14222
	defaultAdminPort    = 9464 // pacerd i gets defaultAdminPort+i-1
)

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fl := flag.NewFlagSet("pacer-dev", flag.ContinueOnError)
	fl.SetOutput(stderr)
	dir := fl.String("dir", ".run", "state `dir` for sockets, Redis AOF, etcd data and logs")
	bin := fl.String("bin", "bin", "`dir` holding the pacerd binary")
	curves := fl.String("curves", "configs/curves", "pacing curves `dir`")
	hosts := fl.Int("hosts", 3, "how many pacerd to start")
	etcdPort := fl.Int("etcd-port", defaultEtcdPort, "etcd client `port` on 127.0.0.1 (0: any free port)")
	etcdPeerPort := fl.Int("etcd-peer-port", defaultEtcdPeerPort, "etcd peer `port` on 127.0.0.1 (0: any free port)")
	natsPort := fl.Int("nats-port", defaultNATSPort, "NATS `port` on 127.0.0.1 (0: any free port)")
	adminPort := fl.Int("admin-port", defaultAdminPort, "first pacerd's admin (metrics) `port`; the next hosts take the ports after it")
	fl.Usage = func() {
		fmt.Fprintf(fl.Output(), "Usage: pacer-dev [flags]  (make run; make run RUN_ARGS='--hosts 2')\n\n"+
			"Brings up a local pacer fleet in --dir: redis-server, embedded etcd and NATS, a demo\n"+
			"campaign and --hosts pacerd. Writes --dir/env for `. .run/env`. Ctrl-C stops everything.\n\nFlags:\n")
		fl.PrintDefaults()
	}
	if err := fl.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil // asked for, and printed
		}
		return fmt.Errorf("%w (run `pacer-dev --help` for the flags)", err)
	}
	if fl.NArg() > 0 {
		return fmt.Errorf("unexpected argument %q (run `pacer-dev --help` for the flags)", fl.Arg(0))
	}
	if *hosts < 1 || *hosts > 9 {
		return errors.New("--hosts: 1 to 9")
	}
	if *adminPort < 1 || *adminPort+*hosts-1 > 65535 {
		return fmt.Errorf("--admin-port %d: want a port from 1 to %d (pacerd i listens on it + i - 1)", *adminPort, 65536-*hosts)
	}
	for _, p := range []int{*etcdPort, *etcdPeerPort, *natsPort} {
		if p < 0 || p > 65535 {
			return fmt.Errorf("port %d: want 0 (any free port) to 65535", p)
		}
	}
	abs, err := filepath.Abs(*dir)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(abs, 0o750); err != nil {
		return err
	}
	// One fleet per directory: a second one would delete the first's
	// Redis socket and wait for ever on etcd's data directory.
	unlock, err := lockDir(abs, *dir)
	if err != nil {
		return err
	}
	defer unlock()

	ports := []namedPort{{"--etcd-port", *etcdPort}, {"--etcd-peer-port", *etcdPeerPort}, {"--nats-port", *natsPort}}
	for i := 0; i < *hosts; i++ {
		ports = append(ports, namedPort{"--admin-port", *adminPort + i})
	}
	if err := checkPortsFree(ports); err != nil {
		return err
	}
	curvesAbs, err := filepath.Abs(*curves)
	if err != nil {
		return err
	}
	if _, err := os.Stat(filepath.Join(*bin, "pacerd")); err != nil {
		return fmt.Errorf("%w (run `make build` first, or `make run` which builds)", err)
	}

	fmt.Fprintf(stdout, "starting redis-server, etcd, NATS and %d pacerd in %s…\n", *hosts, *dir)
	rs, err := redisproc.Start(ctx, redisproc.Options{Dir: abs, Persistent: true})
	if err != nil {
		return err
	}
	defer rs.Stop()
	redisSock := rs.Socket

	etcd, err := embedded.StartEtcdOn(filepath.Join(abs, "etcd"), *etcdPort, *etcdPeerPort)
	if err != nil {
		return err
	}
	defer etcd.Close()
	nats, err := embedded.StartNATSOn(*natsPort)
	if err != nil {
		return err
	}
	defer nats.Close()
	if ctx.Err() != nil {
		fmt.Fprintln(stdout, "stopping…")
		return nil
	}

	rdb, err := lease.NewClient([]string{redisSock})
	if err != nil {
		return err
	}
	defer rdb.Close()
	ledger := lease.New(rdb, lease.Config{}, nil)
	// 86,400 currency units a day: a pace of 1,000,000 micros (1 unit) a second.
	if _, err := ledger.PutCampaign(ctx, lease.Campaign{ID: "demo", DailyMicros: 86_400_000_000, TZ: "UTC", Curve: "flat", Shards: 8, State: lease.StateActive}); err != nil {
		return err
	}

	var daemons []*proc
	defer func() {
		for _, p := range daemons {
			p.stop()
		}
	}()
	var sockets []string
	for i := 1; i <= *hosts; i++ {
		sock := filepath.Join(abs, fmt.Sprintf("pacer-%d.sock", i))
		logf, err := os.Create(filepath.Join(abs, fmt.Sprintf("pacerd-%d.log", i)))
		if err != nil {
			return err
		}
		defer logf.Close()
		c := exec.Command(filepath.Join(*bin, "pacerd"),
			"--redis", redisSock, "--socket", sock, "--etcd", etcd.Endpoint, "--nats", nats.URL,
			"--holder", fmt.Sprintf("dev-%d", i), "--curves", curvesAbs, "--state-dir", filepath.Join(abs, fmt.Sprintf("state-%d", i)),
			"--admin", fmt.Sprintf("127.0.0.1:%d", *adminPort+i-1), "--log-format", "console")
		c.Stdout, c.Stderr = logf, logf
		// If pacer-dev dies without stopping them (SIGKILL), the
		// daemons still get their SIGTERM and give leases back.
		c.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGTERM}
		p, err := start(c)
		if err != nil {
			return fmt.Errorf("start pacerd: %w (run `make build` first)", err)
		}
		daemons = append(daemons, p)
		sockets = append(sockets, sock)
	}
	for _, s := range sockets {
		if err := waitSocket(ctx, s, 15*time.Second); err != nil {
			if ctx.Err() != nil {
				fmt.Fprintln(stdout, "stopping…")
				return nil
			}
			return fmt.Errorf("pacerd on %s: %w (see %s/pacerd-*.log)", s, err, *dir)
		}
	}

	rel := func(p string) string {
		if r, err := filepath.Rel(mustGetwd(), p); err == nil && !strings.HasPrefix(r, "..") {
			return r
		}
		return p
	}
	envPath := filepath.Join(abs, "env")
	env := fmt.Sprintf("# Written by pacer-dev (make run) while its fleet is up; removed when it stops.\n"+
		"# `. %s` points pacerctl (PACER_*) and your shell at this fleet.\n"+
		"export PACER_REDIS=%s\nexport PACER_SOCKET=%s\nexport PACER_CURVES=%s\nexport PACER_NATS=%s\nexport PACER_ETCD=%s\n"+
		"export PACER_ADMIN=http://127.0.0.1:%d\nexport PACER_SOCKETS=%q\n",
		rel(envPath), redisSock, sockets[0], curvesAbs, nats.URL, etcd.Endpoint, *adminPort, strings.Join(sockets, " "))
	if err := os.WriteFile(envPath, []byte(env), 0o640); err != nil {
		return err
	}
	defer os.Remove(envPath)

	admins := fmt.Sprintf("http://127.0.0.1:%d/metrics", *adminPort)
	if *hosts > 1 {
		admins += fmt.Sprintf(" … :%d", *adminPort+*hosts-1)
	}
	fmt.Fprintf(stdout, `
  pacer dev fleet is up (addresses also in %[1]s)
  ---------------------
  redis-server (ledger)  %[2]s
  etcd (election)        %[3]s
  NATS (broadcasts)      %[4]s
  pacerd sockets         %[5]s … (%[6]d hosts; logs in %[7]s/pacerd-*.log)
  admin (metrics)        %[8]s
  campaign               demo: 86,400 units/day, flat curve (1,000,000 micros/s)

  Try, in another terminal:
    . %[1]s                                  # PACER_* for pacerctl
    redis-cli -s %[5]s SPEND demo 1000        # (integer) 1: allowed
    redis-cli -s %[5]s BALANCE demo
    redis-benchmark -s %[5]s -n 200000 -c 50 SPEND demo 1000   # far above pace: mostly 0 (paced)
    bin/pacerctl status          # SPENT grows as leases report back (every few seconds);
                                 # demo opened mid-day, so it starts behind the curve's TARGET
    bin/pacerctl campaign pause demo       # every host answers -1 within a NATS hop
    bin/pacerctl campaign resume demo
    bin/pacerctl check

  See pacing over a whole simulated day (10 to 20 s; redis-server of its own):
    bin/pacersim configs/scenarios/smoke.yaml --out %[7]s/sim && echo "plot: %[7]s/sim/sim-cumulative.png"

  Ctrl-C stops the fleet (leases go back to the ledger). This terminal says when the
  redis-server stops answering or a pacerd is not ready (its /readyz), and when it recovers.
`, rel(envPath), rel(redisSock), etcd.Endpoint, nats.URL, rel(sockets[0]), len(sockets), *dir, admins)

	probes := []probe{redisProbe(rdb, rel(redisSock))}
	for i := 1; i <= *hosts; i++ {
		probes = append(probes, readyProbe(fmt.Sprintf("pacerd-%d", i), fmt.Sprintf("http://127.0.0.1:%d/readyz", *adminPort+i-1)))
	}
	stopWatch := watchInBackground(ctx, stdout, probes)
	defer stopWatch()

	exited := make(chan *proc, len(daemons))
	for _, p := range daemons {
		go func() { <-p.done; exited <- p }()
	}
	select {
	case <-ctx.Done():
		stopWatch()
		fmt.Fprintln(stdout, "\nstopping the fleet…")
		return nil
	case p := <-exited:
		return fmt.Errorf("a pacerd exited: %v (see %s/pacerd-*.log)", p.err, *dir)
	}
}

// watchInBackground runs watchFleet every second until the returned stop is
// called (which waits for it).
func watchInBackground(ctx context.Context, out io.Writer, probes []probe) (stop func()) {
	ctx, cancel := context.WithCancel(ctx)
	t := time.NewTicker(time.Second)
	done := make(chan struct{})
	go func() {
		defer close(done)
		watchFleet(ctx, out, t.C, time.Now, probes)
	}()
	var once sync.Once
	return func() { once.Do(func() { cancel(); t.Stop(); <-done }) }
}

// lockDir takes an exclusive lock on dir/pacer-dev.lock for the process's
// life (the kernel drops it when the process dies, however it dies), and
// says who holds it if another fleet does.
func lockDir(abs, shown string) (unlock func(), err error) {
	path := filepath.Join(abs, "pacer-dev.lock")
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o640)
	if err != nil {
		return nil, err
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		pid, _ := io.ReadAll(f)
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			who := strings.TrimSpace(string(pid))
			return nil, fmt.Errorf("a pacer dev fleet is already running in %s (pid %s): use it (`. %s/env`), "+
				"or stop it with Ctrl-C in its terminal or `kill %s`; for a second fleet, pass another --dir and other ports (--help)",
				shown, who, shown, who)
		}
		return nil, fmt.Errorf("lock %s: %w", path, err)
	}
	if err := f.Truncate(0); err == nil {
		fmt.Fprintf(f, "%d\n", os.Getpid())
	}
	return func() { f.Close() }, nil
}

type namedPort struct {
	flag string
	port int
}

// checkPortsFree fails early, naming the flag to change, rather than
// letting etcd, NATS or a pacerd fail half-way through the start.
func checkPortsFree(ports []namedPort) error {
	for _, p := range ports {
		if p.port == 0 {
			continue
		}
		ln, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", p.port))
		if err != nil {
			return fmt.Errorf("port %d is taken (%v): pass %s with a free port, e.g. `make run RUN_ARGS='%s %d'`", p.port, err, p.flag, p.flag, p.port+10000)
		}
		ln.Close()
	}
	return nil
}

func mustGetwd() string {
	wd, _ := os.Getwd()
	return wd
}

func waitSocket(ctx context.Context, path string, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		c, err := net.Dial("unix", path)
		if err == nil {
			c.Close()
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("no listener on %s after %v: %w", path, timeout, err)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// proc is a child process with one goroutine waiting for it.
type proc struct {
	cmd  *exec.Cmd
	done chan struct{}
	err  error
}

func start(c *exec.Cmd) (*proc, error) {
	if err := c.Start(); err != nil {
		return nil, err
	}
	p := &proc{cmd: c, done: make(chan struct{})}
	go func() { p.err = c.Wait(); close(p.done) }()
	return p, nil
}

// stop sends SIGTERM and waits, with SIGKILL after 10 s.
func (p *proc) stop() { child.Stop(p.cmd.Process, syscall.SIGTERM, p.done, 10*time.Second) }
