package transport

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"github.com/pacer/pacer"
	"io"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"go.uber.org/zap"
)

// fakeSpender allows a spend while the campaign has the tokens, paces it
// while it has some, and reports exhaustion at zero. Campaign "slow" blocks
// in Spend until release is closed, to hold a command in flight.
type fakeSpender struct {
	mu      sync.Mutex
	tokens  map[string]int64
	auction []string // auction ids seen, in order

	entered chan struct{} // receives when "slow" is entered
	release chan struct{}
}

var _ Spender = (*fakeSpender)(nil)

func newFakeSpender() *fakeSpender {
	return &fakeSpender{
		tokens:  map[string]int64{"demo": 1000, "empty": 0, "slow": 1 << 40},
		entered: make(chan struct{}, 1),
		release: make(chan struct{}),
	}
}

func (f *fakeSpender) Spend(id pacer.CampaignID, amount pacer.Micros, auctionID string) (Decision, error) {
	campaign, amountMicros := string(id), int64(amount)
	if campaign == "slow" {
		f.entered <- struct{}{}
		<-f.release
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	t, ok := f.tokens[campaign]
	if !ok {
		return Paced, fmt.Errorf("unknown campaign %q", campaign)
	}
	f.auction = append(f.auction, auctionID)
	switch {
	case t == 0:
		return Exhausted, nil
	case t < amountMicros:
		return Paced, nil
	}
	f.tokens[campaign] = t - amountMicros
	return Allowed, nil
}

func (f *fakeSpender) Refund(id pacer.CampaignID, amount pacer.Micros, auctionID string) error {
	campaign, amountMicros := string(id), int64(amount)
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, ok := f.tokens[campaign]; !ok {
		return fmt.Errorf("unknown campaign %q", campaign)
	}
	f.tokens[campaign] += amountMicros
	return nil
}

func (f *fakeSpender) Balance(id pacer.CampaignID) (Balance, error) {
	campaign := string(id)
	f.mu.Lock()
	defer f.mu.Unlock()
	t, ok := f.tokens[campaign]
	if !ok {
		return Balance{}, fmt.Errorf("unknown campaign %q", campaign)
	}
	return Balance{Tokens: t, Reserve: 5000, PacePerSecond: 250, State: "active"}, nil
}

func (f *fakeSpender) Info() []InfoField {
	return []InfoField{{Key: "campaigns", Value: "3"}, {Key: "leases_held", Value: "2"}}
}

// socketDir returns a short directory: Unix socket paths are limited to
// about 104 bytes and t.TempDir() can be longer.
func socketDir(t testing.TB) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "pacer")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

type testServer struct {
	*Server
	path   string
	served chan error
}

func startServer(t testing.TB, sp Spender, cfg ServerConfig) *testServer {
	t.Helper()
	if cfg.Logger == nil {
		cfg.Logger = zap.NewNop()
	}
	if cfg.Server == "" {
		cfg.Server = testKind()
	}
	path := filepath.Join(socketDir(t), "pacer.sock")
	ln, err := ListenUnix(path, 0)
	if err != nil {
		t.Fatal(err)
	}
	ts := &testServer{Server: NewServer(sp, cfg), path: path, served: make(chan error, 1)}
	go func() { ts.served <- ts.Serve(ln) }()
	t.Cleanup(func() { ts.Close() })
	return ts
}

func dialRaw(t testing.TB, path string) *rawConn {
	t.Helper()
	c, err := net.Dial("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	c.SetDeadline(time.Now().Add(10 * time.Second))
	return &rawConn{Conn: c, rd: bufio.NewReader(c)}
}

// rawConn speaks RESP by hand so tests control every byte sent.
type rawConn struct {
	net.Conn
	rd *bufio.Reader
}

func resp(args ...string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "*%d\r\n", len(args))
	for _, a := range args {
		fmt.Fprintf(&b, "$%d\r\n%s\r\n", len(a), a)
	}
	return b.String()
}

