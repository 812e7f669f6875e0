// Package transport owns pacerd's local protocol: a RESP (Redis protocol)
// server on a Unix socket that answers SPEND, REFUND, BALANCE, PING and INFO
// from a Spender, and a Go client for bidders. Because the protocol is RESP,
// any Redis client, redis-cli and redis-benchmark can talk to pacerd. The
// words it carries (Decision, Balance) are package pacer's; broadcasts
// between daemons are package broadcast's.
package transport

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/pacer/pacer"
	"go.uber.org/zap"
)

// Decision, its values and Balance are pacer's domain words; the aliases
// keep a bidder's code, which imports only this package (the Go client
// returns them), working. Code in this module uses package pacer.
type (
	Decision = pacer.Decision
	Balance  = pacer.Balance
)

// The SPEND answers, as package pacer names them.
const (
	Exhausted = pacer.Exhausted
	Paced     = pacer.Paced
	Allowed   = pacer.Allowed
)

// InfoField is one "key:value" line of the INFO reply (pacer.InfoField).
type InfoField = pacer.InfoField

// Spender is what the server needs from the daemon. Implementations must be
// safe for concurrent use: every connection calls it from its own goroutine.
// Errors are sent to the client as "-ERR " + err.Error(), so they should
// read well on their own (e.g. `unknown campaign "x"`).
//
// The server turns the wire's bytes into the domain's words here: a
// checked pacer.CampaignID and a positive pacer.Micros (at most
// ServerConfig.MaxAmountMicros). The strings it is given are its own to
// keep: campaign ids are interned
// per connection (a SPEND of a campaign the connection named before
// allocates nothing), auction ids are copied out of the read buffer.
type Spender interface {
	Spend(campaign pacer.CampaignID, amount pacer.Micros, auctionID string) (pacer.Decision, error)
	Refund(campaign pacer.CampaignID, amount pacer.Micros, auctionID string) error
	Balance(campaign pacer.CampaignID) (pacer.Balance, error)
	Info() []InfoField
}

// ClockedSpender is a Spender that can decide a SPEND at an instant the
// server read from its clock earlier (SpendAt), so that a batch of
// pipelined SPENDs from one connection costs one clock read, not one each.
// The server passes SpendAt a reading of Now taken in the same batch, at
// most BatchClockUses SPENDs earlier and with no other command in between
// (any other command may wait on the Spender, e.g. to load a campaign, so
// the next SPEND reads the clock again). SpendAt returns the instant it
// decided at: now, or, if it had to wait itself (loading the campaign), a
// fresh reading, which the SPENDs after it then use.
//
// Why a reading a few microseconds old is safe for money: deciding at an
// earlier instant is deciding as if the SPEND had arrived that much
// earlier. The bucket has then dripped no more tokens than it had (an
// instant earlier than one it has seen counts as that later one), and a
// lease is spent only until its expiry minus the skew bound (a second by
// default; the reconciler settles it only after expiry plus a larger
// grace), so a reading δ old can let a SPEND through at most δ — the time
// to answer a few requests — past a cutoff that has a whole skew bound of
// margin. A goroutine preempted between its own clock read and the
// decision has the same effect today.
type ClockedSpender interface {
	Spender
	Now() time.Time
	SpendAt(now time.Time, campaign pacer.CampaignID, amount pacer.Micros, auctionID string) (pacer.Decision, time.Time, error)
}

// A WaitingSpender is a ClockedSpender whose SpendAt may wait on something
// remote for some SPENDs (pacerd: a campaign to load, a sparse campaign's
// lease to fetch, lease.sparse_wait). The event-loop servers, which serve
// many connections from one goroutine and must never wait, decide SPENDs
// with SpendAtNoWait; one that returns pacer.ErrWouldWait (having decided
// and charged nothing) is handed, with its connection, to a goroutine that
// decides it with SpendAt, as a request that may block is.
type WaitingSpender interface {
	ClockedSpender
	SpendAtNoWait(now time.Time, campaign pacer.CampaignID, amount pacer.Micros, auctionID string) (pacer.Decision, time.Time, error)
}

// BatchClockUses bounds how many SPENDs of a batch share one clock reading.
const BatchClockUses = 16

