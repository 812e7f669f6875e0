package transport

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"
)

func TestSplitInline(t *testing.T) {
	for _, tc := range []struct {
		line string
		want []string
		err  string
	}{
		{"PING", []string{"PING"}, ""},
		{"  SPEND \t demo  5  ", []string{"SPEND", "demo", "5"}, ""},
		{"", nil, ""},
		{"   \t ", nil, ""},
		{`PING "a b"`, []string{"PING", "a b"}, ""},
		{`PING "a\"b\\c\n\x41\x4g"`, []string{"PING", "a\"b\\c\nAx4g"}, ""},
		{`PING 'it\'s' "" ''`, []string{"PING", "it's", "", ""}, ""},
		{`PING 'a\nb'`, []string{"PING", `a\nb`}, ""},
		{`PING a"b`, []string{"PING", `a"b`}, ""},
		{`PING "abc`, nil, "unbalanced quotes"},
		{`PING "a"b`, nil, "unbalanced quotes"},
		{"PING" + strings.Repeat(" x", 63), append([]string{"PING"}, slices.Repeat([]string{"x"}, 63)...), ""},
		{"PING" + strings.Repeat(" x", 64), nil, "more than 64 arguments"},
	} {
		args, err := splitInline([]byte(tc.line), DefaultMaxArgs)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("%q: err %v, want %q", tc.line, err, tc.err)
			}
			continue
		}
		if err != nil {
			t.Errorf("%q: %v", tc.line, err)
			continue
		}
		var got []string
		for _, a := range args {
			got = append(got, string(a))
		}
		if !slices.Equal(got, tc.want) {
			t.Errorf("%q: %q, want %q", tc.line, got, tc.want)
		}
	}
}

func TestInlineAtTheLimit(t *testing.T) {
	ts := startServer(t, newFakeSpender(), ServerConfig{})
	c := dialRaw(t, ts.path)
	// 4096 bytes before the LF, counting the CR: the longest line allowed.
	msg := strings.Repeat("m", DefaultMaxInlineBytes-len("PING \r"))
	if got := c.do(t, "PING "+msg+"\r\n"); got != "$"+strconv.Itoa(len(msg))+"\r\n"+msg+"\r\n" {
		t.Fatalf("PING at the inline limit: %d bytes back", len(got))
	}
	if got := c.do(t, "SPEND demo 5\n"); got != ":1\r\n" {
		t.Fatalf("inline SPEND = %q", got)
	}
}

// processCPU is the CPU time, user and system, this process has used.
func processCPU(t testing.TB) time.Duration {
	t.Helper()
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		t.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// A 64 KB line of spaces cost redcon's parser about a second of CPU
// (quadratic). Now it is refused after its first 4 KB. The claim of well
// under 1 ms lives in BenchmarkInlineLineOfSpaces; this test bounds the
// whole exchange, client included, generously for a loaded CI machine. The
// bound is on the median of 20 rounds: the process's CPU in one round also
// holds whatever the runtime did meanwhile (a garbage collection under
// -race: 38 ms once at load ~15), while the quadratic parse cost every
// round about a second.
func TestLongInlineLineCheap(t *testing.T) {
	ts := startServer(t, newFakeSpender(), ServerConfig{})
	spaces := strings.Repeat(" ", 64<<10) + "\r\n"
	const rounds = 20
	var costs []time.Duration
	for range rounds {
		c := dialRaw(t, ts.path)
		before := processCPU(t)
		go io.WriteString(c, spaces)
		got, _ := c.reply()
		c.expectClosed(t)
		costs = append(costs, processCPU(t)-before)
		if got != inlineTooLong {
			t.Fatalf("reply %q", got)
		}
		c.Close()
	}
	// Also a blank line at the limit, which is answered (skipped) rather
	// than refused, then a PING.
	c := dialRaw(t, ts.path)
	before := processCPU(t)
	if got := c.do(t, strings.Repeat(" ", DefaultMaxInlineBytes-1)+"\r\nPING\r\n"); got != "+PONG\r\n" {
		t.Fatalf("PING after a blank 4 KB line = %q", got)
	}
	cpu := processCPU(t) - before
	slices.Sort(costs)
	median, worst := costs[rounds/2], costs[rounds-1]
	t.Logf("64 KB line of spaces: median %v, worst %v of process CPU over %d rounds; 4 KB blank line + PING: %v", median, worst, rounds, cpu)
	if median > 20*time.Millisecond || cpu > 20*time.Millisecond {
		t.Fatalf("too much CPU: %v per 64 KB line (median of %d), %v for a 4 KB line (redcon took ~1 s)", median, rounds, cpu)
	}
}

func BenchmarkInlineLineOfSpaces(b *testing.B) {
	for _, size := range []int{DefaultMaxInlineBytes - 2, 64 << 10} {
		b.Run(strconv.Itoa(size), func(b *testing.B) {
			line := []byte(strings.Repeat(" ", size) + "\r\nPING\r\n")
			b.ReportAllocs()
			for b.Loop() {
				rd := newRequestReader(DefaultMaxArgs, DefaultMaxRequestBytes, DefaultMaxInlineBytes)
				src := &chunkReader{b: line, n: 1 << 20}
				for {
					args, err := rd.next()
					if err != nil || args != nil {
						break
					}
					if rd.fill(src) != nil {
						break
					}
				}
			}
		})
	}
}

// raiseFileLimit raises the soft fd limit to the hard one for this test.
func raiseFileLimit(t *testing.T) uint64 {
	t.Helper()
	var rl syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &rl); err != nil {
		t.Fatal(err)
	}
	if rl.Cur < rl.Max {
		old := rl
		rl.Cur = rl.Max
		if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &rl); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { syscall.Setrlimit(syscall.RLIMIT_NOFILE, &old) })
	}
	return rl.Cur
}