// reply reads one whole reply and returns its raw bytes.
func (c *rawConn) reply() (string, error) {
	line, err := c.rd.ReadString('\n')
	if err != nil {
		return line, err
	}
	switch line[0] {
	case '$':
		n, _ := strconv.Atoi(strings.TrimSpace(line[1:]))
		if n < 0 {
			return line, nil
		}
		body := make([]byte, n+2)
		_, err := io.ReadFull(c.rd, body)
		return line + string(body), err
	case '*':
		n, _ := strconv.Atoi(strings.TrimSpace(line[1:]))
		for range n {
			r, err := c.reply()
			line += r
			if err != nil {
				return line, err
			}
		}
	}
	return line, nil
}

func (c *rawConn) do(t testing.TB, req string) string {
	t.Helper()
	if _, err := io.WriteString(c, req); err != nil {
		t.Fatal(err)
	}
	r, err := c.reply()
	if err != nil {
		t.Fatalf("reply to %q: %q, %v", req, r, err)
	}
	return r
}

// expectClosed asserts the server closed the connection.
func (c *rawConn) expectClosed(t testing.TB) {
	t.Helper()
	rest, err := io.ReadAll(c.rd)
	// A reset is a close too: the server hangs up with the client's
	// unread garbage still in its receive buffer.
	if err != nil && !errors.Is(err, syscall.ECONNRESET) {
		t.Fatalf("want close, got %v", err)
	}
	if len(rest) > 0 {
		t.Fatalf("want close, got more data %q", rest)
	}
}