// Limits applied when the corresponding ServerConfig field is zero.
const (
	DefaultMaxRequestBytes = 64 << 10
	DefaultMaxArgs         = 64
	// DefaultMaxInlineBytes: an inline command is typed by a human or sent
	// by redis-cli; every client library sends RESP arrays.
	DefaultMaxInlineBytes = 4 << 10
	// DefaultMaxClients is far above a host's bidders (one pool each) and
	// well below the unit's file limit, so an unprivileged client opening
	// connections in a loop is refused before pacerd runs out of fds.
	DefaultMaxClients = 10_000
	// DefaultIdleTimeout is generous: bidders keep pooled connections
	// open between auctions, and a reconnect costs them latency.
	DefaultIdleTimeout = 5 * time.Minute
	// DefaultReadTimeout bounds the arrival of one request once its first
	// byte has come: a local client sends a whole request in microseconds.
	DefaultReadTimeout = 10 * time.Second
	// DefaultWriteTimeout bounds how long a reply waits for a client that
	// does not read.
	DefaultWriteTimeout = 10 * time.Second
	// DefaultSocketMode lets the daemon's user and group (the bidders) in.
	DefaultSocketMode os.FileMode = 0o660
)

// SocketServer chooses how a Server serves its connections.
type SocketServer string

const (
	// Goroutines serves each connection from its own goroutine, through
	// Go's netpoller. Portable.
	Goroutines SocketServer = "goroutines"
	// EventLoop serves every connection from a few epoll loops
	// (DefaultLoops), answering all the requests a wake-up finds with one
	// write per connection (evloop_linux.go). Linux only.
	EventLoop SocketServer = "epoll"
	// Hybrid is EventLoop, but a wake-up that finds several connections
	// ready reads them all with one io_uring_enter and writes all their
	// replies with another (hybrid_linux.go). Where io_uring cannot be
	// used it logs why and is EventLoop. Linux only.
	Hybrid SocketServer = "hybrid"
	// DefaultSocketServer is the one that measures cheaper where it is
	// supported (scripts/bench-resp.sh; docs/BENCHMARKS.md, "SPEND over the
	// socket"): the hybrid costs as much CPU a call as EventLoop at
	// redis-benchmark -c 1 (one ready connection: the same path) and less at
	// -c 50 and -c 50 -P 16, with no worse p99.
	DefaultSocketServer = Hybrid
)

// DefaultLoops is the event loops a server runs when ServerConfig.Loops is
// 0: one per two GOMAXPROCS, rounded up (one on a 2-core host).
//
// Fewer loops than cores cost less per request (docs/BENCHMARKS.md): a loop that serves more connections finds more of them ready per
// wake-up, and while a loop sleeps in its system call another P stays idle,
// so the Go scheduler does not take the sleeping loop's P back and start
// another thread for it at every wake-up, as it does when every P has a
// loop. On 2 cores one loop costs 25-30% less CPU per request than two at
// redis-benchmark -c 50, at the same throughput (the client holding the other
// core). Each loop uses at most one core, so a host whose bidders need
// more sets socket_loops.
func DefaultLoops() int { return (runtime.GOMAXPROCS(0) + 1) / 2 }

// ParseSocketServer checks a socket_server setting; "" means the default
// for this platform.
func ParseSocketServer(name string) (SocketServer, error) {
	switch SocketServer(name) {
	case "":
		if !eventLoopSupported {
			return Goroutines, nil
		}
		return DefaultSocketServer, nil
	case Goroutines:
		return Goroutines, nil
	case EventLoop, Hybrid:
		if !eventLoopSupported {
			return "", fmt.Errorf("transport: socket_server %s is only available on Linux; use goroutines", name)
		}
		return SocketServer(name), nil
	case "uring":
		return "", errors.New("transport: socket_server uring was removed; use hybrid (the default on Linux), epoll or goroutines")
	}
	return "", fmt.Errorf("transport: unknown socket_server %q (want goroutines, epoll or hybrid)", name)
}

