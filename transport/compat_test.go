package transport

import (
	"io"
	"strconv"
	"strings"
	"testing"
	"time"
)

// reply3 reads one whole RESP2 or RESP3 reply and returns its raw bytes.
func (c *rawConn) reply3() (string, error) {
	line, err := c.rd.ReadString('\n')
	if err != nil {
		return line, err
	}
	n, _ := strconv.Atoi(strings.TrimSpace(line[1:]))
	switch line[0] {
	case '$', '=':
		if n < 0 {
			return line, nil
		}
		body := make([]byte, n+2)
		_, err := io.ReadFull(c.rd, body)
		return line + string(body), err
	case '*', '%', '~':
		if line[0] == '%' {
			n *= 2
		}
		for range n {
			r, err := c.reply3()
			line += r
			if err != nil {
				return line, err
			}
		}
	}
	return line, nil
}

func (c *rawConn) do3(t testing.TB, req string) string {
	t.Helper()
	if _, err := io.WriteString(c, req); err != nil {
		t.Fatal(err)
	}
	r, err := c.reply3()
	if err != nil {
		t.Fatalf("reply to %q: %q, %v", req, r, err)
	}
	return r
}

type step struct{ req, want string }

func runSteps(t *testing.T, c *rawConn, steps []step) {
	t.Helper()
	for i, st := range steps {
		if got := c.do3(t, st.req); got != st.want {
			t.Errorf("step %d: %q\n got %q\nwant %q", i, st.req, got, st.want)
		}
	}
}

func bulk(s string) string { return "$" + strconv.Itoa(len(s)) + "\r\n" + s + "\r\n" }

func helloReply(head, proto string, id int64) string {
	return head + bulk("server") + bulk("pacerd") + bulk("version") + bulk(helloVersion) +
		bulk("proto") + ":" + proto + "\r\n" + bulk("id") + ":" + strconv.FormatInt(id, 10) + "\r\n" +
		bulk("mode") + bulk("standalone") + bulk("role") + bulk("master") + bulk("modules") + "*0\r\n"
}

const balanceBody = "$6\r\ntokens\r\n:1000\r\n$7\r\nreserve\r\n:5000\r\n$4\r\npace\r\n:250\r\n$5\r\nstate\r\n$6\r\nactive\r\n"

