package transport

import (
	"io"
	"strconv"
	"strings"
	"testing"
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
		{resp("SPEND", "demo", "x"), "+QUEUED\r\n"},
		{resp("REFUND", "demo", "600", "a-1"), "+QUEUED\r\n"},
		{resp("BALANCE", "demo"), "+QUEUED\r\n"},
		{resp("PING"), "+QUEUED\r\n"},
		// Nothing has run yet.
		{resp("EXEC"), "*7\r\n:1\r\n:0\r\n-ERR unknown campaign \"nope\"\r\n-ERR amount must be an integer number of micros\r\n:1\r\n" +
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