// heapAndStacks is the Go memory in use after a GC.
func heapAndStacks() uint64 {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapInuse + ms.StackInuse
}

func rssBytes(t testing.TB) uint64 {
	data, err := os.ReadFile("/proc/self/statm")
	if err != nil {
		t.Fatal(err)
	}
	f := strings.Fields(string(data))
	pages, _ := strconv.ParseUint(f[1], 10, 64)
	return pages * uint64(os.Getpagesize())
}

// TestMain lets the test binary act as the dialer of
// TestIdleConnectionsCapped: the clients' ends of the connections live in a
// child process, so that this one has its whole fd limit for the server's.
func TestMain(m *testing.M) {
	if path := os.Getenv("PACER_TEST_DIALER"); path != "" {
		os.Exit(dialer(path))
	}
	if path := os.Getenv("PACER_TEST_ATTACKER"); path != "" {
		attacker(path)
		os.Exit(0)
	}
	code := m.Run()
	if code == 0 {
		code = runOtherKinds()
	}
	os.Exit(code)
}

// dialer opens PACER_TEST_CONNS connections to path and says "dialed"; on
// "check" from stdin it checks that the connections past PACER_TEST_CAP were
// refused and that a sample of the others is served, and says "ok" or why
// not; it exits, closing them all, when stdin closes.
func dialer(path string) int {
	n, _ := strconv.Atoi(os.Getenv("PACER_TEST_CONNS"))
	maxClients, _ := strconv.Atoi(os.Getenv("PACER_TEST_CAP"))
	conns := make([]net.Conn, 0, n)
	for retries := 0; len(conns) < n; {
		c, err := net.Dial("unix", path)
		if errors.Is(err, syscall.EAGAIN) && retries < 10_000 {
			// The listen backlog is full: the server is accepting.
			retries++
			time.Sleep(time.Millisecond)
			continue
		}
		if err != nil {
			fmt.Printf("dial %d: %v\n", len(conns), err)
			return 1
		}
		conns = append(conns, c)
	}
	fmt.Println("dialed")
	in := bufio.NewScanner(os.Stdin)
	if !in.Scan() || in.Text() != "check" {
		return 1
	}
	result := "ok"
	for i, c := range conns[maxClients:] {
		c.SetReadDeadline(time.Now().Add(10 * time.Second))
		got, err := io.ReadAll(c)
		if string(got) != "-ERR max clients reached\r\n" || (err != nil && !errors.Is(err, syscall.ECONNRESET)) {
			result = fmt.Sprintf("connection %d past the cap: %q, %v", i, got, err)
			break
		}
	}
	for i := 0; i < maxClients && result == "ok"; i += max(1, maxClients/50) {
		rc := &rawConn{Conn: conns[i], rd: bufio.NewReader(conns[i])}
		conns[i].SetDeadline(time.Now().Add(10 * time.Second))
		io.WriteString(rc, "PING\r\n")
		if got, err := rc.reply(); got != "+PONG\r\n" {
			result = fmt.Sprintf("connection %d: PING = %q, %v", i, got, err)
		}
	}
	fmt.Println(result)
	io.Copy(io.Discard, os.Stdin)
	return 0
}