// TestHello: HELLO switches a connection to RESP3 and back; BALANCE and
// CONFIG GET become maps, nulls become "_", everything else is unchanged.
// This is what redis-py ≥ 5 with protocol=3 (and redis-py 8 by default),
// node-redis with RESP: 3 and go-redis send first.
func TestHello(t *testing.T) {
	ts := startServer(t, newFakeSpender(), ServerConfig{})
	c := dialRaw(t, ts.path)
	idReply := c.do3(t, resp("CLIENT", "ID"))
	id, err := strconv.ParseInt(strings.TrimSpace(strings.TrimPrefix(idReply, ":")), 10, 64)
	if err != nil || id <= 0 {
		t.Fatalf("CLIENT ID = %q", idReply)
	}
	runSteps(t, c, []step{
		{resp("HELLO"), helloReply("*14\r\n", "2", id)},
		{resp("CLIENT", "GETNAME"), "$-1\r\n"},
		{resp("HELLO", "3", "SETNAME", "bidder-1"), helloReply("%7\r\n", "3", id)},
		{resp("CLIENT", "GETNAME"), "$8\r\nbidder-1\r\n"},
		{resp("BALANCE", "demo"), "%4\r\n" + balanceBody},
		{resp("SPEND", "demo", "100"), ":1\r\n"},
		{resp("SPEND", "nope", "1"), "-ERR unknown campaign \"nope\"\r\n"},
		{resp("CONFIG", "GET", "save"), "%1\r\n$4\r\nsave\r\n$0\r\n\r\n"},
		{resp("CONFIG", "GET", "maxmemory"), "%0\r\n"},
		{resp("CLIENT", "SETNAME", ""), "+OK\r\n"},
		{resp("CLIENT", "GETNAME"), "_\r\n"},
		{resp("HELLO", "3", "AUTH", "default", "secret"), helloReply("%7\r\n", "3", id)},
		{resp("HELLO", "2"), helloReply("*14\r\n", "2", id)},
		{resp("BALANCE", "demo"), "*8\r\n$6\r\ntokens\r\n:900\r\n" + balanceBody[len("$6\r\ntokens\r\n:1000\r\n"):]},
		{resp("HELLO", "4"), "-NOPROTO unsupported protocol version 4: pacerd speaks 2 and 3\r\n"},
		{resp("HELLO", "x"), "-ERR Protocol version is not an integer or out of range\r\n"},
		{resp("HELLO", "3", "SETNAME"), "-ERR syntax error in HELLO option 'SETNAME'\r\n"},
		{resp("HELLO", "3", "AUTH", "u"), "-ERR syntax error in HELLO option 'AUTH'\r\n"},
		{resp("HELLO", "3", "SETNAME", "a b"), "-ERR Client names cannot contain spaces, newlines or special characters.\r\n"},
		// A failed HELLO changes nothing.
		{resp("CONFIG", "GET", "maxmemory"), "*0\r\n"},
	})
	// INFO stays one string under RESP3: clients' info() helpers parse it.
	c.do3(t, resp("HELLO", "3"))
	if got := c.do3(t, resp("INFO")); !strings.HasPrefix(got, "$") || !strings.Contains(got, "# pacer\r\ncampaigns:3\r\n") {
		t.Errorf("INFO under RESP3 = %q", got)
	}
	// RESET goes back to RESP2 and forgets the name.
	runSteps(t, c, []step{
		{resp("CLIENT", "SETNAME", "x"), "+OK\r\n"},
		{resp("RESET"), "+RESET\r\n"},
		{resp("CLIENT", "GETNAME"), "$-1\r\n"},
		{resp("BALANCE", "demo"), "*8\r\n$6\r\ntokens\r\n:900\r\n" + balanceBody[len("$6\r\ntokens\r\n:1000\r\n"):]},
		{resp("CLIENT", "ID"), ":" + strconv.FormatInt(id, 10) + "\r\n"},
	})

	// Each connection has its own protocol and id.
	c2 := dialRaw(t, ts.path)
	if got := c2.do3(t, resp("BALANCE", "demo")); !strings.HasPrefix(got, "*8\r\n") {
		t.Errorf("a new connection starts in RESP2, BALANCE = %q", got)
	}
	if got := c2.do3(t, resp("CLIENT", "ID")); got == idReply {
		t.Errorf("two connections share CLIENT ID %q", got)
	}
}

