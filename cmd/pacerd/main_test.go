package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/pacer/pacer"
	"github.com/pacer/pacer/config"
	"github.com/pacer/pacer/internal/proctest"
	"github.com/pacer/pacer/internal/redistest"
	"github.com/pacer/pacer/lease"
	"github.com/pacer/pacer/transport"
	"github.com/redis/go-redis/v9"
)

var pacerdBin string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "pacerd-bin-")
	if err != nil {
		panic(err)
	}
	if pacerdBin, err = proctest.Build(dir, "github.com/pacer/pacer/cmd/pacerd", true); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

var ctx = context.Background()

// stack is a redis-server and a way to start pacerd processes against it.
type stack struct {
	t      *testing.T
	redis  *redistest.Server
	ledger *lease.Ledger
	dir    string
	// extraConfig is appended to testConfig (or to baseConfig, if set).
	extraConfig string
	// baseConfig replaces testConfig when set.
	baseConfig string
	// bin is the pacerd binary to start; "" means pacerdBin (-race).
	bin string
}

func newStack(t *testing.T) *stack {
	t.Helper()
	r := redistest.Start(t)
	dir, err := os.MkdirTemp("", "pacerd-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return &stack{t: t, redis: r, ledger: lease.New(r.Client(), lease.Config{}, nil), dir: dir}
}

// config has short leases, so a test sees expiry and settlement in seconds.
const testConfig = `
max_amount_micros: 10000000
admin: ""
lease:
  window: 2s
  skew_bound: 100ms
  grace: 300ms
  cap_window: 5m
  burst_window: 1s
tick_interval: 20ms
campaign_refresh: 200ms
`

// proc is a pacerd process (killed and waited for at the test's cleanup,
// its log shown if the test failed) and its socket.
type proc struct {
	*proctest.Proc
	socket string
}

func (s *stack) start(holder string) *proc { return s.startWith(holder, nil, nil) }

// startWith starts pacerd with extra flags and environment.
func (s *stack) startWith(holder string, extraArgs, env []string) *proc {
	s.t.Helper()
	cfg := filepath.Join(s.dir, "pacerd.yaml")
	base := testConfig
	if s.baseConfig != "" {
		base = s.baseConfig
	}
	if err := os.WriteFile(cfg, []byte(base+s.extraConfig), 0o644); err != nil {
		s.t.Fatal(err)
	}
	bin := pacerdBin
	if s.bin != "" {
		bin = s.bin
	}
	sock := filepath.Join(s.dir, holder+".sock")
	args := append([]string{"--config", cfg, "--redis", s.redis.Socket, "--socket", sock, "--holder", holder,
		"--curves", filepath.Join(s.dir, "no-curves"), "--state-dir", filepath.Join(s.dir, "state-"+holder)}, extraArgs...)
	p := &proc{Proc: proctest.Start(s.t, "pacerd "+holder, bin, args, env), socket: sock}
	// A -race pacerd's start at a load average of 20, not an idle machine's.
	p.WaitListen(s.t, "unix", sock, time.Minute)
	return p
}

func (s *stack) campaign(id string, daily int64) {
	s.t.Helper()
	_, err := s.ledger.PutCampaign(ctx, lease.Campaign{ID: id, DailyMicros: daily, TZ: "UTC", Curve: "flat", Shards: 4, State: lease.StateActive})
	if err != nil {
		s.t.Fatal(err)
	}
}

func (s *stack) check(id string) lease.Shard {
	s.t.Helper()
	day := time.Now().UTC().Format("2006-01-02")
	total, problems, err := s.ledger.CheckDay(ctx, id, day)
	if err != nil {
		s.t.Fatal(err)
	}
	for _, p := range problems {
		s.t.Errorf("conservation: %s", p)
	}
	return total
}

func dial(t *testing.T, socket string) *transport.Client {
	t.Helper()
	c, err := transport.Dial(ctx, socket, transport.ClientOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// spendFor spends in a loop for d and returns the micros allowed.
func spendFor(t *testing.T, c *transport.Client, id string, amount int64, d time.Duration) int64 {
	t.Helper()
	var allowed int64
	for end := time.Now().Add(d); time.Now().Before(end); {
		dec, err := c.Spend(ctx, id, amount, "")
		if err != nil {
			t.Fatal(err)
		}
		if dec == pacer.Allowed {
			allowed += amount
		}
	}
	return allowed
}

func TestSpendAndHostileInput(t *testing.T) {
	s := newStack(t)
	s.campaign("demo", 86_400_000_000)
	p := s.start("h1")
	c := dial(t, p.socket)
	dec, err := c.Spend(ctx, "demo", 1000, "")
	if err != nil || dec != pacer.Allowed {
		t.Fatalf("SPEND demo 1000 = %v, %v; want allowed", dec, err)
	}
	bad := []struct {
		args []any
		want string
	}{
		{[]any{"SPEND", "demo"}, "wrong number of arguments"},
		{[]any{"SPEND", "demo", "abc"}, "integer"},
		{[]any{"SPEND", "demo", "-5"}, "positive"},
		{[]any{"SPEND", "demo", "0"}, "positive"},
		{[]any{"SPEND", "demo", "99999999999999999999"}, "out of range"},
		{[]any{"SPEND", "demo", "10000001"}, "exceeds the per-call maximum"},
		{[]any{"SPEND", "nosuch", "5"}, `unknown campaign "nosuch"`},
		{[]any{"REFUND", "demo", "999999"}, "exceeds"},
		{[]any{"FLUSHALL"}, "unknown command"},
	}
	raw := rawClient(t, p.socket)
	for _, b := range bad {
		err := raw.Do(ctx, b.args...).Err()
		if err == nil || !strings.Contains(err.Error(), b.want) {
			t.Errorf("%v: err = %v, want it to mention %q", b.args, err, b.want)
		}
	}
	// The daemon keeps serving.
	if err := c.Ping(ctx); err != nil {
		t.Fatal(err)
	}
	if err := c.Refund(ctx, "demo", 1000, ""); err != nil {
		t.Fatalf("REFUND of an allowed amount: %v", err)
	}
	s.check("demo")
}

// SIGTERM: stop serving, give unused micros back at once, exit 0.
func TestSIGTERMReleasesLeases(t *testing.T) {
	s := newStack(t)
	s.campaign("c", 86_400_000_000)
	p := s.start("h1")
	spendFor(t, dial(t, p.socket), "c", 1000, 500*time.Millisecond)
	if sh := s.check("c"); sh.Leased == 0 {
		t.Fatal("no lease outstanding while spending")
	}
	p.Cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.Done():
		if err := p.Err(); err != nil {
			t.Fatalf("pacerd exit after SIGTERM: %v\n%s", err, p.Output.String())
		}
	case <-time.After(10 * time.Second):
		t.Fatal("pacerd did not exit within 10s of SIGTERM")
	}
	sh := s.check("c")
	if sh.Leased != 0 {
		t.Fatalf("after SIGTERM %d micros are still leased; want all released", sh.Leased)
	}
	if sh.Lost != 0 {
		t.Fatalf("lost %d micros on a clean shutdown", sh.Lost)
	}
}

// SIGKILL: the restarted daemon reads its lease journal and gives back what
// the dead one had not dripped, so nothing is settled as lost; the ledger
// accounts for every micro and nothing was overspent.
func TestSIGKILLThenRestart(t *testing.T) {
	s := newStack(t)
	s.campaign("c", 86_400_000_000)
	p := s.start("h1")
	allowed := spendFor(t, dial(t, p.socket), "c", 1000, 500*time.Millisecond)
	p.Cmd.Process.Kill()
	<-p.Done()
	held := s.check("c").Leased
	if held == 0 {
		t.Fatal("the killed daemon held no lease; the test proves nothing")
	}

	// A restarted daemon reclaims the dead leases and goes on spending; a
	// settlement after expiry plus grace finds nothing of them left.
	p2 := s.start("h1")
	c2 := dial(t, p2.socket)
	allowed2 := spendFor(t, c2, "c", 1000, 3*time.Second)
	day := time.Now().UTC().Format("2006-01-02")
	for i := range 4 {
		if _, err := s.ledger.Settle(ctx, lease.ShardKey{Campaign: "c", Day: day, Shard: i}, time.Now(), 300*time.Millisecond, 0); err != nil {
			t.Fatal(err)
		}
	}
	sh := s.check("c")
	if sh.Lost != 0 {
		t.Fatalf("%d of the %d micros the killed daemon held were settled as lost; want them reclaimed", sh.Lost, held)
	}
	if !strings.Contains(p2.Output.String(), "reclaimed a lease left by the previous run") {
		t.Fatalf("the restarted daemon did not reclaim its predecessor's leases:\n%s", p2.Output.String())
	}
	if allowed+allowed2 > sh.Spent+sh.Leased {
		t.Fatalf("allowed %d > spent %d + leased %d: overspend", allowed+allowed2, sh.Spent, sh.Leased)
	}
}

func rawClient(t *testing.T, socket string) *redis.Client {
	c := redis.NewClient(&redis.Options{Network: "unix", Addr: socket, MaxRetries: -1, Protocol: 2})
	t.Cleanup(func() { c.Close() })
	return c
}

// Repeated warnings (a ledger down, every tick failing the same way) are
// rate-limited, distinct ones are not.
func TestLogsAreRateLimited(t *testing.T) {
	var buf bytes.Buffer
	log, err := newLogger(config.Log{Format: "json", Level: "info"}, &buf)
	if err != nil {
		t.Fatal(err)
	}
	for range 1000 {
		log.Warn("lease grant failed")
	}
	log.Warn("something else")
	lines := strings.Count(buf.String(), "\n")
	if lines < 6 || lines > 20 {
		t.Fatalf("%d lines logged for 1000 identical warnings and 1 other; want a handful", lines)
	}
	if !strings.Contains(buf.String(), "something else") {
		t.Fatal("a distinct message was dropped")
	}
}