func TestCommands(t *testing.T) {
	long := strings.Repeat("c", MaxIDBytes+1)
	longest := strings.Repeat("c", MaxIDBytes)
	steps := []struct {
		req, want string
	}{
		{resp("SPEND", "demo", "100"), ":1\r\n"},
		{resp("spend", "demo", "100", "auction-1"), ":1\r\n"},
		{resp("SpEnD", "demo", "900"), ":0\r\n"},
		{resp("SPEND", "demo", "800"), ":1\r\n"},
		{resp("SPEND", "empty", "1"), ":-1\r\n"},
		{resp("SPEND", "nope", "1"), "-ERR unknown campaign \"nope\"\r\n"},
		{resp("SPEND", "demo"), "-ERR wrong number of arguments for 'spend' command\r\n"},
		{resp("SPEND", "demo", "1", "a", "b"), "-ERR wrong number of arguments for 'spend' command\r\n"},
		{resp("SPEND"), "-ERR wrong number of arguments for 'spend' command\r\n"},
		{resp("SPEND", "demo", "abc"), "-ERR amount must be an integer number of micros\r\n"},
		{resp("SPEND", "demo", "1.5"), "-ERR amount must be an integer number of micros\r\n"},
		{resp("SPEND", "demo", "99999999999999999999"), "-ERR amount out of range: at most 9223372036854775807 micros\r\n"},
		{resp("SPEND", "demo", "9223372036854775808"), "-ERR amount out of range: at most 9223372036854775807 micros\r\n"},
		{resp("SPEND", "demo", ""), "-ERR amount must be an integer number of micros\r\n"},
		{resp("SPEND", "demo", "0x10"), "-ERR amount must be an integer number of micros\r\n"},
		{resp("SPEND", "demo", "0"), "-ERR amount must be positive\r\n"},
		{resp("SPEND", "demo", "+5"), "-ERR amount must be an integer number of micros\r\n"},
		{resp("SPEND", "demo", "05"), "-ERR amount must not have leading zeros\r\n"},
		{resp("SPEND", "demo", "00"), "-ERR amount must not have leading zeros\r\n"},
		{resp("SPEND", "demo", " 5"), "-ERR amount must be an integer number of micros\r\n"},
		{resp("SPEND", "demo", "5 "), "-ERR amount must be an integer number of micros\r\n"},
		{resp("SPEND", "demo", "-"), "-ERR amount must be an integer number of micros\r\n"},
		{resp("SPEND", "demo", "--5"), "-ERR amount must be an integer number of micros\r\n"},
		{resp("SPEND", "demo", "\u0665"), "-ERR amount must be an integer number of micros\r\n"},
		{resp("REFUND", "demo", "+1"), "-ERR amount must be an integer number of micros\r\n"},
		{resp("REFUND", "demo", "01"), "-ERR amount must not have leading zeros\r\n"},
		{resp("SPEND", "demo", "-5"), "-ERR amount must be positive\r\n"},
		{resp("SPEND", "demo", "1000001"), "-ERR amount 1000001 exceeds the per-call maximum 1000000\r\n"},
		{resp("SPEND", "", "1"), "-ERR campaign id must not be empty\r\n"},
		{resp("SPEND", long, "1"), "-ERR campaign id longer than 128 bytes\r\n"},
		{resp("SPEND", longest, "1"), "-ERR unknown campaign \"" + longest + "\"\r\n"},
		{resp("SPEND", "de\x01mo", "1"), "-ERR campaign id contains a control character\r\n"},
		{resp("SPEND", "de\nmo", "1"), "-ERR campaign id contains a control character\r\n"},
		{resp("SPEND", "demo", "1", long), "-ERR auction id longer than 128 bytes\r\n"},
		{resp("SPEND", "demo", "1", "a\tb"), "-ERR auction id contains a control character\r\n"},

		{resp("REFUND", "demo", "500"), ":1\r\n"},
		{resp("refund", "demo", "500", "auction-1"), ":1\r\n"},
		{resp("REFUND", "nope", "1"), "-ERR unknown campaign \"nope\"\r\n"},
		{resp("REFUND", "demo"), "-ERR wrong number of arguments for 'refund' command\r\n"},
		{resp("REFUND", "demo", "x"), "-ERR amount must be an integer number of micros\r\n"},
		{resp("REFUND", "demo", "-1"), "-ERR amount must be positive\r\n"},
		{resp("REFUND", "demo", "2000000"), "-ERR amount 2000000 exceeds the per-call maximum 1000000\r\n"},
		{resp("REFUND", "", "1"), "-ERR campaign id must not be empty\r\n"},

		{resp("BALANCE", "demo"), "*8\r\n$6\r\ntokens\r\n:1000\r\n$7\r\nreserve\r\n:5000\r\n$4\r\npace\r\n:250\r\n$5\r\nstate\r\n$6\r\nactive\r\n"},
		{resp("BALANCE", "nope"), "-ERR unknown campaign \"nope\"\r\n"},
		{resp("BALANCE"), "-ERR wrong number of arguments for 'balance' command\r\n"},
		{resp("BALANCE", "demo", "x"), "-ERR wrong number of arguments for 'balance' command\r\n"},
		{resp("BALANCE", long), "-ERR campaign id longer than 128 bytes\r\n"},

		{resp("PING"), "+PONG\r\n"},
		{resp("ping", "hello"), "$5\r\nhello\r\n"},
		{resp("PING", "a", "b"), "-ERR wrong number of arguments for 'ping' command\r\n"},
		{"PING\r\n", "+PONG\r\n"}, // inline, as typed in telnet
		{"ping \"a b\"\r\n", "$3\r\na b\r\n"},

		{resp("CONFIG", "GET", "save"), "*2\r\n$4\r\nsave\r\n$0\r\n\r\n"},
		{resp("config", "get", "appendonly"), "*2\r\n$10\r\nappendonly\r\n$2\r\nno\r\n"},
		{resp("CONFIG", "GET", "maxmemory"), "*0\r\n"},
		{resp("CONFIG", "GET"), "-ERR unsupported CONFIG subcommand\r\n"},
		{resp("CONFIG", "SET", "save", ""), "-ERR unsupported CONFIG subcommand\r\n"},
		{resp("CLIENT", "SETINFO", "LIB-NAME", "x"), "+OK\r\n"},
		{resp("CLIENT", "SETNAME", "bidder"), "+OK\r\n"},

		{resp("FLUSHALL"), "-ERR unknown command 'FLUSHALL'\r\n"},
		{resp("WATCH", "x"), "-ERR WATCH is not supported: pacerd has no keys to watch, and each SPEND is decided on its own\r\n"},
		{resp("X\r\nY"), "-ERR unknown command 'X??Y'\r\n"},
		{resp(strings.Repeat("z", 100)), "-ERR unknown command '" + strings.Repeat("z", 64) + "'\r\n"},
		{"\x00\x01garbage\r\n", "-ERR unknown command '??garbage'\r\n"},
	}
	sp := newFakeSpender()
	ts := startServer(t, sp, ServerConfig{MaxAmountMicros: 1_000_000})
	c := dialRaw(t, ts.path)
	for i, st := range steps {
		if got := c.do(t, st.req); got != st.want {
			t.Errorf("step %d: %q\n got %q\nwant %q", i, st.req, got, st.want)
		}
	}
	if got, want := strings.Join(sp.auction, ","), ",auction-1,,,"; got != want {
		t.Errorf("auction ids seen = %q, want %q", got, want)
	}

	if got := c.do(t, resp("QUIT")); got != "+OK\r\n" {
		t.Errorf("QUIT = %q", got)
	}
	c.expectClosed(t)

	st := ts.Stats()
	if st.Commands != uint64(len(steps)+1) || st.ConnectionsAccepted != 1 {
		t.Errorf("stats = %+v, want %d commands on 1 connection", st, len(steps)+1)
	}
	if st.ErrorReplies == 0 || st.ProtocolErrors != 0 {
		t.Errorf("stats = %+v", st)
	}
}