func TestClientSelectEcho(t *testing.T) {
	ts := startServer(t, newFakeSpender(), ServerConfig{})
	c := dialRaw(t, ts.path)
	runSteps(t, c, []step{
		{resp("CLIENT", "SETNAME", "bidder"), "+OK\r\n"},
		{resp("client", "getname"), "$6\r\nbidder\r\n"},
		{resp("CLIENT", "SETNAME", "a\nb"), "-ERR Client names cannot contain spaces, newlines or special characters.\r\n"},
		{resp("CLIENT", "SETNAME", strings.Repeat("n", MaxIDBytes+1)), "-ERR client name longer than 128 bytes\r\n"},
		{resp("CLIENT", "SETNAME"), "-ERR wrong number of arguments for 'client|setname' command\r\n"},
		{resp("CLIENT", "SETINFO", "LIB-NAME", "redis-py"), "+OK\r\n"},
		{resp("CLIENT", "SETINFO", "lib-ver", "8.0.0"), "+OK\r\n"},
		{resp("CLIENT", "SETINFO", "colour", "x"), "-ERR Unrecognized option 'colour'\r\n"},
		{resp("CLIENT", "SETINFO", "LIB-NAME"), "-ERR wrong number of arguments for 'client|setinfo' command\r\n"},
		{resp("CLIENT", "NO-EVICT", "on"), "+OK\r\n"},
		{resp("CLIENT", "NO-TOUCH", "OFF"), "+OK\r\n"},
		{resp("CLIENT", "NO-EVICT", "maybe"), "-ERR syntax error: CLIENT NO-EVICT ON|OFF\r\n"},
		{resp("CLIENT", "LIST"), "-ERR unknown subcommand 'LIST'. pacerd answers CLIENT SETNAME, GETNAME, ID, INFO, SETINFO, NO-EVICT and NO-TOUCH\r\n"},
		{resp("CLIENT"), "-ERR wrong number of arguments for 'client' command\r\n"},
		{resp("SELECT", "0"), "+OK\r\n"},
		{resp("SELECT", "1"), "-ERR DB index is out of range: pacerd has a single database, 0\r\n"},
		{resp("SELECT"), "-ERR wrong number of arguments for 'select' command\r\n"},
		{resp("ECHO", "hi there"), "$8\r\nhi there\r\n"},
		{resp("ECHO"), "-ERR wrong number of arguments for 'echo' command\r\n"},
		{resp("UNWATCH"), "+OK\r\n"},
		{resp("NOSUCH", "x"), "-ERR unknown command 'NOSUCH'\r\n"},
	})
	info := c.do3(t, resp("CLIENT", "INFO"))
	for _, want := range []string{" name=bidder ", " resp=2 ", " lib-name=redis-py ", " lib-ver=8.0.0", " multi=-1 "} {
		if !strings.Contains(info, want) {
			t.Errorf("CLIENT INFO = %q, want it to contain %q", info, want)
		}
	}
	if got := c.do3(t, resp("QUIT")); got != "+OK\r\n" {
		t.Errorf("QUIT = %q", got)
	}
	c.expectClosed(t)
}

func TestCommandIntrospection(t *testing.T) {
	ts := startServer(t, newFakeSpender(), ServerConfig{})
	c := dialRaw(t, ts.path)
	spendInfo := "*10\r\n$5\r\nspend\r\n:-3\r\n*2\r\n+write\r\n+fast\r\n:0\r\n:0\r\n:0\r\n*0\r\n*0\r\n*0\r\n*0\r\n"
	runSteps(t, c, []step{
		{resp("COMMAND", "COUNT"), ":" + strconv.Itoa(len(commands)) + "\r\n"},
		{resp("COMMAND", "INFO", "SPEND", "flushall"), "*2\r\n" + spendInfo + "$-1\r\n"},
		{resp("COMMAND", "DOCS", "balance"), "*2\r\n$7\r\nbalance\r\n*6\r\n$7\r\nsummary\r\n" + bulk(lookup([]byte("balance")).summary) +
			"$5\r\nsince\r\n$5\r\n1.0.0\r\n$5\r\ngroup\r\n$5\r\npacer\r\n"},
		{resp("COMMAND", "GETKEYS", "x"), "-ERR unknown subcommand 'GETKEYS'. pacerd answers COMMAND, COMMAND COUNT, INFO, DOCS and LIST\r\n"},
	})
	all := c.do3(t, resp("COMMAND"))
	if !strings.HasPrefix(all, "*"+strconv.Itoa(len(commands))+"\r\n") || !strings.Contains(all, spendInfo) {
		t.Errorf("COMMAND = %q", all)
	}
	list := c.do3(t, resp("COMMAND", "LIST"))
	for _, name := range []string{"spend", "refund", "balance", "hello", "multi", "exec"} {
		if !strings.Contains(list, bulk(name)) {
			t.Errorf("COMMAND LIST = %q, lacks %s", list, name)
		}
	}
	c.do3(t, resp("HELLO", "3"))
	docs := c.do3(t, resp("COMMAND", "DOCS"))
	if !strings.HasPrefix(docs, "%"+strconv.Itoa(len(commands))+"\r\n") || !strings.Contains(docs, "$5\r\nspend\r\n%3\r\n") {
		t.Errorf("COMMAND DOCS under RESP3 = %q", docs)
	}
	if got := c.do3(t, resp("COMMAND", "INFO", "nope")); got != "*1\r\n_\r\n" {
		t.Errorf("COMMAND INFO nope under RESP3 = %q", got)
	}
}

