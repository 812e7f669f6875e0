package transport

import (
	"strconv"
	"strings"
	"sync/atomic"
	"time"
)

// This file holds the commands Redis client libraries send on their own —
// on connect (HELLO, CLIENT SETNAME/SETINFO, SELECT), when probing the
// server (COMMAND, COMMAND DOCS) and in pipelines (MULTI/EXEC) — so that a
// stock client works against pacerd with its default options. None of them
// touches the budget itself: EXEC only runs queued SPEND, REFUND and BALANCE
// as if they had been sent one by one.

// helloVersion is what HELLO reports as "version": the Redis release whose
// protocol pacerd speaks. Some clients enable features by comparing it
// (RESP3, CLIENT SETINFO), so it names a Redis version, not pacerd's.
const helloVersion = "7.0.0"

// Bounds of one MULTI: queued commands are copied (the read buffer is
// reused by the next batch), so a client that opens a MULTI and never
// EXECs must not be able to grow the daemon's memory. MaxQueuedBytes counts
// each argument's bytes plus queuedArgOverhead, so many empty arguments
// cost what they take.
const (
	MaxQueuedCommands = 10_000
	MaxQueuedBytes    = 1 << 20
	queuedArgOverhead = 24 // a slice header
)

// connIDs numbers connections for CLIENT ID and HELLO, as Redis does; ids
// are unique within the process.
var connIDs atomic.Int64

// connState is what a connection's compatibility commands remember.
type connState struct {
	resp3   bool
	id      int64 // 0 until first asked for
	name    string
	libName string
	libVer  string
	tx      *txQueue // non-nil between MULTI and EXEC/DISCARD
}

// txQueue is an open MULTI. Its bytes are taken from the server's buffer
// budget until EXEC, DISCARD, RESET or the connection's close (dropTx).
type txQueue struct {
	cmds   [][][]byte
	bytes  int
	dirty  bool      // a command failed to queue: EXEC must abort
	opened time.Time // an open MULTI is idle from here: queued commands do not count as activity
}

// dropTx ends the open MULTI, if any, and gives its bytes back.
func (d *dispatcher) dropTx() {
	if tx := d.st.tx; tx != nil {
		d.s.budget.give(int64(tx.bytes))
		d.st.tx = nil
	}
}

// release gives back what the connection holds of the server's budget; it
// is closing.
func (d *dispatcher) release() { d.dropTx() }

func (d *dispatcher) connID() int64 {
	if d.st.id == 0 {
		d.st.id = connIDs.Add(1)
	}
	return d.st.id
}

// command describes one command for COMMAND, COMMAND INFO/DOCS/COUNT/LIST
// and for checking what MULTI may queue. Arity follows Redis: n means
// exactly n arguments including the name, -n at least n.
type command struct {
	name    string
	arity   int
	flags   []string
	group   string
	summary string
}

// commands lists every command pacerd answers. Key positions are reported
// as 0 (no keys): campaign ids are not Redis keys, and cluster-aware
// clients must not try to route by them.
var commands = []command{
	{"spend", -3, []string{"write", "fast"}, "pacer", "SPEND <campaign> <micros> [<auction-id>]: 1 allowed (taken), 0 paced (skip this auction), -1 exhausted for the day."},
	{"refund", -3, []string{"write", "fast"}, "pacer", "REFUND <campaign> <micros> [<auction-id>]: give back an allowed amount that was not spent."},
	{"balance", 2, []string{"readonly", "fast"}, "pacer", "BALANCE <campaign>: this daemon's tokens, reserve, pace and state for the campaign."},
	{"ping", -1, []string{"fast", "stale"}, "connection", "PING [message]"},
	{"echo", 2, []string{"fast", "stale"}, "connection", "ECHO message"},
	{"info", -1, []string{"stale"}, "server", "INFO: the daemon's counters as key:value lines."},
	{"hello", -1, []string{"noscript", "fast", "stale", "no_auth"}, "connection", "HELLO [2|3] [SETNAME name]: choose RESP2 or RESP3."},
	{"client", -2, []string{"stale"}, "connection", "CLIENT SETNAME|GETNAME|ID|INFO|SETINFO|NO-EVICT|NO-TOUCH"},
	{"select", 2, []string{"fast", "stale"}, "connection", "SELECT 0: pacerd has a single database."},
	{"quit", -1, []string{"fast", "stale", "no_auth"}, "connection", "QUIT: close the connection."},
	{"reset", 1, []string{"fast", "stale", "no_auth"}, "connection", "RESET: back to RESP2, no name, no open MULTI."},
	{"command", -1, []string{"stale"}, "server", "COMMAND [COUNT|INFO|DOCS|LIST]"},
	{"config", -2, []string{"stale"}, "server", "CONFIG GET save|appendonly: what redis-benchmark reads."},
	{"multi", 1, []string{"fast", "stale"}, "transactions", "MULTI: queue commands until EXEC."},
	{"exec", 1, []string{"stale"}, "transactions", "EXEC: run the queued commands in order, one reply each (each SPEND is decided on its own)."},
	{"discard", 1, []string{"fast", "stale"}, "transactions", "DISCARD: drop the queued commands."},
	{"unwatch", 1, []string{"fast", "stale"}, "transactions", "UNWATCH: accepted; pacerd has no keys to watch."},
}