func TestInfo(t *testing.T) {
	ts := startServer(t, newFakeSpender(), ServerConfig{})
	c := dialRaw(t, ts.path)
	c.do(t, resp("PING"))
	got := c.do(t, resp("INFO"))
	body := got[strings.Index(got, "\r\n")+2 : len(got)-2]
	if !strings.HasPrefix(got, "$"+strconv.Itoa(len(body))+"\r\n") {
		t.Fatalf("INFO is not one bulk string: %q", got)
	}
	// INFO counts itself, as in Redis.
	want := "# pacer\r\ncampaigns:3\r\nleases_held:2\r\n\r\n# transport\r\n" +
		"connected_clients:1\r\ntotal_connections_received:1\r\n" +
		"total_commands_processed:2\r\ntotal_error_replies:0\r\ntotal_protocol_errors:0\r\n" +
		"rejected_connections:0\r\ntimedout_connections:0\r\n"
	if body != want {
		t.Errorf("INFO body\n got %q\nwant %q", body, want)
	}
	if got2 := c.do(t, resp("info", "server")); !strings.Contains(got2, "# pacer\r\n") {
		t.Errorf("INFO server = %q", got2)
	}
	// The manual names each key of the transport section.
	doc, err := os.ReadFile("../docs/PROTOCOL.md")
	if err != nil {
		t.Fatal(err)
	}
	_, section, _ := strings.Cut(string(doc), "`# transport`, the socket:")
	section, _, _ = strings.Cut(section, "\n\n")
	_, transport, _ := strings.Cut(body, "# transport\r\n")
	for _, line := range strings.Split(strings.TrimSpace(transport), "\r\n") {
		if key, _, _ := strings.Cut(line, ":"); !strings.Contains(section, "`"+key+"`") {
			t.Errorf("INFO sends %q; docs/PROTOCOL.md's INFO section (# transport) does not name it", key)
		}
	}
}

func TestPipelineAnsweredInOrder(t *testing.T) {
	ts := startServer(t, newFakeSpender(), ServerConfig{})
	c := dialRaw(t, ts.path)
	// Enough requests to cross the guard's buffer several times, so the
	// boundary bookkeeping is exercised too.
	const n = 3000
	var req strings.Builder
	for i := range n {
		if i%3 == 0 {
			req.WriteString(resp("SPEND", "demo", "1", "a"+strconv.Itoa(i)))
		} else {
			req.WriteString(resp("PING", strconv.Itoa(i)))
		}
	}
	go io.WriteString(c, req.String())
	for i := range n {
		got, err := c.reply()
		if err != nil {
			t.Fatalf("reply %d: %v", i, err)
		}
		want := fmt.Sprintf("$%d\r\n%d\r\n", len(strconv.Itoa(i)), i)
		if i%3 == 0 {
			want = ":1\r\n"
		}
		if got != want {
			t.Fatalf("reply %d = %q, want %q", i, got, want)
		}
	}
}