// TestIdleConnectionsCapped opens 20,000 idle connections (fewer if the fd
// limit is lower) from a child process against a cap of 1,000 fewer: those
// past the cap are refused with an error, the others cost a bounded amount
// of memory, and it is given back when they close.
func TestIdleConnectionsCapped(t *testing.T) {
	limit := raiseFileLimit(t) // the child inherits it
	total := 20_000
	if avail := int(limit) - 64; avail < total {
		t.Logf("fd limit %d: %d connections instead of %d", limit, avail, total)
		total = avail
	}
	if total < 2000 {
		t.Fatalf("fd limit %d: too low to test the connection cap (raise the hard limit: ulimit -Hn)", limit)
	}
	maxClients := total - 1000
	ts := startServer(t, newFakeSpender(), ServerConfig{MaxClients: maxClients})
	base, baseRSS := heapAndStacks(), rssBytes(t)
	var ms0 runtime.MemStats
	runtime.ReadMemStats(&ms0)
	baseLive := ms0.HeapAlloc + ms0.StackInuse

	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	child := exec.Command(exe)
	child.Env = append(os.Environ(), "PACER_TEST_DIALER="+ts.path,
		"PACER_TEST_CONNS="+strconv.Itoa(total), "PACER_TEST_CAP="+strconv.Itoa(maxClients))
	child.Stderr = os.Stderr
	stdin, err := child.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := child.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := child.Start(); err != nil {
		t.Fatal(err)
	}
	defer child.Wait()
	defer stdin.Close()
	out := bufio.NewScanner(stdout)
	if !out.Scan() || out.Text() != "dialed" {
		t.Fatalf("dialer: %q", out.Text())
	}
	waitFor(t, func() bool {
		st := ts.Stats()
		return st.ConnectionsOpen == maxClients && st.Rejected == uint64(total-maxClients)
	})
	// The burst holds the runtime's memory limit to the socket's bound.
	if lim := debug.SetMemoryLimit(-1); lim == math.MaxInt64 || lim < connMemory*int64(maxClients) {
		t.Errorf("memory limit with %d connections open = %d: not held to the socket's bound", maxClients, lim)
	}
	used, usedRSS := heapAndStacks()-base, rssBytes(t)-baseRSS
	perConn := used / uint64(maxClients)
	t.Logf("%d idle connections served, %d refused: Go heap+stacks +%d MB (%d B each), RSS +%d MB (%d B each)",
		maxClients, total-maxClients, used>>20, perConn, usedRSS>>20, usedRSS/uint64(maxClients))
	// A goroutine (its stack) and the connection's state: the read
	// buffer is lent only while a request is read. Under -race (make
	// test) goroutines are larger; TestHostileConnectionsMemory checks the
	// 8 KiB share on a real pacerd built without it.
	const bound = 12 << 10
	if perConn > bound {
		t.Errorf("%d B per idle connection, want at most %d", perConn, bound)
	}

	io.WriteString(stdin, "check\n")
	if !out.Scan() || out.Text() != "ok" {
		t.Fatalf("dialer: %s", out.Text())
	}
	// Closing them frees their goroutines and memory, and makes room.
	stdin.Close()
	if err := child.Wait(); err != nil {
		t.Fatalf("dialer: %v", err)
	}
	waitFor(t, func() bool { return ts.Stats().ConnectionsOpen == 0 })
	// And lets it go once the burst is over.
	waitFor(t, func() bool { return debug.SetMemoryLimit(-1) == math.MaxInt64 })
	debug.FreeOSMemory()
	// Live bytes, not spans in use: a span keeps one survivor's page. A
	// closed socket's memory is freed the GC after its finalizer has run.
	for range 3 {
		runtime.GC()
		time.Sleep(10 * time.Millisecond)
	}
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	left := int64(ms.HeapAlloc+ms.StackInuse) - int64(baseLive)
	t.Logf("after closing them: %d KB more live heap and stacks than before, RSS %+d MB", left>>10, (int64(rssBytes(t))-int64(baseRSS))>>20)
	// What remains is reused, not leaked: the runtime's cache of poll
	// descriptors and the server's connection map (Go maps never shrink).
	if left > int64(total)<<10 {
		t.Errorf("%d KB of heap and stacks still live after every connection closed: more than 1 KB for each", left>>10)
	}
	if got := dialRaw(t, ts.path).do(t, "PING\r\n"); got != "+PONG\r\n" {
		t.Errorf("PING after the flood = %q", got)
	}
}

