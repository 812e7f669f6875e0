// Command pacer-dev brings up a local pacer fleet for development and demos:
// a real redis-server (the ledger), an embedded etcd (the reconciler election)
// and an embedded NATS server (broadcasts), a demo campaign, and several
// pacerd processes on their own Unix sockets, and, when Debian's
// postgresql-15 is installed, a PostgreSQL with pacer-export copying the
// ledger into it. `make run` starts it.
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
	"github.com/redis/go-redis/v9"
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

// config is the command line.
type config struct {
	dir, bin, curves                        string
	hosts, etcdPort, etcdPeerPort, natsPort int
	adminPort                               int
	postgres                                bool
	abs, curvesAbs                          string // dir and curves, absolute
}

// parseFlags reads the command line; a nil config and nil error mean
// --help was asked for and printed.
func parseFlags(args []string, stderr io.Writer) (*config, error) {
	var c config
	fl := flag.NewFlagSet("pacer-dev", flag.ContinueOnError)
	fl.SetOutput(stderr)
	fl.StringVar(&c.dir, "dir", ".run", "state `dir` for sockets, Redis AOF, etcd data and logs")
	fl.StringVar(&c.bin, "bin", "bin", "`dir` holding the pacerd and pacer-export binaries")
	fl.StringVar(&c.curves, "curves", "configs/curves", "pacing curves `dir`")
	fl.IntVar(&c.hosts, "hosts", 3, "how many pacerd to start")
	fl.IntVar(&c.etcdPort, "etcd-port", defaultEtcdPort, "etcd client `port` on 127.0.0.1 (0: any free port)")
	fl.IntVar(&c.etcdPeerPort, "etcd-peer-port", defaultEtcdPeerPort, "etcd peer `port` on 127.0.0.1 (0: any free port)")
	fl.IntVar(&c.natsPort, "nats-port", defaultNATSPort, "NATS `port` on 127.0.0.1 (0: any free port)")
	fl.IntVar(&c.adminPort, "admin-port", defaultAdminPort, "first pacerd's admin (metrics) `port`; the next hosts take the ports after it, pacer-export's is it + 9")
	fl.BoolVar(&c.postgres, "postgres", true, "start PostgreSQL (Debian's postgresql-15, if installed) and pacer-export")
	fl.Usage = func() {
		fmt.Fprintf(fl.Output(), "Usage: pacer-dev [flags]  (make run; make run RUN_ARGS='--hosts 2')\n\n"+
			"Brings up a local pacer fleet in --dir: redis-server, embedded etcd and NATS, a demo\n"+
			"campaign and --hosts pacerd, and PostgreSQL with pacer-export when postgresql-15 is\n"+
			"installed. Writes --dir/env for `. .run/env`. Ctrl-C stops everything.\n\nFlags:\n")
		fl.PrintDefaults()
	}
	if err := fl.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil, nil // asked for, and printed
		}
		return nil, fmt.Errorf("%w (run `pacer-dev --help` for the flags)", err)
	}
	if fl.NArg() > 0 {
		return nil, fmt.Errorf("unexpected argument %q (run `pacer-dev --help` for the flags)", fl.Arg(0))
	}
	return &c, c.validate()
}

func (c *config) validate() error {
	if c.hosts < 1 || c.hosts > 9 {
		return errors.New("--hosts: 1 to 9")
	}
	if c.adminPort < 1 || c.exportPort() > 65535 {
		return fmt.Errorf("--admin-port %d: want a port from 1 to %d (pacerd i listens on it + i - 1, pacer-export on it + 9)", c.adminPort, 65535-9)
	}
	for _, p := range []int{c.etcdPort, c.etcdPeerPort, c.natsPort} {
		if p < 0 || p > 65535 {
			return fmt.Errorf("port %d: want 0 (any free port) to 65535", p)
		}
	}
	return nil
}

// exportPort is pacer-export's metrics port: past every pacerd's.
func (c *config) exportPort() int { return c.adminPort + 9 }

// fleet is what run started, stopped in reverse order.
type fleet struct {
	cfg     *config
	stops   []func()
	redis   string // the ledger's socket
	rdb     redis.UniversalClient
	etcd    string
	nats    string
	sockets []string
	daemons []*proc
	billing *billing // nil: no PostgreSQL
}

