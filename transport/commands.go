package transport

import (
	"errors"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/pacer/pacer"
	"github.com/tidwall/redcon"
)

// MaxIDBytes bounds campaign and auction ids, so that a bad client cannot
// make the daemon hash, store or log arbitrarily large keys.
const MaxIDBytes = 128

// replyWriter is the part of redcon.Writer the commands use; an interface so
// the dispatch benchmark can run without a socket.
type replyWriter interface {
	WriteString(string)
	WriteError(string)
	WriteInt64(int64)
	WriteBulk([]byte)
	WriteBulkString(string)
	WriteArray(int)
	WriteNull()
	WriteRaw([]byte)
}

var _ replyWriter = (*redcon.Writer)(nil)

// dispatcher answers the commands of one connection.
type dispatcher struct {
	s *Server
	c *serverConn
	// ids holds campaign and auction id together so both become strings
	// with a single allocation per command.
	ids []byte
	// campaigns interns the campaign ids this connection names, so a SPEND
	// without an auction id allocates nothing: a bidder's connection talks
	// about a handful of campaigns, over and over.
	campaigns map[string]string
	// spends counts this connection's SPENDs, to time one in SpendSample
	// without any state shared between connections.
	spends uint64
	// st is the connection's protocol, name and open MULTI (compat.go).
	st connState
	// known: campaigns answered without error on this connection, whose
	// requests the event loop answers itself (see mayBlock).
	known map[string]struct{}
	// lastKnown and lastID are the last campaign found in known and the
	// last interned: a bidder's connection names the same campaign over
	// and over, and comparing its bytes is cheaper than hashing them.
	lastKnown, lastID string
	// now is the Spender's clock read for this batch (ClockedSpender),
	// for nowUses more SPENDs.
	now     time.Time
	nowUses int
	// noWait: the dispatcher runs on an event loop, which must not wait: a
	// SPEND whose answer would (WaitingSpender) is not answered but marked
	// deferred, for the loop to hand it to a goroutine.
	noWait, deferred bool
}

// newBatch starts a batch of requests read together: the next SPEND reads
// the clock again.
func (d *dispatcher) newBatch() { d.nowUses = 0 }

// spend asks the Spender, with the batch's clock reading if it takes one.
func (d *dispatcher) spend(campaign pacer.CampaignID, amount pacer.Micros, auction string) (pacer.Decision, error) {
	cs := d.s.clocked
	if cs == nil {
		return d.s.spender.Spend(campaign, amount, auction)
	}
	if d.nowUses == 0 {
		d.now, d.nowUses = cs.Now(), BatchClockUses
	}
	d.nowUses--
	if d.noWait && d.s.waiting != nil {
		dec, at, err := d.s.waiting.SpendAtNoWait(d.now, campaign, amount, auction)
		if err != nil && errors.Is(err, pacer.ErrWouldWait) {
			d.nowUses++ // not used: the goroutine reads the clock again
			d.deferred = true
			return dec, nil
		}
		d.now = at
		return dec, err
	}
	dec, at, err := cs.SpendAt(d.now, campaign, amount, auction)
	d.now = at
	return dec, err
}

// mayBlock reports whether answering args may wait on the Spender for
// long: a SPEND, REFUND or BALANCE of a campaign not yet answered without
// error on this connection (the daemon loads a campaign it has not seen
// from the ledger), or EXEC, which runs queued ones. Inside MULTI other
// commands are only queued.
func (d *dispatcher) mayBlock(args [][]byte) bool {
	name := args[0]
	if is(name, "exec") {
		return true
	}
	if d.st.tx != nil {
		return false
	}
	if (is(name, "spend") || is(name, "refund") || is(name, "balance")) && len(args) >= 2 {
		if d.lastKnown != "" && string(args[1]) == d.lastKnown {
			return false
		}
		_, ok := d.known[string(args[1])] // no allocation for the lookup
		return !ok
	}
	return false
}

// answered records that args, a request mayBlock flagged, was answered
// without error.
func (d *dispatcher) answered(args [][]byte) {
	name := args[0]
	if d.st.tx != nil || len(args) < 2 || !(is(name, "spend") || is(name, "refund") || is(name, "balance")) {
		return
	}
	if d.known == nil || len(d.known) >= maxInterned {
		d.known = make(map[string]struct{}, 16)
	}
	id := d.intern(args[1])
	d.known[id] = struct{}{}
	d.lastKnown = id
}

// SpendSample: one SPEND in this many, per connection, is timed for
// ServerConfig.ObserveSpend (reading the clock twice costs more than the
// decision itself).
const SpendSample = 64

// maxInterned bounds a connection's interned campaign ids; past it the set
// starts again, so a client cycling through ids cannot grow it.
const maxInterned = 256