func TestLargeRequestWithinLimit(t *testing.T) {
	ts := startServer(t, newFakeSpender(), ServerConfig{})
	c := dialRaw(t, ts.path)
	msg := strings.Repeat("m", DefaultMaxRequestBytes-100)
	if got := c.do(t, resp("PING", msg)); got != "$"+strconv.Itoa(len(msg))+"\r\n"+msg+"\r\n" {
		t.Errorf("large PING echoed wrongly (%d bytes)", len(got))
	}
	if got := c.do(t, resp("PING")); got != "+PONG\r\n" {
		t.Errorf("PING after large request = %q", got)
	}
}

// TestHostileClients sends malformed input on one connection at a time
// while a well-behaved client keeps asking; the bad connection must get an
// error and be closed, the good one must keep getting right answers.
const inlineTooLong = "-ERR Protocol error: inline request longer than 4096 bytes (send long requests as RESP arrays)\r\n"

func TestHostileClients(t *testing.T) {
	steps := []struct {
		name, send string
		want       string // the error reply before the close; "" for a bare close
	}{
		{"bad multibulk length", "*abc\r\n", "-ERR Protocol error: invalid multibulk length\r\n"},
		{"huge multibulk count", "*99999999999\r\n", "-ERR Protocol error: invalid multibulk length\r\n"},
		{"overflowing multibulk count", "*" + strings.Repeat("9", 40) + "\r\n", "-ERR Protocol error: invalid multibulk length\r\n"},
		{"negative multibulk count", "*-1\r\n", "-ERR Protocol error: invalid multibulk length\r\n"},
		{"zero multibulk count", "*0\r\n", "-ERR Protocol error: invalid multibulk length\r\n"},
		{"too many arguments", "*65\r\n", "-ERR Protocol error: invalid multibulk length\r\n"},
		{"bulk length 1<<40", "*1\r\n$1099511627776\r\n", "-ERR Protocol error: invalid bulk length\r\n"},
		{"negative bulk length", "*2\r\n$4\r\nPING\r\n$-3\r\n", "-ERR Protocol error: invalid bulk length\r\n"},
		{"bulk not followed by CRLF", "*1\r\n$4\r\nPINGxx", "-ERR Protocol error: invalid bulk length\r\n"},
		{"missing dollar", "*1\r\n#4\r\nPING\r\n", "-ERR Protocol error: expected '$', got '#'\r\n"},
		{"header LF without CR", "*1\n", "-ERR Protocol error: invalid multibulk length\r\n"},
		{"unbalanced quotes", "PING \"abc\r\n", "-ERR Protocol error: unbalanced quotes in request\r\n"},
		{"unterminated inline line", strings.Repeat("x", DefaultMaxInlineBytes+1), inlineTooLong},
		{"unterminated binary garbage", strings.Repeat("\x00\xfe\x7f", DefaultMaxRequestBytes), inlineTooLong},
		{"64 KB line of spaces", strings.Repeat(" ", 64<<10) + "\r\n", inlineTooLong},
		{"inline line just over the limit", "PING " + strings.Repeat("x", DefaultMaxInlineBytes-4) + "\r\n", inlineTooLong},
		{"inline arguments over the cap", "PING" + strings.Repeat(" a", DefaultMaxArgs) + "\r\n", "-ERR Protocol error: inline request with more than 64 arguments\r\n"},
		{"quote inside a quoted word", "PING \"a\"b\r\n", "-ERR Protocol error: unbalanced quotes in request\r\n"},
		{"request over the limit", resp("PING", strings.Repeat("x", DefaultMaxRequestBytes)), "-ERR Protocol error: request larger than 65536 bytes\r\n"},
		{"half-sent command", "*3\r\n$5\r\nSPEND\r\n$4\r\nde", ""},
		{"half-sent header", "*3\r\n$5", ""},
	}
	ts := startServer(t, newFakeSpender(), ServerConfig{})

	var ok, bad atomic.Int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	good := dialRaw(t, ts.path)
	good.SetDeadline(time.Time{})
	go func() {
		defer wg.Done()
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			msg := strconv.Itoa(i)
			io.WriteString(good, resp("PING", msg)+resp("SPEND", "nope", "1"))
			r1, err1 := good.reply()
			r2, err2 := good.reply()
			if err1 != nil || err2 != nil || r1 != "$"+strconv.Itoa(len(msg))+"\r\n"+msg+"\r\n" ||
				r2 != "-ERR unknown campaign \"nope\"\r\n" {
				bad.Add(1)
				return
			}
			ok.Add(1)
		}
	}()

	for _, st := range steps {
		t.Run(st.name, func(t *testing.T) {
			c := dialRaw(t, ts.path)
			start := time.Now()
			// Write from a goroutine: the server may close before
			// reading everything, and that must not block the test.
			go func() {
				io.WriteString(c, st.send)
				if st.want == "" {
					c.Conn.(*net.UnixConn).CloseWrite()
				}
			}()
			if st.want != "" {
				got, err := c.reply()
				if got != st.want {
					t.Fatalf("got %q (%v), want %q", got, err, st.want)
				}
				c.expectClosed(t)
			} else {
				// The server sees EOF mid-request and just hangs up.
				c.expectClosed(t)
			}
			if d := time.Since(start); d > 2*time.Second {
				t.Errorf("took %v", d)
			}
		})
	}
	// The good client made progress during and after the attack.
	before := ok.Load()
	deadline := time.Now().Add(5 * time.Second)
	for ok.Load() < before+10 && bad.Load() == 0 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	close(stop)
	wg.Wait()
	if bad.Load() != 0 || ok.Load() < before+10 {
		t.Fatalf("well-behaved client: %d good rounds, %d bad", ok.Load(), bad.Load())
	}
	st := ts.Stats()
	if want := uint64(len(steps) - 2); st.ProtocolErrors != want {
		t.Errorf("ProtocolErrors = %d, want %d", st.ProtocolErrors, want)
	}
}