func (f *fleet) onStop(fn func()) { f.stops = append(f.stops, fn) }

func (f *fleet) stop() {
	for i := len(f.stops) - 1; i >= 0; i-- {
		f.stops[i]()
	}
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	cfg, err := parseFlags(args, stderr)
	if cfg == nil || err != nil {
		return err
	}
	f := &fleet{cfg: cfg}
	defer f.stop()
	if err := f.prepare(); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "starting redis-server, etcd, NATS and %d pacerd in %s…\n", cfg.hosts, cfg.dir)
	if err := f.startServers(ctx); err != nil {
		return err
	}
	if ctx.Err() != nil {
		fmt.Fprintln(stdout, "stopping…")
		return nil
	}
	if err := f.startDaemons(ctx); err != nil {
		if ctx.Err() != nil {
			fmt.Fprintln(stdout, "stopping…")
			return nil
		}
		return err
	}
	if cfg.postgres {
		f.startBilling(ctx, stdout)
	}
	if err := f.writeEnv(); err != nil {
		return err
	}
	f.printBanner(stdout)
	return f.wait(ctx, stdout)
}

// prepare locks the directory and checks ports and binaries before
// anything starts.
func (f *fleet) prepare() error {
	c := f.cfg
	var err error
	if c.abs, err = filepath.Abs(c.dir); err != nil {
		return err
	}
	if err := os.MkdirAll(c.abs, 0o750); err != nil {
		return err
	}
	// One fleet per directory: a second one would delete the first's
	// Redis socket and wait for ever on etcd's data directory.
	unlock, err := lockDir(c.abs, c.dir)
	if err != nil {
		return err
	}
	f.onStop(unlock)
	ports := []namedPort{{"--etcd-port", c.etcdPort}, {"--etcd-peer-port", c.etcdPeerPort}, {"--nats-port", c.natsPort}}
	for i := 0; i < c.hosts; i++ {
		ports = append(ports, namedPort{"--admin-port", c.adminPort + i})
	}
	if c.postgres {
		ports = append(ports, namedPort{"--admin-port", c.exportPort()})
	}
	if err := checkPortsFree(ports); err != nil {
		return err
	}
	if c.curvesAbs, err = filepath.Abs(c.curves); err != nil {
		return err
	}
	if _, err := os.Stat(filepath.Join(c.bin, "pacerd")); err != nil {
		return fmt.Errorf("%w (run `make build` first, or `make run` which builds)", err)
	}
	return nil
}

// startServers starts redis-server, etcd and NATS, and stores the demo
// campaign.
func (f *fleet) startServers(ctx context.Context) error {
	c := f.cfg
	rs, err := redisproc.Start(ctx, redisproc.Options{Dir: c.abs, Persistent: true})
	if err != nil {
		return err
	}
	f.onStop(rs.Stop)
	f.redis = rs.Socket
	etcd, err := embedded.StartEtcdOn(filepath.Join(c.abs, "etcd"), c.etcdPort, c.etcdPeerPort)
	if err != nil {
		return err
	}
	f.onStop(func() { etcd.Close() })
	f.etcd = etcd.Endpoint
	nats, err := embedded.StartNATSOn(c.natsPort)
	if err != nil {
		return err
	}
	f.onStop(nats.Close)
	f.nats = nats.URL
	rdb, err := lease.NewClient([]string{f.redis})
	if err != nil {
		return err
	}
	f.onStop(func() { rdb.Close() })
	f.rdb = rdb
	ledger := lease.New(rdb, lease.Config{}, nil)
	// 86,400 currency units a day: a pace of 1,000,000 micros (1 unit) a second.
	_, err = ledger.PutCampaign(ctx, lease.Campaign{ID: "demo", DailyMicros: 86_400_000_000, TZ: "UTC", Curve: "flat", Shards: 8, State: lease.StateActive})
	return err
}