// TestMulti: queued commands run in order at EXEC, one reply each; errors
// while queueing abort the EXEC; runtime errors take their slot only.
func TestMulti(t *testing.T) {
	sp := newFakeSpender()
	ts := startServer(t, sp, ServerConfig{MaxAmountMicros: 1_000_000})
	c := dialRaw(t, ts.path)
	hello3 := c.hello3(t)
	runSteps(t, c, []step{
		{resp("EXEC"), "-ERR EXEC without MULTI\r\n"},
		{resp("DISCARD"), "-ERR DISCARD without MULTI\r\n"},
		{resp("MULTI"), "+OK\r\n"},
		{resp("MULTI"), "-ERR MULTI calls can not be nested\r\n"},
		{resp("SPEND", "demo", "600", "a-1"), "+QUEUED\r\n"},
		{resp("SPEND", "demo", "600", "a-2"), "+QUEUED\r\n"},
		{resp("SPEND", "nope", "1"), "+QUEUED\r\n"},
		{resp("REFUND", "demo", "600", "a-1"), "+QUEUED\r\n"},
		{resp("BALANCE", "demo"), "+QUEUED\r\n"},
		{resp("PING"), "+QUEUED\r\n"},
		// Nothing has run yet.
		{resp("EXEC"), "*6\r\n:1\r\n:0\r\n-ERR unknown campaign \"nope\"\r\n:1\r\n" +
			"*8\r\n$6\r\ntokens\r\n:1000\r\n" + balanceBody[len("$6\r\ntokens\r\n:1000\r\n"):] + "+PONG\r\n"},
		{resp("EXEC"), "-ERR EXEC without MULTI\r\n"},

		{resp("MULTI"), "+OK\r\n"},
		{resp("SPEND", "demo", "1"), "+QUEUED\r\n"},
		{resp("DISCARD"), "+OK\r\n"},
		{resp("BALANCE", "demo"), "*8\r\n" + balanceBody},

		// Queue-time errors abort the whole transaction, as in Redis.
		{resp("MULTI"), "+OK\r\n"},
		{resp("SPEND", "demo", "1"), "+QUEUED\r\n"},
		{resp("FLUSHALL"), "-ERR unknown command 'FLUSHALL'\r\n"},
		{resp("BALANCE"), "-ERR wrong number of arguments for 'balance' command\r\n"},
		{resp("SPEND", "demo", "x"), "-ERR amount must be an integer number of micros\r\n"},
		{resp("EXEC"), "-EXECABORT Transaction discarded because of previous errors.\r\n"},
		{resp("BALANCE", "demo"), "*8\r\n" + balanceBody},

		{resp("MULTI"), "+OK\r\n"},
		{resp("WATCH", "x"), "-ERR WATCH inside MULTI is not allowed\r\n"},
		{resp("EXEC"), "-EXECABORT Transaction discarded because of previous errors.\r\n"},

		// Under RESP3 the queued replies follow the connection's protocol.
		{resp("HELLO", "3"), hello3},
		{resp("MULTI"), "+OK\r\n"},
		{resp("BALANCE", "demo"), "+QUEUED\r\n"},
		{resp("EXEC"), "*1\r\n%4\r\n" + balanceBody},

		// RESET drops an open MULTI.
		{resp("MULTI"), "+OK\r\n"},
		{resp("SPEND", "demo", "1"), "+QUEUED\r\n"},
		{resp("RESET"), "+RESET\r\n"},
		{resp("EXEC"), "-ERR EXEC without MULTI\r\n"},
		{resp("BALANCE", "demo"), "*8\r\n" + balanceBody},
	})
	if got, want := strings.Join(sp.auction, ","), "a-1,a-2"; got != want {
		t.Errorf("auction ids seen = %q, want %q (in queue order)", got, want)
	}

	// QUIT inside MULTI closes at once; nothing queued runs.
	c2 := dialRaw(t, ts.path)
	runSteps(t, c2, []step{
		{resp("MULTI"), "+OK\r\n"},
		{resp("SPEND", "demo", "1"), "+QUEUED\r\n"},
		{resp("QUIT"), "+OK\r\n"},
	})
	c2.expectClosed(t)
	if got := c.do3(t, resp("BALANCE", "demo")); !strings.Contains(got, ":1000\r\n") {
		t.Errorf("BALANCE after a MULTI ended by QUIT = %q, want tokens untouched", got)
	}
}