// ServerConfig configures a Server. The zero value is usable: every limit
// then has its default.
type ServerConfig struct {
	// Server is how connections are served; "" means the platform's
	// default (ParseSocketServer). Every other setting applies to all.
	Server SocketServer
	// Loops is how many event loops EventLoop and Hybrid run; 0 means
	// DefaultLoops().
	Loops int
	// MaxAmountMicros caps the amount of one SPEND or REFUND, so a bidder
	// bug (e.g. currency units sent as micros ×1e6) cannot take a day's
	// budget in one call. Zero means no cap.
	MaxAmountMicros int64
	// MaxRequestBytes caps one request; a client sending more is answered
	// with a protocol error and disconnected. Zero means
	// DefaultMaxRequestBytes.
	MaxRequestBytes int64
	// MaxArgs caps the number of arguments of one request, RESP or inline.
	// Zero means DefaultMaxArgs.
	MaxArgs int64
	// MaxInlineBytes caps an inline (telnet-style) command line; a longer
	// one is answered with a protocol error and disconnected. Zero means
	// DefaultMaxInlineBytes.
	MaxInlineBytes int64
	// MaxBufferedBytes is the buffer budget all connections share: the
	// bytes they may hold together beyond an idle connection's buffers
	// (request buffers grown for requests over 4 KiB, commands queued by
	// MULTI). A request or a queued command that would pass it is refused
	// with an error naming it. Zero means DefaultMaxBufferedBytes.
	MaxBufferedBytes int64
	// MaxClients caps open connections; one more is answered
	// "-ERR max clients reached" and closed. Zero means DefaultMaxClients;
	// negative means no cap.
	MaxClients int
	// IdleTimeout closes a connection that sends nothing for this long
	// between requests. Zero means DefaultIdleTimeout; negative, never.
	IdleTimeout time.Duration
	// ReadTimeout closes a connection whose request has not fully arrived
	// this long after its first bytes did (slowloris). Zero means
	// DefaultReadTimeout; negative, never.
	ReadTimeout time.Duration
	// WriteTimeout closes a connection whose replies could not be written
	// for this long because the client does not read them. Zero means
	// DefaultWriteTimeout; negative, never.
	WriteTimeout time.Duration
	// AllowedUIDs and AllowedGIDs restrict who may connect: when either is
	// non-empty, a peer (by SO_PEERCRED) must have its uid in AllowedUIDs
	// or its gid in AllowedGIDs, or it is answered "-ERR ... not allowed"
	// and closed. Both empty: anyone who can open the socket file, which
	// its mode and directory decide. Linux only.
	AllowedUIDs, AllowedGIDs []uint32
	// Logger receives connection-level events; nil means no logging.
	Logger *zap.Logger
	// ObserveSpend, if set, is given the time the Spender took for one SPEND
	// in SpendSample (per connection): a latency histogram's feed.
	ObserveSpend func(time.Duration)
}

// ErrServerClosed is returned by Serve after Close or Shutdown.
var ErrServerClosed = errors.New("transport: server closed")

// Server answers RESP requests from a Spender. Create it with NewServer; the
// zero value is not usable. All methods are safe for concurrent use. One
// Server may Serve several listeners at once.
type Server struct {
	spender Spender
	clocked ClockedSpender // spender, if it is one
	waiting WaitingSpender // spender, if it is one
	cfg     ServerConfig
	log     *zap.Logger
	budget  *bufferBudget // cfg.MaxBufferedBytes
	// readBufs lends connections their read buffers while they read
	// (requestReader.idle); idle connections hold none.
	readBufs sync.Pool

	closing atomic.Bool

	mu        sync.Mutex
	listeners map[net.Listener]struct{}
	conns     map[*serverConn]struct{}
	handlers  sync.WaitGroup // one per connection goroutine
	// Totals of connections already gone; live ones keep their own
	// counters so the hot path never touches a shared cache line.
	doneCommands  uint64
	doneErrors    uint64
	accepted      uint64
	protocolFails uint64
	rejected      uint64
	timedOut      uint64
	// burstWatched: a watchBurst goroutine runs.
	burstWatched bool
	stopped      chan struct{} // closed by the first stop
	stopOnce     sync.Once

	// The event loops (Server == EventLoop), started by the first Serve,
	// and the connections they serve.
	loops    []*eventLoop
	evConns  map[*evConn]struct{}
	nextLoop atomic.Uint64
}

// Stats are the server's counters since it was created.
type Stats struct {
	ConnectionsAccepted uint64 // connections ever accepted
	ConnectionsOpen     int    // connections open now
	Commands            uint64 // commands answered, including error replies
	ErrorReplies        uint64 // commands answered with -ERR
	ProtocolErrors      uint64 // connections dropped for malformed input
	Rejected            uint64 // connections refused: max clients, or peer not allowed
	TimedOut            uint64 // connections dropped by the idle, read or write deadline
}

