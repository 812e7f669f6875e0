// Package compat_test drives a real pacerd — daemon, ledger in a real
// redis-server, RESP server on a Unix socket — with the third-party Redis
// clients bidders use: go-redis (RESP2 and RESP3), redis-cli, Debian's
// python3-redis, Node's ioredis and node-redis v4 and v5 (RESP2 and RESP3).
// Each client makes single calls, non-transactional and transactional
// pipelines, and auto-pipelined calls where it has them.
//
// The clients are installed by scripts/deps.sh; a missing one fails its test
// with a message saying so, so that CI cannot pass without running them.
package compat_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/pacer/pacer/daemon"
	"github.com/pacer/pacer/internal/redistest"
	"github.com/pacer/pacer/lease"
	"github.com/pacer/pacer/transport"
	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"
)

const depsHint = "install the compatibility suite's clients with scripts/deps.sh (as root, or with sudo)"

// startPacerd runs the daemon as pacerd does, on a temporary socket, with
// campaign "demo" (a large budget, flat curve) in a real redis-server, and
// waits until a SPEND is allowed. It returns the socket path.
func startPacerd(t *testing.T) string {
	t.Helper()
	rs := redistest.Start(t)
	ledger := lease.New(rs.Client(), lease.Config{}, nil)
	// Deadlines here are what a race-built daemon can take at a load
	// average of 20, not what it takes on an idle machine (milliseconds).
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	if _, err := ledger.PutCampaign(ctx, lease.Campaign{ID: "demo", DailyMicros: 86_400_000_000_000, TZ: "UTC",
		Curve: "flat", Shards: 4, State: lease.StateActive}); err != nil {
		t.Fatal(err)
	}
	d, err := daemon.New(ledger, daemon.Config{Holder: "compat", Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	dir, err := os.MkdirTemp("", "pacer-compat")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	sock := filepath.Join(dir, "pacer.sock")
	ln, err := transport.ListenUnix(sock, 0)
	if err != nil {
		t.Fatal(err)
	}
	runCtx, stop := context.WithCancel(context.Background())
	runDone := make(chan error, 1)
	go func() { runDone <- d.Run(runCtx) }()
	srv := transport.NewServer(d, transport.ServerConfig{Server: socketServer(), MaxAmountMicros: 1_000_000_000})
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	t.Cleanup(func() {
		srv.Close()
		<-served
		stop()
		<-runDone
		cctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		d.Close(cctx)
	})

	// The first SPEND of a campaign fetches a lease; wait for one to be
	// allowed, so the clients' checks below see a daemon in steady state.
	c := redis.NewClient(&redis.Options{Network: "unix", Addr: sock, Protocol: 2})
	defer c.Close()
	deadline := time.Now().Add(2 * time.Minute)
	for {
		n, err := c.Do(ctx, "SPEND", "demo", 1).Int64()
		if err == nil && n == 1 {
			return sock
		}
		if time.Now().After(deadline) {
			t.Fatalf("pacerd never allowed a SPEND of demo: %d, %v", n, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// wantDecision checks a SPEND reply is one of pacer's three answers.
func wantDecision(t *testing.T, what string, v any, err error) {
	t.Helper()
	if err != nil {
		t.Errorf("%s: %v", what, err)
		return
	}
	if n, ok := v.(int64); !ok || n < -1 || n > 1 {
		t.Errorf("%s = %#v, want 1, 0 or -1", what, v)
	}
}

// balanceFields normalises a BALANCE reply: a flat array under RESP2, a
// map under RESP3.
func balanceFields(t *testing.T, v any) map[string]any {
	t.Helper()
	out := map[string]any{}
	switch r := v.(type) {
	case []any:
		for i := 0; i+1 < len(r); i += 2 {
			out[fmt.Sprint(r[i])] = r[i+1]
		}
	case map[any]any:
		for k, v := range r {
			out[fmt.Sprint(k)] = v
		}
	case map[string]any:
		out = r
	default:
		t.Fatalf("BALANCE reply %#v (%T)", v, v)
	}
	for _, k := range []string{"tokens", "reserve", "pace", "state"} {
		if _, ok := out[k]; !ok {
			t.Errorf("BALANCE reply %#v lacks %q", v, k)
		}
	}
	return out
}

func TestGoRedis(t *testing.T) {
	sock := startPacerd(t)
	for _, proto := range []int{2, 3} {
		t.Run(fmt.Sprintf("RESP%d", proto), func(t *testing.T) {
			ctx := context.Background()
			// Default options, as a user would write them: go-redis
			// sends HELLO and CLIENT SETINFO on connect.
			c := redis.NewClient(&redis.Options{Network: "unix", Addr: sock, Protocol: proto, ClientName: "compat"})
			defer c.Close()
			v, err := c.Do(ctx, "SPEND", "demo", 1000).Result()
			wantDecision(t, "SPEND", v, err)
			if err := c.Do(ctx, "SPEND", "nosuch", 1).Err(); err == nil || !strings.Contains(err.Error(), `unknown campaign "nosuch"`) {
				t.Errorf("SPEND nosuch: %v", err)
			}
			bal, err := c.Do(ctx, "BALANCE", "demo").Result()
			if err != nil {
				t.Fatal(err)
			}
			f := balanceFields(t, bal)
			if proto == 3 {
				if _, ok := bal.(map[any]any); !ok {
					t.Errorf("BALANCE under RESP3 = %T, want a map", bal)
				}
			}
			if f["state"] != "active" {
				t.Errorf("BALANCE state = %v", f["state"])
			}
			if name, err := c.ClientGetName(ctx).Result(); err != nil || name != "compat" {
				t.Errorf("CLIENT GETNAME = %q, %v", name, err)
			}
			info, err := c.Info(ctx).Result()
			if err != nil || !strings.Contains(info, "# pacer") {
				t.Errorf("INFO = %q, %v", info, err)
			}
			if s, err := c.Echo(ctx, "hi").Result(); err != nil || s != "hi" {
				t.Errorf("ECHO = %q, %v", s, err)
			}

			for _, tx := range []bool{false, true} {
				var p redis.Pipeliner = c.Pipeline()
				if tx {
					p = c.TxPipeline()
				}
				e1 := p.Echo(ctx, "first")
				s1 := p.Do(ctx, "SPEND", "demo", 1000, "auction-1")
				b := p.Do(ctx, "BALANCE", "demo")
				r := p.Do(ctx, "REFUND", "demo", 1000, "auction-1")
				e2 := p.Echo(ctx, "last")
				if _, err := p.Exec(ctx); err != nil {
					t.Fatalf("pipeline (tx=%v): %v", tx, err)
				}
				if e1.Val() != "first" || e2.Val() != "last" {
					t.Errorf("pipeline (tx=%v) out of order: %q, %q", tx, e1.Val(), e2.Val())
				}
				wantDecision(t, "pipelined SPEND", s1.Val(), s1.Err())
				balanceFields(t, b.Val())
				if n, err := r.Int64(); err != nil || n != 1 {
					t.Errorf("pipelined REFUND = %d, %v", n, err)
				}
			}
		})
	}
}

func TestRedisCLI(t *testing.T) {
	sock := startPacerd(t)
	if _, err := exec.LookPath("redis-cli"); err != nil {
		t.Fatalf("redis-cli not found: %s", depsHint)
	}
	cli := func(stdin string, args ...string) string {
		t.Helper()
		cmd := exec.Command("redis-cli", append([]string{"-s", sock}, args...)...)
		cmd.Stdin = strings.NewReader(stdin)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("redis-cli %q: %v\n%s", args, err, out)
		}
		return string(out)
	}
	checks := []struct {
		stdin string
		args  []string
		want  []string // in order
	}{
		{"", []string{"HELLO", "3"}, []string{"server", "pacerd", "proto", "3"}},
		// -3 is redis-cli 7's RESP3 switch; --json also speaks RESP3
		// and prints a map as a JSON object.
		{"", []string{"-3", "BALANCE", "demo"}, []string{"tokens", "reserve", "pace", "state", "active"}},
		{"", []string{"--json", "BALANCE", "demo"}, []string{`{"tokens":`, `"state":"active"}`}},
		{"", []string{"-3", "SPEND", "demo", "1"}, nil},
		{"", []string{"BALANCE", "demo"}, []string{"tokens", "reserve", "pace", "state", "active"}},
		{"MULTI\nSPEND demo 1000\nECHO queued-echo\nEXEC\n", nil, []string{"OK", "QUEUED", "QUEUED", "queued-echo"}},
		{"HELLO 3\nMULTI\nBALANCE demo\nEXEC\n", []string{"-3"}, []string{"proto", "OK", "QUEUED", "tokens", "state", "active"}},
		{"", []string{"COMMAND", "DOCS", "SPEND"}, []string{"spend", "summary", "allowed"}},
		{"", []string{"NOSUCH"}, []string{"ERR unknown command 'NOSUCH'"}},
	}
	for _, c := range checks {
		out := cli(c.stdin, c.args...)
		rest := out
		for _, w := range c.want {
			i := strings.Index(rest, w)
			if i < 0 {
				t.Errorf("redis-cli %q (stdin %q) printed\n%s\nwant %q (in order %q)", c.args, c.stdin, out, w, c.want)
				break
			}
			rest = rest[i+len(w):]
		}
		if c.want == nil {
			// Not on a terminal, redis-cli prints replies raw.
			if !slices.Contains([]string{"1", "0", "-1"}, strings.TrimSpace(out)) {
				t.Errorf("redis-cli %q printed %q, want an integer decision", c.args, out)
			}
		}
	}
}

// runScript runs a client script with the socket as its argument; the
// script prints what it checked and exits non-zero on any failure.
func runScript(t *testing.T, sock string, name string, args ...string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, append(args, sock)...)
	out, err := cmd.CombinedOutput()
	t.Logf("%s %s:\n%s", name, strings.Join(args, " "), out)
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		t.Fatalf("%s failed (%v); its output is above", filepath.Base(args[len(args)-1]), err)
	} else if err != nil {
		t.Fatalf("%s: %v (%s)", name, err, depsHint)
	}
}

// TestPython drives Debian's python3-redis, with the system python3 it is
// packaged for (not a python3 earlier on PATH, which may lack it).
func TestPython(t *testing.T) {
	py := "/usr/bin/python3"
	if out, err := exec.Command(py, "-c", "import redis; print(redis.__version__)").CombinedOutput(); err != nil {
		t.Fatalf("%s cannot import redis (python3-redis): %v\n%s\n%s", py, err, out, depsHint)
	}
	sock := startPacerd(t)
	runScript(t, sock, py, "python/clients.py")
}

// TestNode drives ioredis, node-redis v5 (RESP2 and RESP3) and node-redis
// v4, installed in compat/node/node_modules by scripts/deps.sh.
func TestNode(t *testing.T) {
	if _, err := exec.LookPath("node"); err != nil {
		t.Fatalf("node not found: %s", depsHint)
	}
	for _, m := range []string{"ioredis", "redis", "redis4"} {
		if _, err := os.Stat(filepath.Join("node", "node_modules", m, "package.json")); err != nil {
			t.Fatalf("compat/node/node_modules/%s missing: %s", m, depsHint)
		}
	}
	sock := startPacerd(t)
	runScript(t, sock, "node", "node/clients.mjs")
}

// socketServer is the bidder socket's server under test. TestMain runs the
// suite once with the default (transport.DefaultSocketServer on Linux) and
// once more per other server (goroutines, and on Linux the event loops that
// are not the default), each in a child process, so every client is checked
// against every server.
func socketServer() transport.SocketServer {
	return transport.SocketServer(os.Getenv("PACER_TEST_SOCKET_SERVER"))
}

func TestMain(m *testing.M) {
	code := m.Run()
	if os.Getenv("PACER_TEST_SOCKET_SERVER") == "" {
		others := []transport.SocketServer{transport.Goroutines}
		if runtime.GOOS == "linux" {
			for _, kind := range []transport.SocketServer{transport.EventLoop, transport.Hybrid} {
				if kind != transport.DefaultSocketServer {
					others = append(others, kind)
				}
			}
		}
		for _, kind := range others {
			if code != 0 {
				break
			}
			fmt.Printf("=== compat: the same clients against socket_server %s\n", kind)
			cmd := exec.Command(os.Args[0], os.Args[1:]...)
			cmd.Env = append(os.Environ(), "PACER_TEST_SOCKET_SERVER="+string(kind))
			cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
			if err := cmd.Run(); err != nil {
				fmt.Printf("compat with socket_server %s: %v\n", kind, err)
				code = 1
			}
		}
	}
	os.Exit(code)
}