func (d *dispatcher) intern(id []byte) string {
	if d.lastID != "" && string(id) == d.lastID {
		return d.lastID
	}
	if s, ok := d.campaigns[string(id)]; ok { // no allocation for the lookup
		d.lastID = s
		return s
	}
	if d.campaigns == nil || len(d.campaigns) >= maxInterned {
		d.campaigns = make(map[string]string, 16)
	}
	s := string(id)
	d.campaigns[s] = s
	d.lastID = s
	return s
}

// serve answers one command and reports whether the client asked to quit.
func (d *dispatcher) serve(w replyWriter, args [][]byte) (quit bool) {
	d.c.commands.Add(1)
	if d.st.tx != nil && !txControl(args[0]) {
		d.queue(w, args)
		return false
	}
	if msg := d.run(w, args, &quit); msg != "" {
		d.c.errors.Add(1)
		w.WriteError(errorLine(msg))
	}
	return quit
}

// run writes the reply of a successful command, or returns the error
// message to send instead.
func (d *dispatcher) run(w replyWriter, args [][]byte, quit *bool) string {
	name := args[0]
	spend := is(name, "spend")
	if !spend {
		d.newBatch() // it may wait: the next SPEND reads the clock again
	}
	switch {
	case spend:
		campaign, amount, auction, msg := d.spendArgs(args, "spend")
		if msg != "" {
			return msg
		}
		var start time.Time
		observe := d.s.cfg.ObserveSpend
		if d.spends++; observe != nil && d.spends%SpendSample == 0 {
			start = time.Now()
		}
		dec, err := d.spend(campaign, amount, auction)
		if d.deferred {
			return "" // no reply: the event loop hands the SPEND to a goroutine
		}
		if !start.IsZero() {
			observe(time.Since(start))
		}
		if err != nil {
			return err.Error()
		}
		w.WriteInt64(int64(dec))
	case is(name, "refund"):
		campaign, amount, auction, msg := d.spendArgs(args, "refund")
		if msg != "" {
			return msg
		}
		if err := d.s.spender.Refund(campaign, amount, auction); err != nil {
			return err.Error()
		}
		w.WriteInt64(1)
	case is(name, "balance"):
		if len(args) != 2 {
			return arityError("balance")
		}
		if msg := checkCampaign(args[1]); msg != "" {
			return msg
		}
		b, err := d.s.spender.Balance(pacer.CampaignID(d.intern(args[1])))
		if err != nil {
			return err.Error()
		}
		d.writeMap(w, 4)
		w.WriteBulkString("tokens")
		w.WriteInt64(b.Tokens)
		w.WriteBulkString("reserve")
		w.WriteInt64(b.Reserve)
		w.WriteBulkString("pace")
		w.WriteInt64(b.PacePerSecond)
		w.WriteBulkString("state")
		w.WriteBulkString(b.State)
	case is(name, "ping"):
		switch len(args) {
		case 1:
			w.WriteString("PONG")
		case 2:
			w.WriteBulk(args[1])
		default:
			return arityError("ping")
		}
	case is(name, "info"):
		// Sections asked for (INFO server, ...) are ignored: the reply is
		// small enough to send whole. It stays a string under RESP3 too
		// (Redis sends a verbatim string): every client's info() helper
		// parses text.
		w.WriteBulkString(d.s.info())
	default:
		return d.compat(w, args, quit)
	}
	return ""
}

// spendArgs checks a SPEND's or REFUND's arguments (checkSpend): this is
// where the wire's bytes become the domain's CampaignID and Micros.
func (d *dispatcher) spendArgs(args [][]byte, cmd string) (campaign pacer.CampaignID, amount pacer.Micros, auction string, msg string) {
	micros, msg := d.checkSpend(args, cmd)
	if msg != "" {
		return "", 0, "", msg
	}
	if len(args) == 3 {
		return pacer.CampaignID(d.intern(args[1])), pacer.Micros(micros), "", ""
	}
	d.ids = append(append(d.ids[:0], args[1]...), args[3]...)
	both := string(d.ids)
	return pacer.CampaignID(both[:len(args[1])]), pacer.Micros(micros), both[len(args[1]):], ""
}

