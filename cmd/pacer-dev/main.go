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
	"syscall"
	"time"

	"github.com/pacer/pacer/internal/embedded"
	"github.com/pacer/pacer/internal/redisproc"
	"github.com/pacer/pacer/lease"
	"github.com/redis/go-redis/v9"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "pacer-dev:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fl := flag.NewFlagSet("pacer-dev", flag.ContinueOnError)
	fl.SetOutput(stderr)
	dir := fl.String("dir", ".run", "state `dir` for sockets, Redis AOF, etcd data and logs")
	bin := fl.String("bin", "bin", "`dir` holding the pacerd binary")
	curves := fl.String("curves", "configs/curves", "pacing curves `dir`")
	hosts := fl.Int("hosts", 3, "how many pacerd to start")
	if err := fl.Parse(args); err != nil {
		return err
	}
	if *hosts < 1 || *hosts > 9 {
		return errors.New("--hosts: 1 to 9")
	}
	abs, err := filepath.Abs(*dir)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(abs, 0o750); err != nil {
		return err
	}

	rs, err := redisproc.Start(ctx, redisproc.Options{Dir: abs, Persistent: true})
	if err != nil {
		return err
	}
	defer rs.Stop()
	redisSock := rs.Socket

	etcd, err := embedded.StartEtcd(filepath.Join(abs, "etcd"))
	if err != nil {
		return err
	}
	defer etcd.Close()
	nats, err := embedded.StartNATS()
	if err != nil {
		return err
	}
	defer nats.Close()

	rdb := redis.NewClient(&redis.Options{Network: "unix", Addr: redisSock})
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
			"--holder", fmt.Sprintf("dev-%d", i), "--curves", *curves, "--state-dir", filepath.Join(abs, fmt.Sprintf("state-%d", i)),
			"--admin", fmt.Sprintf("127.0.0.1:%d", 9463+i), "--log-format", "console")
		c.Stdout, c.Stderr = logf, logf
		p, err := start(c)
		if err != nil {
			return fmt.Errorf("start pacerd: %w (run `make build` first)", err)
		}
		daemons = append(daemons, p)
		sockets = append(sockets, sock)
	}
	for _, s := range sockets {
		if err := waitSocket(s, 15*time.Second); err != nil {
			return fmt.Errorf("pacerd on %s: %w (see %s/pacerd-*.log)", s, err, *dir)
		}
	}

	rel := func(p string) string {
		if r, err := filepath.Rel(mustGetwd(), p); err == nil && !strings.HasPrefix(r, "..") {
			return r
		}
		return p
	}
	fmt.Fprintf(stdout, `
  pacer dev fleet is up
  ---------------------
  redis-server (ledger)  %s
  etcd (election)        %s
  NATS (broadcasts)      %s
  pacerd sockets         %s … (%d hosts; logs in %s/pacerd-*.log)
  admin (metrics)        http://127.0.0.1:9464/metrics …
  campaign               demo: 86,400 units/day, flat curve (1,000,000 micros/s)

  Try, in another terminal:
    redis-cli -s %s SPEND demo 1000        # (integer) 1
    redis-cli -s %s BALANCE demo
    redis-benchmark -s %s -n 200000 -c 50 SPEND demo 1000   # far above pace: mostly 0s
    bin/pacerctl --redis %s --etcd %s status
    bin/pacerctl --redis %s --nats %s campaign pause demo      # every host answers -1
    bin/pacerctl --redis %s --nats %s campaign resume demo
    bin/pacerctl --redis %s check

  Ctrl-C stops the fleet (leases go back to the ledger).
`, rel(redisSock), etcd.Endpoint, nats.URL, rel(sockets[0]), len(sockets), *dir,
		rel(sockets[0]), rel(sockets[0]), rel(sockets[0]),
		rel(redisSock), etcd.Endpoint, rel(redisSock), nats.URL, rel(redisSock), nats.URL, rel(redisSock))

	exited := make(chan *proc, len(daemons))
	for _, p := range daemons {
		go func() { <-p.done; exited <- p }()
	}
	select {
	case <-ctx.Done():
		fmt.Fprintln(stdout, "\nstopping the fleet…")
		return nil
	case p := <-exited:
		return fmt.Errorf("a pacerd exited: %v (see %s/pacerd-*.log)", p.err, *dir)
	}
}

func mustGetwd() string {
	wd, _ := os.Getwd()
	return wd
}

func waitSocket(path string, timeout time.Duration) error {
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
		time.Sleep(20 * time.Millisecond)
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
func (p *proc) stop() {
	p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(10 * time.Second):
		p.cmd.Process.Kill()
		<-p.done
	}
}