func waitFor(t testing.TB, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not reached in 30s")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// Slowloris: connections that send part of a request and stall are
// dropped read_timeout after their first bytes; a connection idle between
// requests is dropped after idle_timeout; a client that keeps talking is not.
func TestReadAndIdleDeadlines(t *testing.T) {
	const readTimeout, idleTimeout = 300 * time.Millisecond, 600 * time.Millisecond
	ts := startServer(t, newFakeSpender(), ServerConfig{ReadTimeout: readTimeout, IdleTimeout: idleTimeout})

	const slow = 200
	var lorises []*rawConn
	start := time.Now()
	for i := range slow {
		c := dialRaw(t, ts.path)
		// Half a RESP request, or half an inline line; then one more
		// byte, which must not extend the deadline.
		if i%2 == 0 {
			io.WriteString(c, "*3\r\n$5\r\nSPEND\r\n$4\r\nde")
		} else {
			io.WriteString(c, "SPEND de")
		}
		lorises = append(lorises, c)
	}
	idle := dialRaw(t, ts.path)
	idle.do(t, "PING\r\n")
	busy := dialRaw(t, ts.path)
	stopBusy := make(chan struct{})
	busyErr := make(chan error, 1)
	go func() {
		for {
			select {
			case <-stopBusy:
				busyErr <- nil
				return
			case <-time.After(idleTimeout / 6):
			}
			io.WriteString(busy, "PING\r\n")
			if r, err := busy.reply(); r != "+PONG\r\n" {
				busyErr <- fmt.Errorf("busy client: %q, %v", r, err)
				return
			}
		}
	}()
	time.Sleep(readTimeout / 3)
	for _, c := range lorises {
		io.WriteString(c, "m")
	}
	for i, c := range lorises {
		c.expectClosed(t)
		if i == 0 {
			if d := time.Since(start); d < readTimeout {
				t.Errorf("slow request dropped after %v, before read_timeout %v", d, readTimeout)
			}
		}
	}
	t.Logf("%d slowloris connections dropped %v after they started", slow, time.Since(start))
	idle.expectClosed(t)
	if d := time.Since(start); d < idleTimeout {
		t.Errorf("idle connection dropped after %v, before idle_timeout %v", d, idleTimeout)
	}
	close(stopBusy)
	if err := <-busyErr; err != nil {
		t.Fatal(err)
	}
	if got := busy.do(t, "PING\r\n"); got != "+PONG\r\n" {
		t.Fatalf("busy client dropped: %q", got)
	}
	waitFor(t, func() bool { return ts.Stats().ConnectionsOpen == 1 })
	if st := ts.Stats(); st.TimedOut != slow+1 {
		t.Errorf("TimedOut = %d, want %d", st.TimedOut, slow+1)
	}
}

// A client that sends requests but never reads the replies is dropped once
// a reply has waited write_timeout, and its goroutine exits.
func TestNonReadingClientDropped(t *testing.T) {
	const writeTimeout = 300 * time.Millisecond
	ts := startServer(t, newFakeSpender(), ServerConfig{WriteTimeout: writeTimeout})
	c := dialRaw(t, ts.path)
	c.SetDeadline(time.Time{})
	// Each PING echoes 32 KB: a few hundred fill both socket buffers.
	req := resp("PING", strings.Repeat("x", 32<<10))
	written := make(chan error, 1)
	go func() {
		for range 2000 {
			if _, err := io.WriteString(c, req); err != nil {
				written <- err
				return
			}
		}
		written <- nil
	}()
	waitFor(t, func() bool { return ts.Stats().TimedOut == 1 })
	waitFor(t, func() bool { return ts.Stats().ConnectionsOpen == 0 })
	if err := <-written; err == nil {
		t.Error("the server read every request of a client that never read a reply")
	}
	// Others are still served.
	if got := dialRaw(t, ts.path).do(t, "PING\r\n"); got != "+PONG\r\n" {
		t.Fatalf("PING = %q", got)
	}
}

func TestPeerCredentials(t *testing.T) {
	uid, gid := uint32(os.Getuid()), uint32(os.Getgid())
	for _, tc := range []struct {
		name       string
		uids, gids []uint32
		allowed    bool
	}{
		{"no list", nil, nil, true},
		{"uid listed", []uint32{uid + 1, uid}, nil, true},
		{"gid listed", []uint32{uid + 1}, []uint32{gid}, true},
		{"neither listed", []uint32{uid + 1}, []uint32{gid + 1}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ts := startServer(t, newFakeSpender(), ServerConfig{AllowedUIDs: tc.uids, AllowedGIDs: tc.gids})
			c := dialRaw(t, ts.path)
			io.WriteString(c, "PING\r\n")
			got, _ := c.reply()
			if tc.allowed {
				if got != "+PONG\r\n" {
					t.Fatalf("PING = %q", got)
				}
				return
			}
			want := fmt.Sprintf("-ERR uid %d gid %d not allowed to connect\r\n", uid, gid)
			if got != want {
				t.Fatalf("got %q, want %q", got, want)
			}
			c.expectClosed(t)
			if st := ts.Stats(); st.Rejected != 1 || st.Commands != 0 {
				t.Fatalf("stats %+v", st)
			}
		})
	}
}