// hello3 returns what HELLO 3 answers on c's connection (its id varies).
func (c *rawConn) hello3(t *testing.T) string {
	id := c.do3(t, resp("CLIENT", "ID"))
	n, _ := strconv.ParseInt(strings.TrimSpace(id[1:]), 10, 64)
	return helloReply("%7\r\n", "3", n)
}

// TestMultiBounded: a MULTI that is never EXECed cannot grow the daemon's
// memory past MaxQueuedCommands / MaxQueuedBytes; past them it aborts.
func TestMultiBounded(t *testing.T) {
	sp := newFakeSpender()
	ts := startServer(t, sp, ServerConfig{})
	c := dialRaw(t, ts.path)
	c.do3(t, resp("MULTI"))
	var req strings.Builder
	for range MaxQueuedCommands {
		req.WriteString(resp("PING"))
	}
	if _, err := io.WriteString(c, req.String()); err != nil {
		t.Fatal(err)
	}
	for i := range MaxQueuedCommands {
		if r, err := c.reply3(); err != nil || r != "+QUEUED\r\n" {
			t.Fatalf("queued %d: %q, %v", i, r, err)
		}
	}
	runSteps(t, c, []step{
		{resp("PING"), "-ERR transaction too large: at most 10000 commands and 1048576 bytes per MULTI; DISCARD it and send smaller ones\r\n"},
		{resp("EXEC"), "-EXECABORT Transaction discarded because of previous errors.\r\n"},
	})

	c.do3(t, resp("MULTI"))
	big := strings.Repeat("b", 60_000)
	n := 0
	for {
		r := c.do3(t, resp("ECHO", big))
		if r != "+QUEUED\r\n" {
			if !strings.HasPrefix(r, "-ERR transaction too large") {
				t.Fatalf("ECHO %d: %q", n, r)
			}
			break
		}
		n++
	}
	if want := MaxQueuedBytes / (len(big) + 4 + 3*queuedArgOverhead); n != want {
		t.Errorf("queued %d 60 kB commands, want %d", n, want)
	}
}

// TestMultiCountsArgumentOverhead: a MULTI of commands with many empty
// arguments is bounded by the memory they take, not just their bytes.
func TestMultiCountsArgumentOverhead(t *testing.T) {
	ts := startServer(t, newFakeSpender(), ServerConfig{})
	c := dialRaw(t, ts.path)
	c.do3(t, resp("MULTI"))
	args := append([]string{"INFO"}, make([]string, DefaultMaxArgs-1)...)
	req := resp(args...)
	n := 0
	for {
		r := c.do3(t, req)
		if r != "+QUEUED\r\n" {
			if !strings.HasPrefix(r, "-ERR transaction too large") {
				t.Fatalf("INFO %d: %q", n, r)
			}
			break
		}
		n++
	}
	if want := MaxQueuedBytes / (len("INFO") + DefaultMaxArgs*queuedArgOverhead + queuedArgOverhead); n != want {
		t.Errorf("queued %d INFOs of %d empty arguments, want %d", n, DefaultMaxArgs-1, want)
	}
}

