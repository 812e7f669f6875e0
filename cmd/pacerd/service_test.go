package main

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/pacer/pacer"
	"github.com/pacer/pacer/internal/proctest"
	"github.com/pacer/pacer/transport"
	"github.com/redis/go-redis/v9"
)

// A test NOTIFY_SOCKET receives READY, STATUS, WATCHDOG and STOPPING, in that
// order: READY only once the socket listens, STOPPING on SIGTERM.
func TestSdNotifySequence(t *testing.T) {
	s := newStack(t)
	s.campaign("c", 86_400_000_000)
	notifyPath := filepath.Join(s.dir, "notify.sock")
	conn, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: notifyPath, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	msgs := make(chan string, 100)
	go func() {
		buf := make([]byte, 4096)
		for {
			n, err := conn.Read(buf)
			if err != nil {
				close(msgs)
				return
			}
			msgs <- string(buf[:n])
		}
	}()
	p := s.startWith("h1", nil, []string{"NOTIFY_SOCKET=" + notifyPath, "WATCHDOG_USEC=600000"})
	var seen []string
	next := func(what string) string {
		t.Helper()
		select {
		case m := <-msgs:
			seen = append(seen, m)
			return m
		case <-time.After(10 * time.Second):
			t.Fatalf("no %s notification; got %q", what, seen)
		}
		return ""
	}
	if m := next("READY"); m != "READY=1" {
		t.Fatalf("first notification %q, want READY=1", m)
	}
	// The socket listens by READY time.
	if c, err := net.Dial("unix", p.socket); err != nil {
		t.Fatalf("READY before the socket listens: %v", err)
	} else {
		c.Close()
	}
	if m := next("STATUS"); !strings.HasPrefix(m, "STATUS=") {
		t.Fatalf("second notification %q, want STATUS=", m)
	}
	for m := next("WATCHDOG"); m != "WATCHDOG=1"; m = next("WATCHDOG") {
		if !strings.HasPrefix(m, "STATUS=") {
			t.Fatalf("unexpected notification %q before WATCHDOG", m)
		}
	}
	p.Cmd.Process.Signal(syscall.SIGTERM)
	for m := next("STOPPING"); m != "STOPPING=1"; m = next("STOPPING") {
		if m != "WATCHDOG=1" && !strings.HasPrefix(m, "STATUS=") {
			t.Fatalf("unexpected notification %q before STOPPING", m)
		}
	}
	if err := p.Err(); err != nil {
		t.Fatalf("exit after SIGTERM: %v", err)
	}
}