func TestWorldWritableSocketWarned(t *testing.T) {
	for _, tc := range []struct {
		mode os.FileMode
		warn bool
	}{{0o660, false}, {0o600, false}, {0o666, true}, {0o777, true}} {
		core, logs := observer.New(zap.WarnLevel)
		path := filepath.Join(socketDir(t), "s")
		ln, err := ListenUnix(path, tc.mode)
		if err != nil {
			t.Fatal(err)
		}
		srv := NewServer(newFakeSpender(), ServerConfig{Server: testKind(), Logger: zap.New(core)})
		done := make(chan error, 1)
		go func() { done <- srv.Serve(ln) }()
		dialRaw(t, path).do(t, "PING\r\n") // Serve has started
		srv.Close()
		<-done
		warned := logs.FilterMessageSnippet("world-writable").Len() == 1
		if warned != tc.warn {
			t.Errorf("mode %04o: warned %v, want %v", tc.mode, warned, tc.warn)
		}
	}
}

// TestWellBehavedClientThroughAttacks measures a well-behaved client's
// SPEND latency (p99 of each round) on quiet rounds and on rounds under
// attack by 64 KB inline lines, slowloris and connection floods, alternating
// so that CI load affects both alike. Before the fixes the attack's p99 was
// 50x the quiet one (0.5 to 24.7 ms), each 64 KB line costing about a second
// of CPU; the bound is 2x plus 2 ms of slack for a loaded 2-core machine, on
// which the attackers (another process) share the cores with the server.
// aloneLaterEnv, set by make test for its run of every package at once,
// defers the latency comparisons to a run of their own after it.
const aloneLaterEnv = "PACER_TEST_LATENCY_LATER"