func lookup(name []byte) *command {
	for i := range commands {
		if is(name, commands[i].name) {
			return &commands[i]
		}
	}
	return nil
}

func (c *command) arityOK(n int) bool {
	if c.arity >= 0 {
		return n == c.arity
	}
	return n >= -c.arity
}

// txControl: commands that act at once even inside MULTI.
func txControl(name []byte) bool {
	return is(name, "exec") || is(name, "discard") || is(name, "multi") ||
		is(name, "quit") || is(name, "reset") || is(name, "watch")
}

// errorLine turns a command's error message into the error reply's text.
// Messages that start with a Redis error code of their own (EXECABORT,
// NOPROTO) keep it, so that clients branching on the code see it.
func errorLine(msg string) string {
	if strings.HasPrefix(msg, "EXECABORT ") || strings.HasPrefix(msg, "NOPROTO ") {
		return msg
	}
	return "ERR " + msg
}

// writeMap starts a map of n pairs: a RESP3 map after HELLO 3, otherwise a
// flat array of 2n elements as Redis sends in RESP2.
func (d *dispatcher) writeMap(w replyWriter, n int) {
	if d.st.resp3 {
		w.WriteRaw(strconv.AppendInt([]byte{'%'}, int64(n), 10))
		w.WriteRaw(crlf)
		return
	}
	w.WriteArray(2 * n)
}

func (d *dispatcher) writeNull(w replyWriter) {
	if d.st.resp3 {
		w.WriteRaw([]byte("_\r\n"))
		return
	}
	w.WriteNull()
}

var crlf = []byte("\r\n")

// queue adds a command to the open MULTI, or refuses it and marks the
// transaction so that EXEC aborts, as Redis does for commands that fail
// before running (unknown name, wrong number of arguments).
func (d *dispatcher) queue(w replyWriter, args [][]byte) {
	tx := d.st.tx
	fail := func(msg string) {
		tx.dirty = true
		d.c.errors.Add(1)
		w.WriteError("ERR " + msg)
	}
	c := lookup(args[0])
	switch {
	case c == nil:
		fail("unknown command '" + printable(args[0]) + "'")
		return
	case !c.arityOK(len(args)):
		fail(arityError(c.name))
		return
	}
	if msg := d.checkQueued(args); msg != "" {
		fail(msg)
		return
	}
	size, cost := 0, queuedArgOverhead
	for _, a := range args {
		size += len(a)
		cost += len(a) + queuedArgOverhead
	}
	if len(tx.cmds) >= MaxQueuedCommands || tx.bytes+cost > MaxQueuedBytes {
		fail("transaction too large: at most " + strconv.Itoa(MaxQueuedCommands) +
			" commands and " + strconv.Itoa(MaxQueuedBytes) + " bytes per MULTI; DISCARD it and send smaller ones")
		return
	}
	if !d.s.budget.take(int64(cost)) {
		fail(d.s.budget.exhausted("command not queued") + "; DISCARD the transaction and retry it later")
		return
	}
	// One copy per command: the arguments point into the read buffer.
	buf := make([]byte, 0, size)
	cmd := make([][]byte, len(args))
	for i, a := range args {
		buf = append(buf, a...)
		cmd[i] = buf[len(buf)-len(a):]
	}
	tx.cmds = append(tx.cmds, cmd)
	tx.bytes += cost
	w.WriteString("QUEUED")
}