func TestListenUnix(t *testing.T) {
	t.Run("mode applied", func(t *testing.T) {
		for _, tc := range []struct{ mode, want os.FileMode }{{0, 0o660}, {0o600, 0o600}, {0o666, 0o666}} {
			path := filepath.Join(socketDir(t), "s")
			ln, err := ListenUnix(path, tc.mode)
			if err != nil {
				t.Fatal(err)
			}
			fi, err := os.Lstat(path)
			if err != nil {
				t.Fatal(err)
			}
			if fi.Mode().Type() != os.ModeSocket || fi.Mode().Perm() != tc.want {
				t.Errorf("mode %v: file mode %v, want socket %v", tc.mode, fi.Mode(), tc.want)
			}
			ln.Close()
			if _, err := os.Lstat(path); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("socket file left after Close: %v", err)
			}
		}
	})
	t.Run("stale socket replaced", func(t *testing.T) {
		path := filepath.Join(socketDir(t), "s")
		old, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
		if err != nil {
			t.Fatal(err)
		}
		old.SetUnlinkOnClose(false) // as a SIGKILLed daemon leaves it
		old.Close()
		ln, err := ListenUnix(path, 0)
		if err != nil {
			t.Fatalf("stale socket not replaced: %v", err)
		}
		srv := NewServer(newFakeSpender(), ServerConfig{Server: testKind()})
		go srv.Serve(ln)
		defer srv.Close()
		if got := dialRaw(t, path).do(t, resp("PING")); got != "+PONG\r\n" {
			t.Errorf("PING = %q", got)
		}
	})
	t.Run("live socket refused", func(t *testing.T) {
		ts := startServer(t, newFakeSpender(), ServerConfig{})
		if _, err := ListenUnix(ts.path, 0); err == nil || !strings.Contains(err.Error(), "in use") {
			t.Fatalf("err = %v, want in use", err)
		}
		if got := dialRaw(t, ts.path).do(t, resp("PING")); got != "+PONG\r\n" {
			t.Errorf("running server disturbed: PING = %q", got)
		}
	})
	t.Run("regular file refused and kept", func(t *testing.T) {
		path := filepath.Join(socketDir(t), "s")
		if err := os.WriteFile(path, []byte("precious"), 0o644); err != nil {
			t.Fatal(err)
		}
		_, err := ListenUnix(path, 0)
		if err == nil || !strings.Contains(err.Error(), "not a socket") {
			t.Fatalf("err = %v, want not a socket", err)
		}
		if b, err := os.ReadFile(path); err != nil || string(b) != "precious" {
			t.Errorf("file changed: %q, %v", b, err)
		}
	})
	t.Run("directory refused", func(t *testing.T) {
		path := filepath.Join(socketDir(t), "s")
		os.Mkdir(path, 0o755)
		if _, err := ListenUnix(path, 0); err == nil || !strings.Contains(err.Error(), "not a socket") {
			t.Fatalf("err = %v", err)
		}
	})
	t.Run("missing parent directory", func(t *testing.T) {
		path := filepath.Join(socketDir(t), "missing", "s")
		_, err := ListenUnix(path, 0)
		if err == nil || !strings.Contains(err.Error(), "socket directory") || !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("err = %v, want socket directory ... not exist", err)
		}
	})
	t.Run("empty path", func(t *testing.T) {
		if _, err := ListenUnix("", 0); err == nil {
			t.Fatal("no error")
		}
	})
}