// NewServer returns a Server that answers from sp.
func NewServer(sp Spender, cfg ServerConfig) *Server {
	if cfg.MaxRequestBytes <= 0 {
		cfg.MaxRequestBytes = DefaultMaxRequestBytes
	}
	if cfg.MaxArgs <= 0 {
		cfg.MaxArgs = DefaultMaxArgs
	}
	if cfg.MaxInlineBytes <= 0 {
		cfg.MaxInlineBytes = DefaultMaxInlineBytes
	}
	cfg.MaxInlineBytes = min(cfg.MaxInlineBytes, cfg.MaxRequestBytes)
	if cfg.MaxBufferedBytes <= 0 {
		cfg.MaxBufferedBytes = DefaultMaxBufferedBytes
	}
	if cfg.Server == "" {
		cfg.Server, _ = ParseSocketServer("")
	}
	if cfg.Loops <= 0 {
		cfg.Loops = DefaultLoops()
	}
	if cfg.MaxClients == 0 {
		cfg.MaxClients = DefaultMaxClients
	}
	orDefault := func(d *time.Duration, def time.Duration) {
		if *d == 0 {
			*d = def
		}
	}
	orDefault(&cfg.IdleTimeout, DefaultIdleTimeout)
	orDefault(&cfg.ReadTimeout, DefaultReadTimeout)
	orDefault(&cfg.WriteTimeout, DefaultWriteTimeout)
	log := cfg.Logger
	if log == nil {
		log = zap.NewNop()
	}
	clocked, _ := sp.(ClockedSpender)
	waiting, _ := sp.(WaitingSpender)
	return &Server{
		spender:   sp,
		clocked:   clocked,
		waiting:   waiting,
		cfg:       cfg,
		log:       log.Named("transport"),
		budget:    &bufferBudget{limit: cfg.MaxBufferedBytes},
		readBufs:  sync.Pool{New: func() any { return new([readBufSize]byte) }},
		listeners: make(map[net.Listener]struct{}),
		conns:     make(map[*serverConn]struct{}),
		evConns:   make(map[*evConn]struct{}),
		stopped:   make(chan struct{}),
	}
}

// ListenUnix listens on a Unix socket at path and sets its mode (0 means
// DefaultSocketMode). A socket file left by a dead daemon is replaced; a
// socket someone still listens on, or any other kind of file, is left alone
// and reported, so a misconfigured path can never delete data or steal a
// running daemon's socket.
func ListenUnix(path string, mode os.FileMode) (net.Listener, error) {
	if path == "" {
		return nil, errors.New("transport: empty socket path")
	}
	if mode == 0 {
		mode = DefaultSocketMode
	}
	dir := filepath.Dir(path)
	if fi, err := os.Stat(dir); err != nil {
		return nil, fmt.Errorf("transport: socket directory: %w", err)
	} else if !fi.IsDir() {
		return nil, fmt.Errorf("transport: socket directory %s is not a directory", dir)
	}
	if fi, err := os.Lstat(path); err == nil {
		if fi.Mode().Type() != os.ModeSocket {
			return nil, fmt.Errorf("transport: %s exists and is not a socket; not removing it", path)
		}
		if c, err := net.DialTimeout("unix", path, time.Second); err == nil {
			c.Close()
			return nil, fmt.Errorf("transport: %s is in use by another process", path)
		}
		if err := os.Remove(path); err != nil {
			return nil, fmt.Errorf("transport: remove stale socket: %w", err)
		}
	} else if !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("transport: %w", err)
	}
	ln, err := net.Listen("unix", path)
	if err != nil {
		return nil, fmt.Errorf("transport: %w", err)
	}
	if err := os.Chmod(path, mode); err != nil {
		ln.Close() // also unlinks the socket file
		return nil, fmt.Errorf("transport: %w", err)
	}
	return ln, nil
}