// compat answers the commands that are not pacer's own; it returns the
// error message, if any, like run.
func (d *dispatcher) compat(w replyWriter, args [][]byte, quit *bool) string {
	name := args[0]
	switch {
	case is(name, "quit"):
		w.WriteString("OK")
		*quit = true
	case is(name, "hello"):
		return d.hello(w, args)
	case is(name, "client"):
		return d.client(w, args)
	case is(name, "command"):
		return d.command(w, args)
	case is(name, "select"):
		if len(args) != 2 {
			return arityError("select")
		}
		if string(args[1]) != "0" {
			return "DB index is out of range: pacerd has a single database, 0"
		}
		w.WriteString("OK")
	case is(name, "echo"):
		if len(args) != 2 {
			return arityError("echo")
		}
		w.WriteBulk(args[1])
	case is(name, "reset"):
		d.dropTx()
		id := d.st.id
		d.st = connState{id: id}
		w.WriteString("RESET")
	case is(name, "multi"):
		if len(args) != 1 {
			return arityError("multi")
		}
		if d.st.tx != nil {
			return "MULTI calls can not be nested"
		}
		d.st.tx = &txQueue{opened: time.Now()}
		w.WriteString("OK")
	case is(name, "exec"):
		return d.exec(w, args)
	case is(name, "discard"):
		if d.st.tx == nil {
			return "DISCARD without MULTI"
		}
		d.dropTx()
		w.WriteString("OK")
	case is(name, "watch"):
		if d.st.tx != nil {
			d.st.tx.dirty = true
			return "WATCH inside MULTI is not allowed"
		}
		return "WATCH is not supported: pacerd has no keys to watch, and each SPEND is decided on its own"
	case is(name, "unwatch"):
		w.WriteString("OK")
	case is(name, "config"):
		return d.config(w, args)
	default:
		return "unknown command '" + printable(name) + "'"
	}
	return ""
}

// exec runs the queued commands back to back on this connection, in order,
// and sends their replies as one array. It gives order and a single round
// trip, not isolation or all-or-nothing: each SPEND is decided and applied
// on its own (one may be allowed and the next paced), and other
// connections' commands may be decided in between. A command that fails
// gets its error in its slot; the others still run.
func (d *dispatcher) exec(w replyWriter, args [][]byte) string {
	if len(args) != 1 {
		return arityError("exec")
	}
	tx := d.st.tx
	if tx == nil {
		return "EXEC without MULTI"
	}
	d.dropTx() // tx.cmds stay readable: only the budget is given back
	if tx.dirty {
		return "EXECABORT Transaction discarded because of previous errors."
	}
	w.WriteArray(len(tx.cmds))
	for _, cmd := range tx.cmds {
		var quit bool // QUIT is never queued
		if msg := d.run(w, cmd, &quit); msg != "" {
			d.c.errors.Add(1)
			w.WriteError(errorLine(msg))
		}
	}
	return ""
}

// hello switches the connection between RESP2 and RESP3. AUTH is accepted
// and ignored: access to pacerd is the socket file's permissions, and
// clients configured with a password send it here.
func (d *dispatcher) hello(w replyWriter, args [][]byte) string {
	resp3 := d.st.resp3
	i := 1
	if len(args) > 1 {
		v, err := strconv.Atoi(string(args[1]))
		if err != nil {
			return "Protocol version is not an integer or out of range"
		}
		if v != 2 && v != 3 {
			return "NOPROTO unsupported protocol version " + strconv.Itoa(v) + ": pacerd speaks 2 and 3"
		}
		resp3 = v == 3
		i = 2
	}
	name, setName := "", false
	for i < len(args) {
		switch {
		case is(args[i], "auth") && i+2 < len(args):
			i += 3
		case is(args[i], "setname") && i+1 < len(args):
			if msg := checkClientName(args[i+1]); msg != "" {
				return msg
			}
			name, setName = string(args[i+1]), true
			i += 2
		default:
			return "syntax error in HELLO option '" + printable(args[i]) + "'"
		}
	}
	d.st.resp3 = resp3
	if setName {
		d.st.name = name
	}
	proto := int64(2)
	if resp3 {
		proto = 3
	}
	d.writeMap(w, 7)
	w.WriteBulkString("server")
	w.WriteBulkString("pacerd")
	w.WriteBulkString("version")
	w.WriteBulkString(helloVersion)
	w.WriteBulkString("proto")
	w.WriteInt64(proto)
	w.WriteBulkString("id")
	w.WriteInt64(d.connID())
	w.WriteBulkString("mode")
	w.WriteBulkString("standalone")
	w.WriteBulkString("role")
	w.WriteBulkString("master")
	w.WriteBulkString("modules")
	w.WriteArray(0)
	return ""
}

func checkClientName(b []byte) string {
	if len(b) > MaxIDBytes {
		return "client name longer than " + strconv.Itoa(MaxIDBytes) + " bytes"
	}
	for _, c := range b {
		if c <= ' ' || c >= 0x7f {
			return "Client names cannot contain spaces, newlines or special characters."
		}
	}
	return ""
}