// startDaemons starts the pacerds and waits for their sockets.
func (f *fleet) startDaemons(ctx context.Context) error {
	c := f.cfg
	f.onStop(func() {
		for _, p := range f.daemons {
			p.stop()
		}
	})
	for i := 1; i <= c.hosts; i++ {
		sock := filepath.Join(c.abs, fmt.Sprintf("pacer-%d.sock", i))
		logf, err := os.Create(filepath.Join(c.abs, fmt.Sprintf("pacerd-%d.log", i)))
		if err != nil {
			return err
		}
		f.onStop(func() { logf.Close() })
		cmd := exec.Command(filepath.Join(c.bin, "pacerd"),
			"--redis", f.redis, "--socket", sock, "--etcd", f.etcd, "--nats", f.nats,
			"--holder", fmt.Sprintf("dev-%d", i), "--curves", c.curvesAbs, "--state-dir", filepath.Join(c.abs, fmt.Sprintf("state-%d", i)),
			"--admin", fmt.Sprintf("127.0.0.1:%d", c.adminPort+i-1), "--log-format", "console")
		cmd.Stdout, cmd.Stderr = logf, logf
		// If pacer-dev dies without stopping them (SIGKILL), the
		// daemons still get their SIGTERM and give leases back.
		cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGTERM}
		p, err := start(cmd)
		if err != nil {
			return fmt.Errorf("start pacerd: %w (run `make build` first)", err)
		}
		f.daemons = append(f.daemons, p)
		f.sockets = append(f.sockets, sock)
	}
	for _, s := range f.sockets {
		if err := waitSocket(ctx, s, 15*time.Second); err != nil {
			return fmt.Errorf("pacerd on %s: %w (see %s/pacerd-*.log)", s, err, c.dir)
		}
	}
	return nil
}

func rel(p string) string {
	if r, err := filepath.Rel(mustGetwd(), p); err == nil && !strings.HasPrefix(r, "..") {
		return r
	}
	return p
}

func (f *fleet) envPath() string { return filepath.Join(f.cfg.abs, "env") }

// writeEnv writes --dir/env, removed when the fleet stops.
func (f *fleet) writeEnv() error {
	env := fmt.Sprintf("# Written by pacer-dev (make run) while its fleet is up; removed when it stops.\n"+
		"# `. %s` points pacerctl (PACER_*) and your shell at this fleet.\n"+
		"export PACER_REDIS=%s\nexport PACER_SOCKET=%s\nexport PACER_CURVES=%s\nexport PACER_NATS=%s\nexport PACER_ETCD=%s\n"+
		"export PACER_ADMIN=http://127.0.0.1:%d\nexport PACER_SOCKETS=%q\n",
		rel(f.envPath()), f.redis, f.sockets[0], f.cfg.curvesAbs, f.nats, f.etcd, f.cfg.adminPort, strings.Join(f.sockets, " "))
	if f.billing != nil {
		env += fmt.Sprintf("export PACER_SQL=%q\n", f.billing.dsn)
	}
	if err := os.WriteFile(f.envPath(), []byte(env), 0o640); err != nil {
		return err
	}
	f.onStop(func() { os.Remove(f.envPath()) })
	return nil
}

// wait runs until Ctrl-C or a child's exit.
func (f *fleet) wait(ctx context.Context, stdout io.Writer) error {
	probes := []probe{redisProbe(f.rdb, rel(f.redis))}
	for i := 1; i <= f.cfg.hosts; i++ {
		probes = append(probes, readyProbe(fmt.Sprintf("pacerd-%d", i), fmt.Sprintf("http://127.0.0.1:%d/readyz", f.cfg.adminPort+i-1)))
	}
	stopWatch := watchInBackground(ctx, stdout, probes)
	defer stopWatch()
	exited := make(chan *proc, len(f.daemons)+1)
	for _, p := range f.daemons {
		go func() { <-p.done; exited <- p }()
	}
	if f.billing != nil {
		go func() { <-f.billing.exporter.done; exited <- f.billing.exporter }()
	}
	select {
	case <-ctx.Done():
		stopWatch()
		fmt.Fprintln(stdout, "\nstopping the fleet…")
		return nil
	case p := <-exited:
		return fmt.Errorf("%s exited: %v (see %s/%s*.log)", filepath.Base(p.cmd.Path), p.err, f.cfg.dir, filepath.Base(p.cmd.Path))
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