// Serve accepts connections on ln until Close or Shutdown, then returns
// ErrServerClosed. It takes ownership of ln, which may come from ListenUnix
// or from systemd socket activation. It fails at once if the configured
// socket server is unknown or unavailable here.
func (s *Server) Serve(ln net.Listener) error {
	if _, err := ParseSocketServer(string(s.cfg.Server)); err != nil {
		ln.Close()
		return err
	}
	evloop := s.cfg.Server == EventLoop || s.cfg.Server == Hybrid
	s.mu.Lock()
	if s.closing.Load() {
		s.mu.Unlock()
		ln.Close()
		return ErrServerClosed
	}
	if evloop {
		if err := s.startLoops(); err != nil {
			s.mu.Unlock()
			ln.Close()
			return fmt.Errorf("transport: start event loops: %w", err)
		}
	}
	s.listeners[ln] = struct{}{}
	s.mu.Unlock()
	s.warnMode(ln)
	defer func() {
		s.mu.Lock()
		delete(s.listeners, ln)
		s.mu.Unlock()
		ln.Close()
	}()

	var backoff time.Duration
	for {
		nc, err := ln.Accept()
		if err != nil {
			if s.closing.Load() {
				return ErrServerClosed
			}
			if errors.Is(err, net.ErrClosed) {
				return err
			}
			// Out of file descriptors and the like: wait for some to
			// be released rather than spinning or giving up.
			backoff = min(max(2*backoff, 5*time.Millisecond), time.Second)
			s.log.Warn("accept failed", zap.Error(err), zap.Duration("retry_in", backoff))
			time.Sleep(backoff)
			continue
		}
		backoff = 0
		if msg := s.checkPeer(nc); msg != "" {
			s.refuse(nc, msg)
			continue
		}
		s.mu.Lock()
		if s.closing.Load() {
			s.mu.Unlock()
			nc.Close()
			return ErrServerClosed
		}
		open := len(s.conns) + len(s.evConns)
		if s.cfg.MaxClients > 0 && open >= s.cfg.MaxClients {
			s.mu.Unlock()
			s.refuse(nc, "max clients reached")
			continue
		}
		s.noteOpen(open + 1)
		if evloop {
			ec := s.newEvConn()
			s.evConns[ec] = struct{}{}
			s.accepted++
			s.mu.Unlock()
			s.adopt(nc, ec)
			continue
		}
		c := &serverConn{nc: nc}
		s.conns[c] = struct{}{}
		s.accepted++
		s.handlers.Add(1)
		s.mu.Unlock()
		go s.handle(c)
	}
}

// Shutdown stops accepting, closes idle connections, lets connections that
// are answering a batch of commands finish it, and waits for them. If ctx
// ends first it closes the remaining connections and returns ctx.Err()
// without waiting for a Spender call still running; Close waits for it.
func (s *Server) Shutdown(ctx context.Context) error {
	s.stop(false)
	done := make(chan struct{})
	go func() {
		s.handlers.Wait()
		close(done)
	}()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		s.stop(true)
		return ctx.Err()
	}
}

// Close stops accepting and closes every connection at once, then waits for
// their goroutines. Commands being answered may lose their reply.
func (s *Server) Close() error {
	s.stop(true)
	s.handlers.Wait()
	return nil
}

func (s *Server) stop(force bool) {
	s.closing.Store(true)
	s.stopOnce.Do(func() { close(s.stopped) })
	s.mu.Lock()
	defer s.mu.Unlock()
	for ln := range s.listeners {
		ln.Close()
	}
	for c := range s.conns {
		c.closeIfIdle(force)
	}
	s.signalLoops(force)
}

// Stats returns the server's counters.
func (s *Server) Stats() Stats {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := Stats{
		ConnectionsAccepted: s.accepted,
		ConnectionsOpen:     len(s.conns) + len(s.evConns),
		Commands:            s.doneCommands,
		ErrorReplies:        s.doneErrors,
		ProtocolErrors:      s.protocolFails,
		Rejected:            s.rejected,
		TimedOut:            s.timedOut,
	}
	for c := range s.conns {
		st.Commands += c.commands.Load()
		st.ErrorReplies += c.errors.Load()
	}
	for c := range s.evConns {
		st.Commands += c.commands.Load()
		st.ErrorReplies += c.errors.Load()
	}
	return st
}

// serverConn is one client connection. Its goroutine alone reads and writes
// nc; mu only coordinates with Shutdown.
type serverConn struct {
	nc       net.Conn
	commands atomic.Uint64
	errors   atomic.Uint64

	mu     sync.Mutex
	busy   bool // between reading a batch and flushing its replies
	closed bool // closed by stop; do not start another batch
}

// closeIfIdle closes the connection unless it is answering a batch (and
// force is false), in which case its goroutine exits after the batch.
func (c *serverConn) closeIfIdle(force bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.busy && !force {
		return
	}
	c.closed = true
	c.nc.Close()
}

