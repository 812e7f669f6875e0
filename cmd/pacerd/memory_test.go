package main

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// The memory bound of the bidder socket: pacerd's RSS stays within
// memBase + memPerConn × open connections whatever its clients send. What
// a closed connection held goes back to the system after a GC (the server
// forces one each time a burst's open connections halve), so the bound is
// checked against the most connections open in the last memLag.
const (
	memBase    = 64 << 20
	memPerConn = 8 << 10
	memLag     = 5 * time.Second
)

// hostileConnsEnv, set by make soak, runs TestHostileConnectionsMemory's
// bigger variant: each MULTI queues the 18 SPENDs of 60,000-byte
// auction ids instead of one.
const hostileConnsEnv = "PACER_SOAK_HOSTILE"

// TestHostileConnectionsMemory opens 10,000 hostile connections to a real
// pacerd (built without -race, so its RSS is its own) on each socket
// server: a quarter each leave a large request half sent, open a MULTI and
// queue a SPEND with a 60,000-byte auction id, open a MULTI and queue
// valid SPENDs, and pipeline PINGs of 4 KB without reading the replies;
// the MULTIs then PING inside the transaction. pacerd's RSS, read from
// /proc/<pid>/status throughout, stays within 64 MiB + 8 KiB per open
// connection (the most open in the last memLag) with every server; once
// the connections close it is back within 2x of what it was before, within
// a minute.
func TestHostileConnectionsMemory(t *testing.T) {
	if testing.Short() {
		t.Skip("10,000 connections per socket server")
	}
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		t.Fatal(err)
	}
	lim.Cur = lim.Max
	syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim) // pacerd inherits it
	conns := 10_000
	if avail := int(lim.Cur) - 200; avail < conns {
		// As TestIdleConnectionsCapped: fewer where the limit is lower.
		t.Logf("fd limit %d: %d connections instead of %d", lim.Cur, avail, conns)
		conns = avail
	}
	if conns < 2000 {
		t.Fatalf("fd limit %d: too low for the test (raise the hard limit: ulimit -Hn)", lim.Cur)
	}
	bin := filepath.Join(t.TempDir(), "pacerd")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("build pacerd without -race: %v\n%s", err, out)
	}
	multiSpends := 1
	if os.Getenv(hostileConnsEnv) != "" {
		multiSpends = 18
	}
	for _, kind := range []string{"hybrid", "epoll", "goroutines"} {
		t.Run(kind, func(t *testing.T) { hostileRun(t, bin, kind, conns, multiSpends) })
	}
}

func hostileRun(t *testing.T, bin, kind string, n, multiSpends int) {
	s := newStack(t)
	s.bin = bin
	// Room for the sampler's INFO beside the attack's connections.
	s.extraConfig = "socket_server: " + kind + "\nclient_read_timeout: 60s\nmax_clients: " + strconv.Itoa(n+10) + "\n"
	s.campaign("c1", 86_400_000_000)
	p := s.start("h1")
	pid := p.Cmd.Process.Pid
	c := dial(t, p.socket)
	if _, err := c.Spend(ctx, "c1", 1, ""); err != nil {
		t.Fatal(err)
	}
	time.Sleep(time.Second) // start-up's garbage collected
	before := rssOf(t, pid)

	var mu sync.Mutex
	var peak, peakOpen int64
	var over string
	stop := make(chan struct{})
	sampled := make(chan struct{})
	go func() { // sample RSS and open connections until stop
		defer close(sampled)
		type sample struct {
			at   time.Time
			open int64
		}
		var recent []sample
		for {
			open := openConns(t, p.socket)
			rss, now := rssOf(t, pid), time.Now()
			if open >= 0 {
				recent = append(recent, sample{now, open})
			}
			for len(recent) > 0 && now.Sub(recent[0].at) > memLag {
				recent = recent[1:]
			}
			most := int64(-1)
			for _, s := range recent {
				most = max(most, s.open)
			}
			mu.Lock()
			if rss > peak && most >= 0 {
				peak, peakOpen = rss, most
			}
			if bound := memBase + memPerConn*most; most >= 0 && rss > bound && over == "" {
				over = fmt.Sprintf("RSS %d MiB with at most %d connections open in the last %v: over %d MiB", rss>>20, most, memLag, bound>>20)
			}
			mu.Unlock()
			select {
			case <-stop:
				return
			case <-time.After(100 * time.Millisecond):
			}
		}
	}()

	start := time.Now()
	open := attack(t, p.socket, n, multiSpends)
	time.Sleep(2 * time.Second) // let pacerd read and answer what it will
	during := rssOf(t, pid)
	for _, nc := range open {
		nc.Close()
	}
	closed := time.Now()
	var after int64
	for {
		after = rssOf(t, pid)
		if after <= 2*before || time.Since(closed) > time.Minute {
			break
		}
		time.Sleep(500 * time.Millisecond)
	}
	close(stop)
	<-sampled
	t.Logf("socket_server %s, %d hostile connections (%v to open and send): RSS %d MiB before, peak %d MiB with at most %d open (bound %d MiB), %d MiB with all sent, %d MiB %v after they closed",
		kind, n, closed.Sub(start).Round(time.Millisecond), before>>20, peak>>20, peakOpen, (memBase+memPerConn*peakOpen)>>20,
		during>>20, after>>20, time.Since(closed).Round(100*time.Millisecond))
	if over != "" {
		t.Errorf("memory bound passed: %s", over)
	}
	if after > 2*before {
		t.Errorf("RSS %d MiB a minute after the connections closed, more than 2x the %d MiB before", after>>20, before>>20)
	}
	if dec, err := c.Spend(ctx, "c1", 1, "after"); err != nil {
		t.Errorf("SPEND after the attack: %v, %v", dec, err)
	}
}