// TestMultiChecksWhenQueued: a SPEND, REFUND or BALANCE that would be
// refused for its arguments is refused when queued, with the same error,
// and aborts the EXEC: a MULTI holds no auction id longer than
// MaxIDBytes, and nothing reaches the Spender.
func TestMultiChecksWhenQueued(t *testing.T) {
	sp := newFakeSpender()
	ts := startServer(t, sp, ServerConfig{MaxAmountMicros: 1_000_000})
	c := dialRaw(t, ts.path)
	long := strings.Repeat("a", MaxIDBytes+1)
	for _, args := range [][]string{
		{"SPEND", "demo", "1", long},
		{"SPEND", "demo", "1", "a\x01"},
		{"SPEND", strings.Repeat("c", MaxIDBytes+1), "1"},
		{"SPEND", "", "1"},
		{"SPEND", "demo", "0"},
		{"SPEND", "demo", "-5"},
		{"SPEND", "demo", "05"},
		{"SPEND", "demo", "2000000"},
		{"REFUND", "demo", "1", long},
		{"REFUND", "demo", "x"},
		{"BALANCE", "de\nmo"},
		{"BALANCE", ""},
	} {
		direct := c.do3(t, resp(args...))
		if !strings.HasPrefix(direct, "-ERR ") {
			t.Fatalf("%q sent on its own = %q, want an error", args, direct)
		}
		runSteps(t, c, []step{
			{resp("MULTI"), "+OK\r\n"},
			{resp("SPEND", "demo", "1", "ok"), "+QUEUED\r\n"},
			{resp(args...), direct},
			{resp("EXEC"), "-EXECABORT Transaction discarded because of previous errors.\r\n"},
		})
	}
	if len(sp.auction) != 0 {
		t.Errorf("the Spender saw %q: an aborted MULTI ran", sp.auction)
	}
	if used := ts.budget.used.Load(); used != 0 {
		t.Errorf("%d bytes of the buffer budget still taken after every MULTI ended", used)
	}
}

// TestMultiSharesTheBufferBudget: what MULTIs queue, over all
// connections, is bounded by max_buffered_bytes; past it a command is
// refused with an error naming the limit, the EXEC aborts, and nothing is
// kept. DISCARD, EXEC, RESET and a close give the bytes back.
func TestMultiSharesTheBufferBudget(t *testing.T) {
	const budget = 64 << 10
	ts := startServer(t, newFakeSpender(), ServerConfig{MaxBufferedBytes: budget})
	// Each request fits an idle connection's read buffer: only the
	// queues take from the budget.
	big := strings.Repeat("b", 3000)
	cost := len("ECHO") + len(big) + 3*queuedArgOverhead
	want := "-ERR command not queued: the server's buffer budget (max_buffered_bytes 65536 bytes, shared by all connections) is spent; DISCARD the transaction and retry it later\r\n"
	var conns []*rawConn
	queued := 0
	for len(conns) < budget/cost+2 {
		c := dialRaw(t, ts.path)
		conns = append(conns, c)
		c.do3(t, resp("MULTI"))
		r := c.do3(t, resp("ECHO", big))
		if r == "+QUEUED\r\n" {
			queued++
			continue
		}
		if r != want {
			t.Fatalf("connection %d: ECHO = %q, want %q", len(conns), r, want)
		}
		if got := c.do3(t, resp("EXEC")); !strings.HasPrefix(got, "-EXECABORT") {
			t.Fatalf("EXEC after a refusal = %q", got)
		}
	}
	if queued != budget/cost {
		t.Errorf("%d connections queued %d bytes each under a budget of %d, want %d", queued, cost, budget, budget/cost)
	}
	if used := ts.budget.used.Load(); used > budget {
		t.Errorf("budget used %d > %d", used, budget)
	}
	// Each way of ending a MULTI gives its bytes back.
	if got := conns[0].do3(t, resp("DISCARD")); got != "+OK\r\n" {
		t.Fatalf("DISCARD = %q", got)
	}
	if got := conns[1].do3(t, resp("EXEC")); !strings.HasPrefix(got, "*1\r\n$3000\r\n") {
		t.Fatalf("EXEC = %.40q", got)
	}
	if got := conns[2].do3(t, resp("RESET")); got != "+RESET\r\n" {
		t.Fatalf("RESET = %q", got)
	}
	for _, c := range conns[3:] {
		c.Close()
	}
	waitFor(t, func() bool { return ts.Stats().ConnectionsOpen == 3 })
	waitFor(t, func() bool { return ts.budget.used.Load() == 0 })
	c := conns[0]
	c.do3(t, resp("MULTI"))
	if r := c.do3(t, resp("ECHO", big)); r != "+QUEUED\r\n" {
		t.Fatalf("ECHO once the budget was given back = %q", r)
	}
}