// begin marks the start of a batch; it reports false if the server has
// closed the connection, in which case no reply could be delivered and the
// batch must not reach the Spender.
func (c *serverConn) begin() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return false
	}
	c.busy = true
	return true
}

// end marks the end of a batch and reports whether to keep serving.
func (c *serverConn) end(s *Server) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.busy = false
	return !c.closed && !s.closing.Load()
}

// Replies are flushed at the end of each batch of pipelined requests, and
// within a batch after this many, so a client pipelining small requests
// with large replies (INFO) cannot grow the reply buffer without bound.
const flushEvery = 64

// handle serves c on its own goroutine until the connection ends. The
// connection's state lives in a goConn on the heap, not in handle's frame:
// a goroutine parked waiting for bytes then uses well under 1 KiB of stack,
// so the garbage collector shrinks its stack to the 2 KiB minimum, and
// 10,000 connections stay within the socket's memory bound of 8 KiB each.
func (s *Server) handle(c *serverConn) {
	defer s.handlers.Done()
	g := s.newGoConn(c)
	defer g.done()
	for g.serveBuffered() && g.wait() {
	}
}

// goConn is one connection's state on the goroutines server.
type goConn struct {
	s  *Server
	c  *serverConn
	rd *requestReader
	cw connWriter
	wr replyBuf
	d  dispatcher
	// inBatch: requests are being answered; pending: replies not yet
	// flushed.
	inBatch bool
	pending int
	// partialSince: when the incomplete request in rd was first seen;
	// readDeadline: the read deadline set on nc.
	partialSince, readDeadline time.Time
	raw                        syscall.RawConn // nc's descriptor, for fillConn
	protoErr                   *ProtocolError
	timedOut                   bool
}

func (s *Server) newGoConn(c *serverConn) *goConn {
	return &goConn{
		s:  s,
		c:  c,
		rd: s.newRequestReader(),
		cw: connWriter{nc: c.nc, timeout: s.cfg.WriteTimeout, budget: s.budget},
		d:  dispatcher{s: s, c: c},
	}
}

// done releases what the connection held and closes it.
func (g *goConn) done() {
	g.d.release()
	g.rd.release()
	g.s.connDone(g.c, g.protoErr != nil, g.timedOut)
}

// serveBuffered answers the complete requests in the buffer, then the
// batch they make, and reports whether to keep serving. It returns before
// the wait for more bytes (wait), so that its frame is not on a waiting
// goroutine's stack.
func (g *goConn) serveBuffered() bool {
	for {
		args, err := g.rd.next()
		switch {
		case err != nil:
			if errors.As(err, &g.protoErr) {
				g.wr.WriteError("ERR " + g.protoErr.Error())
				g.flush()
				g.s.log.Info("closing connection after protocol error", zap.String("error", g.protoErr.Msg))
			}
			return false
		case args == nil:
			return g.endBatch()
		}
		g.partialSince = time.Time{}
		if !g.inBatch {
			if !g.c.begin() {
				return false
			}
			g.inBatch = true
			g.d.newBatch()
		}
		quit := g.d.serve(&g.wr, args)
		if g.pending++; quit || g.pending >= flushEvery || len(g.wr.b) >= flushBytes {
			if !g.flush() || quit {
				g.c.end(g.s)
				return false
			}
		}
	}
}

// endBatch answers the batch read so far, if any, and reports whether to
// keep serving.
func (g *goConn) endBatch() bool {
	if !g.inBatch {
		return true
	}
	g.inBatch = false
	ok := g.flush()
	return g.c.end(g.s) && ok
}

// wait reads more bytes under the read deadline that applies.
func (g *goConn) wait() bool {
	now := time.Now()
	if !g.rd.buffered() {
		g.partialSince = time.Time{}
	} else if g.partialSince.IsZero() {
		g.partialSince = now
	}
	want, slack := g.s.readDeadline(now, g.partialSince, g.d.st.tx)
	if d := want.Sub(g.readDeadline); want.IsZero() != g.readDeadline.IsZero() || d < 0 || d > slack {
		g.c.nc.SetReadDeadline(want)
		g.readDeadline = want
	}
	if err := fillConn(g.rd, g.c.nc, &g.raw); err != nil {
		g.timedOut = g.s.readFailed(err, g.rd.buffered())
		return false
	}
	return true
}