// attack opens n connections to socket and sends each its hostile
// requests (see TestHostileConnectionsMemory), never reading a reply, and
// returns the connections, open.
func attack(t *testing.T, socket string, n, multiSpends int) []net.Conn {
	bigID := strings.Repeat("i", 60_000)
	var multiBig strings.Builder
	multiBig.WriteString(respCmd("MULTI"))
	for range multiSpends {
		multiBig.WriteString(respCmd("SPEND", "c1", "1", bigID))
	}
	multiBig.WriteString(respCmd("PING"))
	var multiOK strings.Builder
	multiOK.WriteString(respCmd("MULTI"))
	for i := range 40 {
		multiOK.WriteString(respCmd("SPEND", "c1", "1", strconv.Itoa(i)+strings.Repeat("a", 120)))
	}
	multiOK.WriteString(respCmd("PING"))
	var pipeline strings.Builder
	for range 64 {
		pipeline.WriteString(respCmd("PING", strings.Repeat("p", 4<<10)))
	}
	sends := []string{
		"*2\r\n$4\r\nPING\r\n$60000\r\n" + strings.Repeat("x", 20_000),
		multiBig.String(), multiOK.String(), pipeline.String(),
	}
	conns := make([]net.Conn, 0, n)
	for len(conns) < n {
		nc, err := net.Dial("unix", socket)
		if err != nil {
			if strings.Contains(err.Error(), "resource temporarily unavailable") {
				time.Sleep(time.Millisecond) // the listen backlog is full
				continue
			}
			t.Fatalf("dial %d: %v", len(conns), err)
		}
		conns = append(conns, nc)
	}
	var wg sync.WaitGroup
	work := make(chan int)
	for range 64 {
		wg.Go(func() {
			for i := range work {
				nc := conns[i]
				// Errors are expected: pacerd refuses and closes some.
				nc.SetWriteDeadline(time.Now().Add(5 * time.Second))
				io.WriteString(nc, sends[i%len(sends)])
			}
		})
	}
	for i := range conns {
		work <- i
	}
	close(work)
	wg.Wait()
	return conns
}

func respCmd(args ...string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "*%d\r\n", len(args))
	for _, a := range args {
		fmt.Fprintf(&b, "$%d\r\n%s\r\n", len(a), a)
	}
	return b.String()
}

// rssOf reads a process's resident set size from /proc/<pid>/status.
func rssOf(t *testing.T, pid int) int64 {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Errorf("pacerd's status: %v", err)
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), "VmRSS:"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(rest), "kB")), 10, 64)
			return kb << 10
		}
	}
	t.Errorf("no VmRSS in /proc/%d/status", pid)
	return 0
}

// openConns asks pacerd's INFO how many connections it has open, or
// returns -1 if it could not.
func openConns(t *testing.T, socket string) int64 {
	nc, err := net.Dial("unix", socket)
	if err != nil {
		return -1
	}
	defer nc.Close()
	nc.SetDeadline(time.Now().Add(10 * time.Second))
	io.WriteString(nc, "INFO\r\n")
	rd := bufio.NewReader(nc)
	for {
		line, err := rd.ReadString('\n')
		if err != nil {
			return -1
		}
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "connected_clients:"); ok {
			n, _ := strconv.ParseInt(v, 10, 64)
			return n - 1 // not this one
		}
	}
}