func TestGracefulShutdown(t *testing.T) {
	sp := newFakeSpender()
	ts := startServer(t, sp, ServerConfig{})
	busy := dialRaw(t, ts.path)
	idle := dialRaw(t, ts.path)
	idle.do(t, resp("PING"))

	io.WriteString(busy, resp("SPEND", "slow", "7"))
	<-sp.entered

	shut := make(chan error, 1)
	go func() { shut <- ts.Shutdown(context.Background()) }()

	if err := <-ts.served; !errors.Is(err, ErrServerClosed) {
		t.Fatalf("Serve = %v, want ErrServerClosed", err)
	}
	idle.expectClosed(t)
	if c, err := net.Dial("unix", ts.path); err == nil {
		c.Close()
		t.Fatal("new connection accepted during shutdown")
	}
	select {
	case err := <-shut:
		t.Fatalf("Shutdown returned %v with a command in flight", err)
	case <-time.After(50 * time.Millisecond):
	}

	close(sp.release)
	if got, err := busy.reply(); got != ":1\r\n" {
		t.Fatalf("in-flight SPEND = %q, %v; want :1", got, err)
	}
	busy.expectClosed(t)
	if err := <-shut; err != nil {
		t.Fatalf("Shutdown = %v", err)
	}
	if st := ts.Stats(); st.ConnectionsOpen != 0 {
		t.Errorf("stats after shutdown = %+v", st)
	}
}

func TestShutdownDeadline(t *testing.T) {
	sp := newFakeSpender()
	ts := startServer(t, sp, ServerConfig{})
	busy := dialRaw(t, ts.path)
	io.WriteString(busy, resp("SPEND", "slow", "7"))
	<-sp.entered

	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if err := ts.Shutdown(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Shutdown = %v, want deadline exceeded", err)
	}
	busy.expectClosed(t) // forced
	close(sp.release)
	ts.Close() // waits for the handler still in Spend
}