// flush writes the replies waiting and reports whether the write succeeded.
func (g *goConn) flush() bool {
	g.pending = 0
	_, err := g.cw.Write(g.wr.b)
	g.wr.reset()
	if err != nil {
		g.timedOut = g.s.writeFailed(err)
	}
	return err == nil
}

// connDone closes c and moves its counters to the server's totals. It
// frees the slot before the client can see the close, so that it may
// reconnect at once under max clients.
func (s *Server) connDone(c *serverConn, protoErr, timedOut bool) {
	s.mu.Lock()
	delete(s.conns, c)
	s.doneCommands += c.commands.Load()
	s.doneErrors += c.errors.Load()
	if protoErr {
		s.protocolFails++
	}
	if timedOut {
		s.timedOut++
	}
	s.mu.Unlock()
	c.nc.Close()
}

// readDeadline is when a connection waiting for bytes is closed: read_timeout
// after partialSince, the first bytes of an incomplete request (zero:
// none), else idle_timeout from now, or from the start of its open MULTI
// (queued commands are not activity). A deadline up to slack later than
// the one set may stay: re-arming costs a timer update.
func (s *Server) readDeadline(now, partialSince time.Time, tx *txQueue) (want time.Time, slack time.Duration) {
	switch {
	case !partialSince.IsZero():
		if s.cfg.ReadTimeout > 0 {
			want = partialSince.Add(s.cfg.ReadTimeout)
		}
	case s.cfg.IdleTimeout <= 0:
	case tx != nil:
		want = tx.opened.Add(s.cfg.IdleTimeout)
	default:
		want, slack = now.Add(s.cfg.IdleTimeout), s.cfg.IdleTimeout/8
	}
	return want, slack
}

// readFailed logs why a connection's read ended and reports whether a
// deadline ended it.
func (s *Server) readFailed(err error, partial bool) (timedOut bool) {
	switch {
	case isTimeout(err) && partial:
		s.log.Info("closing connection: request incomplete after read_timeout", zap.Duration("read_timeout", s.cfg.ReadTimeout))
		return true
	case isTimeout(err):
		s.log.Debug("closing idle connection", zap.Duration("idle_timeout", s.cfg.IdleTimeout))
		return true
	case !errors.Is(err, io.EOF) && !errors.Is(err, net.ErrClosed):
		s.log.Debug("connection read failed", zap.Error(err))
	}
	return false
}

// writeFailed logs why a connection's write failed and reports whether a
// deadline ended it.
func (s *Server) writeFailed(err error) (timedOut bool) {
	switch {
	case isTimeout(err):
		s.log.Info("closing connection: client not reading its replies", zap.Duration("write_timeout", s.cfg.WriteTimeout))
		return true
	case errors.Is(err, errReplyBudget):
		s.log.Info("closing connection: its replies do not fit the buffer budget", zap.Int64("max_buffered_bytes", s.cfg.MaxBufferedBytes))
	}
	return false
}

// fillConn reads from nc into rd, through fillRaw where nc gives its
// descriptor (every Unix or TCP connection does); *raw caches it.
func fillConn(rd *requestReader, nc net.Conn, raw *syscall.RawConn) error {
	if *raw == nil {
		if sc, ok := nc.(syscall.Conn); ok {
			*raw, _ = sc.SyscallConn()
		}
	}
	if *raw != nil {
		return rd.fillRaw(*raw)
	}
	return rd.fill(nc)
}

// maxIdleWriteBuffer: a connection whose reply buffer grew larger starts
// its next batch with a fresh one.
const maxIdleWriteBuffer = 2 << 10

// replyAllowance: replies waiting to be written beyond this many bytes
// (replies the client does not read, or a batch's) are paid from the
// server's buffer budget while they wait; a connection whose replies it
// cannot pay for is closed.
const replyAllowance = 2 << 10

// flushBytes: replies are also flushed once this many bytes wait.
const flushBytes = 16 << 10

// errReplyBudget: a connection's replies did not fit the buffer budget.
var errReplyBudget = errors.New("replies over the buffer budget")

// connWriter writes replies under the write deadline, paying for a large
// write from the buffer budget while it waits.
type connWriter struct {
	nc      net.Conn
	timeout time.Duration
	armed   time.Time // the write deadline set on nc
	budget  *bufferBudget
}