// Under systemd-socket-activate (Debian's systemd package), pacerd serves on
// the socket it is handed instead of creating one.
func TestSocketActivation(t *testing.T) {
	tool, err := exec.LookPath("systemd-socket-activate")
	if err != nil {
		t.Skip("systemd-socket-activate not installed (Debian package systemd); socket activation untested here")
	}
	s := newStack(t)
	s.campaign("c", 86_400_000_000)
	cfg := filepath.Join(s.dir, "pacerd.yaml")
	if err := os.WriteFile(cfg, []byte(testConfig), 0o644); err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(s.dir, "activated.sock")
	ownSock := filepath.Join(s.dir, "not-used.sock")
	cmd := exec.Command(tool, "-l", sock, pacerdBin, "--config", cfg, "--redis", s.redis.Socket,
		"--socket", ownSock, "--holder", "act", "--curves", filepath.Join(s.dir, "no-curves"), "--state-dir", s.dir)
	var logs proctest.Buffer
	cmd.Stderr = &logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { cmd.Process.Signal(syscall.SIGTERM); cmd.Wait() }()
	// The socket's file appears at bind, before listen: a connect between
	// the two is refused (CI, 2026-11-26), so dial until one is accepted.
	deadline := time.Now().Add(10 * time.Second)
	var c *transport.Client
	for {
		var err error
		if _, err = os.Stat(sock); err == nil {
			if c, err = transport.Dial(ctx, sock, transport.ClientOptions{}); err == nil {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("dial the activated socket: %v\n%s", err, logs.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
	defer c.Close()
	dec, err := c.Spend(ctx, "c", 1000, "")
	if err != nil || dec != pacer.Allowed {
		t.Fatalf("SPEND over the activated socket = %v, %v\n%s", dec, err, logs.String())
	}
	if _, err := os.Stat(ownSock); err == nil {
		t.Fatal("pacerd created its own socket although systemd passed one")
	}
	if !strings.Contains(logs.String(), "using the socket systemd passed") {
		t.Fatalf("no sign of socket activation in the log:\n%s", logs.String())
	}
}

// /metrics, scraped during load, agrees with what the client counted.
func TestMetricsAgreeWithClient(t *testing.T) {
	s := newStack(t)
	s.campaign("c", 86_400_000)
	addr := freeLoopbackAddr(t)
	p := s.startWith("h1", []string{"--admin", addr}, nil)
	c := dial(t, p.socket)
	counts := map[pacer.Decision]int{}
	for range 3000 {
		dec, err := c.Spend(ctx, "c", 1000, "")
		if err != nil {
			t.Fatal(err)
		}
		counts[dec]++
	}
	if counts[pacer.Allowed] == 0 || counts[pacer.Paced] == 0 {
		t.Fatalf("want both allowed and paced answers to compare, got %v", counts)
	}
	metrics := scrape(t, "http://"+addr+"/metrics")
	for dec, result := range map[pacer.Decision]string{pacer.Allowed: "allowed", pacer.Paced: "paced", pacer.Exhausted: "exhausted"} {
		got := metrics[`pacer_spend_decisions_total{result="`+result+`"}`]
		if got != float64(counts[dec]) {
			t.Errorf("metrics say %v %s, the client counted %d", got, result, counts[dec])
		}
	}
	if metrics["pacer_leases_held"] < 1 {
		t.Errorf("pacer_leases_held = %v, want >= 1", metrics["pacer_leases_held"])
	}
	for _, path := range []string{"/healthz", "/readyz"} {
		resp, err := http.Get("http://" + addr + path)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Errorf("%s = %d", path, resp.StatusCode)
		}
	}
}

func scrape(t *testing.T, url string) map[string]float64 {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	out := map[string]float64{}
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "#") || line == "" {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err == nil {
			out[line[:i]] = v
		}
	}
	io.Copy(io.Discard, resp.Body)
	return out
}

// activated starts pacerd on a listening socket the test owns, as systemd
// does under socket activation (fd 3, LISTEN_FDS=1, LISTEN_PID its own pid).
func (s *stack) activated(f *os.File, holder string) *proc {
	s.t.Helper()
	cfg := filepath.Join(s.dir, "pacerd.yaml")
	if err := os.WriteFile(cfg, []byte(testConfig), 0o644); err != nil {
		s.t.Fatal(err)
	}
	// sh sets LISTEN_PID to its own pid, which exec hands to pacerd.
	cmd := exec.Command("/bin/sh", "-c", `LISTEN_PID=$$ LISTEN_FDS=1 exec "$0" "$@"`, pacerdBin,
		"--config", cfg, "--redis", s.redis.Socket, "--socket", filepath.Join(s.dir, "unused.sock"),
		"--holder", holder, "--curves", filepath.Join(s.dir, "no-curves"), "--state-dir", filepath.Join(s.dir, "state"))
	cmd.ExtraFiles = []*os.File{f}
	return &proc{Proc: proctest.StartCmd(s.t, "pacerd "+holder, cmd)}
}

// A restart (upgrade) under socket activation: the socket stays open, calls
// that arrive while no pacerd runs wait in its backlog and are answered by the
// next one; a bidder looping SPENDs sees no failed call, and the ledger
// balances afterwards.
func TestRestartUnderLoadKeepsTheSocket(t *testing.T) {
	s := newStack(t)
	s.campaign("c", 864_000_000_000)
	sock := filepath.Join(s.dir, "pacer.sock")
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: sock, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	f, err := ln.File()
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	p1 := s.activated(f, "r1")

	// A bidder as a Redis client library behaves: it retries a call whose
	// connection was closed (its auction id keeps a retry from counting twice).
	bidder := redis.NewClient(&redis.Options{Network: "unix", Addr: sock, Protocol: 2, PoolSize: 4,
		MaxRetries: 5, MinRetryBackoff: time.Millisecond, MaxRetryBackoff: 20 * time.Millisecond,
		ReadTimeout: 10 * time.Second})
	defer bidder.Close()
	type result struct {
		calls, failed int
		maxLatency    time.Duration
		firstErr      error
	}
	stop := make(chan struct{})
	done := make(chan result)
	var answered atomic.Int64 // calls answered by the first pacerd
	go func() {
		var r result
		for i := 0; ; i++ {
			select {
			case <-stop:
				done <- r
				return
			default:
			}
			start := time.Now()
			err := bidder.Do(ctx, "SPEND", "c", 1000, "auction-"+strconv.Itoa(i)).Err()
			r.calls++
			if lat := time.Since(start); lat > r.maxLatency {
				r.maxLatency = lat
			}
			if err != nil {
				r.failed++
				if r.firstErr == nil {
					r.firstErr = err
				}
			} else {
				answered.Add(1)
			}
		}
	}()
	// SIGTERM once the first pacerd serves (so it has its signal handler)
	// and the bidder is in full flow: by calls answered, not by time, which
	// a machine at a load average of 20 stretches.
	for answered.Load() < 200 {
		select {
		case <-p1.Done():
			t.Fatalf("old pacerd exited before serving: %v\n%s", p1.Err(), p1.Output.String())
		case <-time.After(10 * time.Millisecond):
		}
	}
	p1.Cmd.Process.Signal(syscall.SIGTERM)
	if err := p1.Err(); err != nil {
		t.Fatalf("old pacerd exit: %v\n%s", err, p1.Output.String())
	}
	p2 := s.activated(f, "r2")
	defer func() { p2.Cmd.Process.Signal(syscall.SIGTERM); <-p2.Done() }()
	time.Sleep(time.Second)
	close(stop)
	r := <-done
	t.Logf("restart under load: %d calls, %d failed, max latency %v", r.calls, r.failed, r.maxLatency)
	if r.failed > 0 {
		t.Fatalf("%d of %d calls failed across the restart; first: %v\nold:\n%s\nnew:\n%s", r.failed, r.calls, r.firstErr, p1.Output.String(), p2.Output.String())
	}
	s.check("c")
}
