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
	"syscall"
	"testing"
	"time"

	"github.com/pacer/pacer/transport"
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
	p.cmd.Process.Signal(syscall.SIGTERM)
	for m := next("STOPPING"); m != "STOPPING=1"; m = next("STOPPING") {
		if m != "WATCHDOG=1" && !strings.HasPrefix(m, "STATUS=") {
			t.Fatalf("unexpected notification %q before STOPPING", m)
		}
	}
	if err := <-p.done; err != nil {
		t.Fatalf("exit after SIGTERM: %v", err)
	}
	p.done <- nil
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
	var logs syncBuffer
	cmd.Stderr = &logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { cmd.Process.Signal(syscall.SIGTERM); cmd.Wait() }()
	deadline := time.Now().Add(10 * time.Second)
	for {
		if _, err := os.Stat(sock); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("systemd-socket-activate did not listen:\n%s", logs.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
	c, err := transport.Dial(ctx, sock, transport.ClientOptions{})
	if err != nil {
		t.Fatalf("dial the activated socket: %v\n%s", err, logs.String())
	}
	defer c.Close()
	dec, err := c.Spend(ctx, "c", 1000, "")
	if err != nil || dec != transport.Allowed {
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
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	p := s.startWith("h1", []string{"--admin", addr}, nil)
	c := dial(t, p.socket)
	counts := map[transport.Decision]int{}
	for range 3000 {
		dec, err := c.Spend(ctx, "c", 1000, "")
		if err != nil {
			t.Fatal(err)
		}
		counts[dec]++
	}
	if counts[transport.Allowed] == 0 || counts[transport.Paced] == 0 {
		t.Fatalf("want both allowed and paced answers to compare, got %v", counts)
	}
	metrics := scrape(t, "http://"+addr+"/metrics")
	for dec, result := range map[transport.Decision]string{transport.Allowed: "allowed", transport.Paced: "paced", transport.Exhausted: "exhausted"} {
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