func (w *connWriter) Write(p []byte) (int, error) {
	if extra := int64(len(p) - replyAllowance); extra > 0 {
		if !w.budget.take(extra) {
			return 0, errReplyBudget
		}
		defer w.budget.give(extra)
	}
	if w.timeout > 0 {
		// Re-arm only when an eighth of the timeout has passed since: a
		// flush then gets at least 7/8 of it, without a timer update per
		// reply.
		now := time.Now()
		if want := now.Add(w.timeout); want.Sub(w.armed) > w.timeout/8 {
			w.nc.SetWriteDeadline(want)
			w.armed = want
		}
	}
	return w.nc.Write(p)
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// burstConns: once this many connections are open, the server watches
// them close and gives their memory back (watchBurst).
const burstConns = 1000

// noteOpen starts watchBurst when open connections reach burstConns.
// Called with s.mu held.
func (s *Server) noteOpen(open int) {
	switch {
	case open >= burstConns && !s.burstWatched && !s.closing.Load():
		s.burstWatched = true
		governor.hold(s, open)
		s.handlers.Add(1)
		go s.watchBurst(open)
	case s.burstWatched && open%burstStep == 0:
		governor.hold(s, open)
	}
}

// burstStep: during a burst the memory limit follows the connections
// opened every burstStep, and those closed every second (watchBurst).
const burstStep = 64

// watchBurst keeps a burst of connections within the socket's memory
// bound (memGovernor: the limit follows the open connections, checked once
// a second) and gives their memory back as they close: a GC each time the
// open connections have halved (the runtime's scavenger then returns the
// pages, a quiet daemon may otherwise not collect for minutes), and
// debug.FreeOSMemory once when the burst is over (fewer than burstConns/8
// left), which returns them at once but holds the heap while it does. It
// ends there or when the server stops.
func (s *Server) watchBurst(open int) {
	defer s.handlers.Done()
	released := open
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		select {
		case <-s.stopped:
			governor.release(s)
			return
		case <-tick.C:
		}
		s.mu.Lock()
		open := len(s.conns) + len(s.evConns)
		released = max(released, open)
		done := open < burstConns/8
		if done {
			// Under s.mu: a burst noteOpen starts next holds anew.
			s.burstWatched = false
			governor.release(s)
		} else {
			governor.hold(s, open)
		}
		s.mu.Unlock()
		switch {
		case done:
			debug.FreeOSMemory()
			return
		case open <= released/2:
			runtime.GC()
			released = open
		}
	}
}

// refuse answers a connection the server will not serve, and closes it.
// The reply fits any socket buffer; the deadline only guards the write.
func (s *Server) refuse(nc net.Conn, msg string) {
	s.mu.Lock()
	s.rejected++
	s.mu.Unlock()
	nc.SetWriteDeadline(time.Now().Add(100 * time.Millisecond))
	io.WriteString(nc, "-ERR "+msg+"\r\n")
	nc.Close()
	s.log.Info("connection refused", zap.String("reason", msg))
}

// checkPeer applies the uid/gid allow-list; it returns why the peer is
// refused, or "".
func (s *Server) checkPeer(nc net.Conn) string {
	if len(s.cfg.AllowedUIDs) == 0 && len(s.cfg.AllowedGIDs) == 0 {
		return ""
	}
	uid, gid, err := peerCred(nc)
	if err != nil {
		return "cannot check the peer's credentials: " + err.Error()
	}
	if slices.Contains(s.cfg.AllowedUIDs, uid) || slices.Contains(s.cfg.AllowedGIDs, gid) {
		return ""
	}
	return "uid " + strconv.FormatUint(uint64(uid), 10) + " gid " + strconv.FormatUint(uint64(gid), 10) +
		" not allowed to connect"
}

// warnMode logs a warning if ln's socket file is writable by every local
// user: then any of them can spend any campaign's budget.
func (s *Server) warnMode(ln net.Listener) {
	if ln.Addr().Network() != "unix" {
		return
	}
	path := ln.Addr().String()
	if path == "" || path[0] == '@' { // abstract: no file mode
		return
	}
	fi, err := os.Stat(path)
	if err != nil {
		return
	}
	if fi.Mode().Perm()&0o002 != 0 {
		s.log.Warn("the bidder socket is world-writable: every local user can spend budget; use mode 0660 with the bidders in the daemon's group, or allowed_uids/allowed_gids",
			zap.String("socket", path), zap.String("mode", fmt.Sprintf("%04o", uint32(fi.Mode().Perm()))))
	}
}