func TestWellBehavedClientThroughAttacks(t *testing.T) {
	if testing.Short() {
		t.Skip("latency comparison")
	}
	if os.Getenv(aloneLaterEnv) != "" {
		// make test runs it again on its own once every package is done:
		// beside the daemon package's -race tests on two cores its quiet
		// rounds stayed quiet but attacked ones reached 4-5 ms (CI,
		// 2026-11-26), where alone they take 0.4-0.9 ms.
		t.Skip("a latency comparison: run alone after the other packages (" + aloneLaterEnv + ")")
	}
	raiseFileLimit(t)
	ts := startServer(t, newFakeSpender(), ServerConfig{ReadTimeout: 200 * time.Millisecond})
	good := dialRaw(t, ts.path)
	good.SetDeadline(time.Time{})
	round := func() time.Duration {
		lat := make([]time.Duration, 0, 2000)
		for range cap(lat) {
			t0 := time.Now()
			if _, err := io.WriteString(good, resp("SPEND", "empty", "1")); err != nil {
				t.Fatal(err)
			}
			if r, err := good.reply(); r != ":-1\r\n" {
				t.Fatalf("SPEND = %q, %v", r, err)
			}
			lat = append(lat, time.Since(t0))
		}
		slices.Sort(lat)
		return lat[len(lat)*99/100]
	}
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	// measure runs seven alternating quiet and attacked rounds and returns
	// the median p99 of each.
	measure := func() (q, l time.Duration, attacked uint64, quiet, loud []time.Duration) {
		for range 7 {
			quiet = append(quiet, round())
			// The attackers are another process, as they would be, at the
			// lowest priority: what is measured is what their connections
			// cost the server, not the cores their own process takes from
			// it, which on a machine loaded by other work (CI beside other
			// jobs, load 12) made the attacked rounds' p99 8x the quiet
			// ones' (4.0 ms against 0.48) with the server unchanged. On
			// such a machine they attack less (270-590 connections in the
			// measured rounds at load 7-9, 1,800-2,800 at normal priority);
			// fewer than 100 fail the test below.
			child := exec.Command("nice", "-n", "19", exe)
			child.Env = append(os.Environ(), "PACER_TEST_ATTACKER="+ts.path)
			child.Stderr = os.Stderr
			stdin, err := child.StdinPipe()
			if err != nil {
				t.Fatal(err)
			}
			stdout, err := child.StdoutPipe()
			if err != nil {
				t.Fatal(err)
			}
			if err := child.Start(); err != nil {
				t.Fatal(err)
			}
			before := ts.Stats().ConnectionsAccepted
			if line, _ := bufio.NewReader(stdout).ReadString('\n'); line != "attacking\n" {
				t.Fatalf("attacker: %q", line)
			}
			waitFor(t, func() bool { return ts.Stats().ConnectionsAccepted > before+20 })
			before = ts.Stats().ConnectionsAccepted
			loud = append(loud, round())
			attacked += ts.Stats().ConnectionsAccepted - before
			stdin.Close()
			if err := child.Wait(); err != nil {
				t.Fatalf("attacker: %v", err)
			}
		}
		slices.Sort(quiet)
		slices.Sort(loud)
		return quiet[len(quiet)/2], loud[len(loud)/2], attacked, quiet, loud
	}
	// Other packages' tests share the machine's two cores: a measurement
	// taken while they load it is taken again, up to three times. A real
	// regression (the issue measured 0.5 ms -> 24.7 ms) fails every time.
	for attempt := 1; ; attempt++ {
		q, l, attacked, quiet, loud := measure()
		t.Logf("attempt %d: SPEND p99 per round, quiet %v, under attack %v (%d attacking connections during them); medians %v and %v",
			attempt, quiet, loud, attacked, q, l)
		if attacked < 100 {
			t.Fatalf("only %d attacking connections during the measured rounds", attacked)
		}
		if l <= 2*q+2*time.Millisecond {
			return
		}
		if attempt == 3 {
			t.Fatalf("p99 under attack %v > 2 x quiet p99 %v + 2ms, in 3 attempts", l, q)
		}
	}
}

// attacker attacks the socket at path until stdin closes: three goroutines
// each send 64 KB inline lines of spaces, start slowloris requests, and open
// idle connections, one every 5 ms.
func attacker(path string) {
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for k := range 9 {
		wg.Go(func() {
			spaces := strings.Repeat(" ", 64<<10) + "\r\n"
			var idle []net.Conn
			defer func() {
				for _, c := range idle {
					c.Close()
				}
			}()
			for {
				select {
				case <-stop:
					return
				case <-time.After(5 * time.Millisecond):
				}
				c, err := net.Dial("unix", path)
				if err != nil {
					continue
				}
				switch k % 3 {
				case 0: // 64 KB inline line of spaces
					io.WriteString(c, spaces)
					io.Copy(io.Discard, c)
					c.Close()
				case 1: // slowloris, left to the read deadline
					io.WriteString(c, "*2\r\n$4\r\nPI")
					go func() { io.Copy(io.Discard, c); c.Close() }()
				case 2: // idle connections, kept until the end
					idle = append(idle, c)
				}
			}
		})
	}
	fmt.Println("attacking")
	io.Copy(io.Discard, os.Stdin)
	close(stop)
	wg.Wait()
}