func (d *dispatcher) client(w replyWriter, args [][]byte) string {
	if len(args) < 2 {
		return arityError("client")
	}
	sub := args[1]
	onOff := func() string {
		if len(args) != 3 || !(is(args[2], "on") || is(args[2], "off")) {
			return "syntax error: CLIENT " + strings.ToUpper(string(sub)) + " ON|OFF"
		}
		w.WriteString("OK")
		return ""
	}
	switch {
	case is(sub, "setname"):
		if len(args) != 3 {
			return arityError("client|setname")
		}
		if msg := checkClientName(args[2]); msg != "" {
			return msg
		}
		d.st.name = string(args[2])
		w.WriteString("OK")
	case is(sub, "getname"):
		if d.st.name == "" {
			d.writeNull(w)
		} else {
			w.WriteBulkString(d.st.name)
		}
	case is(sub, "id"):
		w.WriteInt64(d.connID())
	case is(sub, "info"):
		w.WriteBulkString(d.clientInfo())
	case is(sub, "setinfo"):
		if len(args) != 4 {
			return arityError("client|setinfo")
		}
		if msg := checkClientName(args[3]); msg != "" {
			return strings.Replace(msg, "Client names", "lib-name and lib-ver", 1)
		}
		switch {
		case is(args[2], "lib-name"):
			d.st.libName = string(args[3])
		case is(args[2], "lib-ver"):
			d.st.libVer = string(args[3])
		default:
			return "Unrecognized option '" + printable(args[2]) + "'"
		}
		w.WriteString("OK")
	case is(sub, "no-evict"), is(sub, "no-touch"):
		// Nothing to evict or touch; accepted so clients that set
		// them on connect proceed.
		return onOff()
	default:
		return "unknown subcommand '" + printable(sub) + "'. pacerd answers CLIENT SETNAME, GETNAME, ID, INFO, SETINFO, NO-EVICT and NO-TOUCH"
	}
	return ""
}

func (d *dispatcher) clientInfo() string {
	resp := "2"
	if d.st.resp3 {
		resp = "3"
	}
	multi := "-1"
	if d.st.tx != nil {
		multi = strconv.Itoa(len(d.st.tx.cmds))
	}
	return "id=" + strconv.FormatInt(d.connID(), 10) + " addr=unix fd=-1 name=" + d.st.name +
		" db=0 multi=" + multi + " resp=" + resp + " lib-name=" + d.st.libName + " lib-ver=" + d.st.libVer + "\n"
}

func (d *dispatcher) command(w replyWriter, args [][]byte) string {
	if len(args) == 1 {
		w.WriteArray(len(commands))
		for i := range commands {
			writeCommandInfo(w, &commands[i])
		}
		return ""
	}
	sub := args[1]
	switch {
	case is(sub, "count"):
		w.WriteInt64(int64(len(commands)))
	case is(sub, "list"):
		w.WriteArray(len(commands))
		for _, c := range commands {
			w.WriteBulkString(c.name)
		}
	case is(sub, "info"):
		w.WriteArray(len(args) - 2)
		for _, n := range args[2:] {
			if c := lookup(n); c != nil {
				writeCommandInfo(w, c)
			} else {
				d.writeNull(w)
			}
		}
	case is(sub, "docs"):
		var which []*command
		if len(args) == 2 {
			for i := range commands {
				which = append(which, &commands[i])
			}
		}
		for _, n := range args[2:] {
			if c := lookup(n); c != nil {
				which = append(which, c)
			}
		}
		d.writeMap(w, len(which))
		for _, c := range which {
			w.WriteBulkString(c.name)
			d.writeMap(w, 3)
			w.WriteBulkString("summary")
			w.WriteBulkString(c.summary)
			w.WriteBulkString("since")
			w.WriteBulkString("1.0.0")
			w.WriteBulkString("group")
			w.WriteBulkString(c.group)
		}
	default:
		return "unknown subcommand '" + printable(sub) + "'. pacerd answers COMMAND, COMMAND COUNT, INFO, DOCS and LIST"
	}
	return ""
}

// writeCommandInfo writes the ten-element entry of Redis 7's COMMAND.
func writeCommandInfo(w replyWriter, c *command) {
	w.WriteArray(10)
	w.WriteBulkString(c.name)
	w.WriteInt64(int64(c.arity))
	w.WriteArray(len(c.flags))
	for _, f := range c.flags {
		w.WriteString(f)
	}
	w.WriteInt64(0) // first key
	w.WriteInt64(0) // last key
	w.WriteInt64(0) // key step
	w.WriteArray(0) // ACL categories
	w.WriteArray(0) // tips
	w.WriteArray(0) // key specs
	w.WriteArray(0) // subcommands
}

func (d *dispatcher) config(w replyWriter, args [][]byte) string {
	if len(args) != 3 || !is(args[1], "get") {
		return "unsupported CONFIG subcommand"
	}
	// redis-benchmark reads "save" and "appendonly" at start and warns
	// unless it gets a pair. pacerd persists nothing locally (the ledger
	// is in Redis), which is what these values say.
	switch {
	case is(args[2], "save"):
		d.writeMap(w, 1)
		w.WriteBulkString("save")
		w.WriteBulkString("")
	case is(args[2], "appendonly"):
		d.writeMap(w, 1)
		w.WriteBulkString("appendonly")
		w.WriteBulkString("no")
	default:
		d.writeMap(w, 0)
	}
	return ""
}