// TestOpenMultiIsIdle: commands queued in a MULTI are not activity: a
// MULTI left open is closed idle_timeout after it began, however often
// its client sends a PING inside it, while a client that PINGs outside a
// MULTI stays connected.
func TestOpenMultiIsIdle(t *testing.T) {
	const idle = 600 * time.Millisecond
	ts := startServer(t, newFakeSpender(), ServerConfig{IdleTimeout: idle})
	inMulti, outside := dialRaw(t, ts.path), dialRaw(t, ts.path)
	inMulti.do3(t, resp("MULTI"))
	start := time.Now()
	for time.Since(start) < 2*idle {
		if r, err := inMulti.Write([]byte(resp("PING"))); err != nil {
			t.Logf("write after %v: %d, %v", time.Since(start), r, err)
			break
		}
		if r, err := inMulti.reply3(); err != nil {
			break
		} else if r != "+QUEUED\r\n" {
			t.Fatalf("PING in MULTI = %q", r)
		}
		if r := outside.do3(t, resp("PING")); r != "+PONG\r\n" {
			t.Fatalf("PING outside = %q", r)
		}
		time.Sleep(idle / 6)
	}
	inMulti.expectClosed(t)
	if d := time.Since(start); d < idle {
		t.Errorf("open MULTI closed after %v, before idle_timeout %v", d, idle)
	}
	if r := outside.do3(t, resp("PING")); r != "+PONG\r\n" {
		t.Fatalf("the client pinging outside a MULTI was dropped: %q", r)
	}
	if st := ts.Stats(); st.TimedOut != 1 {
		t.Errorf("TimedOut = %d, want 1", st.TimedOut)
	}
	waitFor(t, func() bool { return ts.budget.used.Load() == 0 })
}

// TestBufferBudgetDefaults: the defaults README quotes: a 16 MiB budget
// shared by all connections, named in its refusals; 4 KB read buffers
// lent while reading; replies over 2 KB paid from the budget; a flush at
// 16 KB of replies.
func TestBufferBudgetDefaults(t *testing.T) {
	s := NewServer(newFakeSpender(), ServerConfig{})
	if s.budget.limit != 16<<20 || s.cfg.MaxBufferedBytes != 16<<20 {
		t.Errorf("default budget %d (config %d), want 16 MiB", s.budget.limit, s.cfg.MaxBufferedBytes)
	}
	if msg := s.budget.exhausted("x"); !strings.Contains(msg, "max_buffered_bytes 16777216 bytes, shared by all connections") {
		t.Errorf("refusal %q does not name the limit", msg)
	}
	if readBufSize != 4<<10 || replyAllowance != 2<<10 || flushBytes != 16<<10 {
		t.Errorf("read buffer %d, reply allowance %d, flush at %d: README says 4 KB, 2 KB, 16 KB", readBufSize, replyAllowance, flushBytes)
	}
}