// Connections that each sent one large request, then went idle, hold no
// more memory than those that never did: the read buffer and the reply
// buffer a large request grew are given back.
func TestBuffersShrinkAfterLargeRequests(t *testing.T) {
	const n = 300
	ts := startServer(t, newFakeSpender(), ServerConfig{})
	base := heapAndStacks()
	msg := strings.Repeat("m", DefaultMaxRequestBytes-100)
	want := "$" + strconv.Itoa(len(msg)) + "\r\n" + msg + "\r\n"
	for range n {
		c := dialRaw(t, ts.path)
		if got := c.do(t, resp("PING", msg)); got != want {
			t.Fatalf("large PING echoed wrongly (%d bytes)", len(got))
		}
		if got := c.do(t, "PING\r\n"); got != "+PONG\r\n" {
			t.Fatalf("PING = %q", got)
		}
	}
	// Signed: a GC during the loop can leave less live than before.
	perConn := max(int64(heapAndStacks())-int64(base), 0) / n
	t.Logf("%d idle connections after a %d KB request each: %d B each (client ends included)", n, len(msg)>>10, perConn)
	// Without shrinking each would keep a 64 KB read buffer and a 64 KB
	// reply buffer.
	if perConn > 24<<10 {
		t.Errorf("%d B per idle connection after a large request, want at most 24 KB", perConn)
	}
}

// TestLargeRequestsShareTheBufferBudget: request buffers grown past an
// idle connection's for requests over 4 KiB are paid from the server's
// buffer budget: once it is spent, the connection whose request needs
// more is refused with an error naming max_buffered_bytes and closed,
// small requests are still served, and closing the others gives it back.
func TestLargeRequestsShareTheBufferBudget(t *testing.T) {
	const budget = 256 << 10
	ts := startServer(t, newFakeSpender(), ServerConfig{MaxBufferedBytes: budget})
	// 40 KB of a 60 KB PING: the buffer doubles to 64 KiB, which takes
	// 60 KiB of the budget.
	partial := "*2\r\n$4\r\nPING\r\n$60000\r\n" + strings.Repeat("p", 40_000)
	const held = DefaultMaxRequestBytes - readBufSize
	var stalled []*rawConn
	for i := 1; i <= budget/held; i++ {
		c := dialRaw(t, ts.path)
		io.WriteString(c, partial)
		stalled = append(stalled, c)
		waitFor(t, func() bool { return ts.budget.used.Load() == int64(i*held) })
	}
	over := dialRaw(t, ts.path)
	io.WriteString(over, partial)
	got, err := over.reply()
	if !strings.HasPrefix(got, "-ERR Protocol error: request larger than ") ||
		!strings.Contains(got, "refused: the server's buffer budget (max_buffered_bytes 262144 bytes, shared by all connections) is spent") {
		t.Fatalf("request past the budget: %q, %v", got, err)
	}
	over.expectClosed(t)
	if r := dialRaw(t, ts.path).do(t, resp("SPEND", "demo", "1", "a-1")); r != ":1\r\n" {
		t.Fatalf("a small request while the budget is spent: %q", r)
	}
	if used := ts.budget.used.Load(); used > budget {
		t.Errorf("budget used %d > %d", used, budget)
	}
	for _, c := range stalled {
		c.Close()
	}
	waitFor(t, func() bool { return ts.budget.used.Load() == 0 })
	msg := strings.Repeat("m", 60_000)
	if r := dialRaw(t, ts.path).do(t, resp("PING", msg)); r != "$60000\r\n"+msg+"\r\n" {
		t.Fatalf("a large request once the budget was given back: %.40q", r)
	}
}