func TestServeAfterClose(t *testing.T) {
	srv := NewServer(newFakeSpender(), ServerConfig{Server: testKind()})
	srv.Close()
	path := filepath.Join(socketDir(t), "s")
	ln, err := ListenUnix(path, 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Serve(ln); !errors.Is(err, ErrServerClosed) {
		t.Fatalf("Serve = %v", err)
	}
	if _, err := os.Lstat(path); !errors.Is(err, os.ErrNotExist) {
		t.Error("listener not closed")
	}
}

func TestReaderSplitsRequestsAnyReadSize(t *testing.T) {
	// Whatever the read sizes, the reader must return the same commands.
	var stream bytes.Buffer
	var want [][]string
	for i := range 500 {
		args := []string{"SPEND", "campaign-" + strconv.Itoa(i), strconv.Itoa(i + 1), strings.Repeat("a", i%130)}
		stream.WriteString(resp(args...))
		want = append(want, args)
		stream.WriteString("PING " + strconv.Itoa(i) + "\r\n\r\n")
		want = append(want, []string{"PING", strconv.Itoa(i)})
		stream.WriteString(resp("PING", strings.Repeat("b", i*40)))
		want = append(want, []string{"PING", strings.Repeat("b", i*40)})
	}
	for _, chunk := range []int{1, 7, 100, 4096, 1 << 20} {
		src := &chunkReader{b: stream.Bytes(), n: chunk}
		rd := newRequestReader(DefaultMaxArgs, DefaultMaxRequestBytes, DefaultMaxInlineBytes)
		var got [][]string
		for {
			args, err := rd.next()
			if err != nil {
				t.Fatalf("chunk %d: %v", chunk, err)
			}
			if args == nil {
				if err := rd.fill(src); err == io.EOF {
					break
				} else if err != nil {
					t.Fatalf("chunk %d: %v", chunk, err)
				}
				continue
			}
			var strs []string
			for _, a := range args {
				strs = append(strs, string(a))
			}
			got = append(got, strs)
		}
		if len(got) != len(want) {
			t.Fatalf("chunk %d: %d commands, want %d", chunk, len(got), len(want))
		}
		for i := range want {
			if strings.Join(got[i], "|") != strings.Join(want[i], "|") {
				t.Fatalf("chunk %d: command %d = %q, want %q", chunk, i, got[i], want[i])
			}
		}
		if rd.buffered() || cap(rd.buf) > DefaultMaxRequestBytes+1 {
			t.Fatalf("chunk %d: buffer %d bytes, %v pending", chunk, cap(rd.buf), rd.buffered())
		}
	}
}

type chunkReader struct {
	b []byte
	n int
}

func (r *chunkReader) Read(p []byte) (int, error) {
	if len(r.b) == 0 {
		return 0, io.EOF
	}
	n := copy(p[:min(len(p), r.n)], r.b)
	r.b = r.b[n:]
	return n, nil
}

// One SPEND in SpendSample per connection is timed for ObserveSpend.
func TestObserveSpendSamples(t *testing.T) {
	var mu sync.Mutex
	var seen []time.Duration
	ts := startServer(t, newFakeSpender(), ServerConfig{ObserveSpend: func(d time.Duration) {
		mu.Lock()
		seen = append(seen, d)
		mu.Unlock()
	}})
	c := dialRaw(t, ts.path)
	for range 2*SpendSample + 1 {
		c.do(t, resp("SPEND", "empty", "1"))
	}
	mu.Lock()
	defer mu.Unlock()
	if len(seen) != 2 {
		t.Fatalf("%d SPENDs timed out of %d; want 2", len(seen), 2*SpendSample+1)
	}
	for _, d := range seen {
		if d <= 0 {
			t.Fatalf("observed %v", d)
		}
	}
}

// TestSlowSpendDoesNotStallOthers: while one connection's SPEND waits on
// the Spender (as the daemon's first SPEND of a campaign waits on the
// ledger), other connections are answered, with either socket server. The
// event loop hands such a request to a goroutine of its own.
func TestSlowSpendDoesNotStallOthers(t *testing.T) {
	sp := newFakeSpender()
	sp.tokens["demo"] = 1 << 40
	ts := startServer(t, sp, ServerConfig{})
	stuck := dialRaw(t, ts.path)
	io.WriteString(stuck, resp("SPEND", "slow", "7"))
	<-sp.entered
	released := false
	defer func() { // on failure too, so the server can close
		if !released {
			close(sp.release)
		}
	}()
	for i := range 6 {
		c := dialRaw(t, ts.path)
		for j := range 3 { // the first SPEND of demo on c, then ones the loop answers itself
			if got := c.do(t, resp("SPEND", "demo", "1")); got != ":1\r\n" {
				t.Fatalf("connection %d, SPEND %d while another waits on the Spender: %q", i, j, got)
			}
		}
		if got := c.do(t, resp("PING")); got != "+PONG\r\n" {
			t.Fatalf("connection %d: PING = %q", i, got)
		}
	}
	close(sp.release)
	released = true
	if got, err := stuck.reply(); got != ":1\r\n" {
		t.Fatalf("the slow SPEND = %q, %v", got, err)
	}
	if got := stuck.do(t, resp("PING")); got != "+PONG\r\n" {
		t.Fatalf("PING after the slow SPEND = %q", got)
	}
}