// checkSpend validates `<cmd> <campaign> <micros> [<auction-id>]` and
// returns the amount, or why the request is refused. MULTI checks what it
// queues with it too, so a request is refused alike queued or not.
func (d *dispatcher) checkSpend(args [][]byte, cmd string) (micros int64, msg string) {
	if len(args) != 3 && len(args) != 4 {
		return 0, arityError(cmd)
	}
	if msg := checkCampaign(args[1]); msg != "" {
		return 0, msg
	}
	micros, msg = parseAmount(args[2])
	if msg != "" {
		return 0, msg
	}
	if limit := d.s.cfg.MaxAmountMicros; limit > 0 && micros > limit {
		return 0, "amount " + strconv.FormatInt(micros, 10) +
			" exceeds the per-call maximum " + strconv.FormatInt(limit, 10)
	}
	if len(args) == 4 {
		auctionID := args[3]
		if len(auctionID) > MaxIDBytes {
			return 0, "auction id longer than " + strconv.Itoa(MaxIDBytes) + " bytes"
		}
		if hasControl(auctionID) {
			return 0, "auction id contains a control character"
		}
	}
	return micros, ""
}

// checkQueued refuses, as running it would, a SPEND, REFUND or BALANCE
// whose arguments are wrong; other commands are checked when EXEC runs
// them.
func (d *dispatcher) checkQueued(args [][]byte) string {
	switch name := args[0]; {
	case is(name, "spend"):
		_, msg := d.checkSpend(args, "spend")
		return msg
	case is(name, "refund"):
		_, msg := d.checkSpend(args, "refund")
		return msg
	case is(name, "balance") && len(args) == 2:
		return checkCampaign(args[1])
	}
	return ""
}

// parseAmount accepts only the canonical decimal form of a positive amount:
// digits, no sign, no leading zeros, no spaces. strconv.ParseInt would take
// "+5" and "05", so two spellings of one request could differ on the wire
// (and in logs and dedup) while meaning the same money.
func parseAmount(b []byte) (int64, string) {
	const malformed = "amount must be an integer number of micros"
	if len(b) > 1 && b[0] == '-' && isDigits(b[1:]) {
		return 0, "amount must be positive"
	}
	const tooLarge = "amount out of range: at most 9223372036854775807 micros"
	if !isDigits(b) {
		return 0, malformed
	}
	if len(b) > 19 && b[0] != '0' {
		return 0, tooLarge
	}
	if len(b) > 19 {
		return 0, malformed
	}
	if b[0] == '0' {
		if len(b) == 1 {
			return 0, "amount must be positive"
		}
		return 0, "amount must not have leading zeros"
	}
	var v uint64
	for _, c := range b {
		v = v*10 + uint64(c-'0')
	}
	if v > math.MaxInt64 {
		return 0, tooLarge
	}
	return int64(v), ""
}

func isDigits(b []byte) bool {
	for _, c := range b {
		if c < '0' || c > '9' {
			return false
		}
	}
	return len(b) > 0
}

func checkCampaign(id []byte) string {
	switch {
	case len(id) == 0:
		return "campaign id must not be empty"
	case len(id) > MaxIDBytes:
		return "campaign id longer than " + strconv.Itoa(MaxIDBytes) + " bytes"
	case hasControl(id):
		return "campaign id contains a control character"
	}
	return ""
}

func hasControl(b []byte) bool {
	for _, c := range b {
		if c < 0x20 || c == 0x7f {
			return true
		}
	}
	return false
}

func arityError(cmd string) string {
	return "wrong number of arguments for '" + cmd + "' command"
}

// is reports whether name equals the lower-case ASCII word, ignoring case,
// without allocating.
func is(name []byte, word string) bool {
	if len(name) != len(word) {
		return false
	}
	for i, c := range name {
		if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		if c != word[i] {
			return false
		}
	}
	return true
}

// printable quotes an unknown command name back safely: it is echoed inside
// a one-line error reply, so it must be short and free of control bytes.
func printable(b []byte) string {
	const maxLen = 64
	if len(b) > maxLen {
		b = b[:maxLen]
	}
	return strings.Map(func(r rune) rune {
		if r < 0x20 || r == 0x7f {
			return '?'
		}
		return r
	}, string(b))
}

func (s *Server) info() string {
	var b strings.Builder
	b.WriteString("# pacer\r\n")
	for _, f := range s.spender.Info() {
		b.WriteString(f.Key)
		b.WriteByte(':')
		b.WriteString(f.Value)
		b.WriteString("\r\n")
	}
	st := s.Stats()
	b.WriteString("\r\n# transport\r\n")
	writeUint := func(k string, v uint64) {
		b.WriteString(k)
		b.WriteByte(':')
		b.WriteString(strconv.FormatUint(v, 10))
		b.WriteString("\r\n")
	}
	writeUint("connected_clients", uint64(st.ConnectionsOpen))
	writeUint("total_connections_received", st.ConnectionsAccepted)
	writeUint("total_commands_processed", st.Commands)
	writeUint("total_error_replies", st.ErrorReplies)
	writeUint("total_protocol_errors", st.ProtocolErrors)
	writeUint("rejected_connections", st.Rejected)
	writeUint("timedout_connections", st.TimedOut)
	return b.String()
}
