package transport

import (
	"errors"
	"io"
	"net"
	"runtime"
	"sync"
	"syscall"
	"time"

	"go.uber.org/zap"
	"golang.org/x/sys/unix"
)

// The event-driven server (socket_server: epoll). A goroutine per connection
// pays, per request, a netpoller wake-up, a goroutine switch, a read, a
// write and a read that finds nothing (EAGAIN) before parking again. Here a
// few loops (DefaultLoops) each block in epoll_wait on their share of the
// connections; on a wake-up a loop reads each ready connection once, answers
// every complete request in its buffer and sends all the replies with one
// write, as Redis's own event loop does. Accepting stays a goroutine on the
// net.Listener (so systemd-activated sockets, peer credentials and the
// connection cap work unchanged); each accepted connection's descriptor is
// then taken out of Go's netpoller and added to a loop's epoll set.
//
// A request that may wait on the Spender is not answered in the loop, where
// it would stall every other connection of the loop: the first SPEND,
// REFUND or BALANCE of a campaign on a connection (the daemon loads a
// campaign it has not seen from the ledger, up to ledger_timeout) and EXEC.
// The connection is handed to a goroutine for the rest of its buffer, as
// the goroutine server would serve it, and handed back; once a campaign has
// been answered without error on a connection, its requests stay in the
// loop.
//
// Deadlines are checked by a sweep of the loop's connections every
// tick (an eighth of the shortest timeout, within [5 ms, 1 s]), so a
// timeout fires up to a tick late, never early.

const eventLoopSupported = true

// evConn is one connection of an event loop; only its loop touches it after
// registration.
type evConn struct {
	serverConn // the counters; nc is nil
	fd         int
	rd         *requestReader
	out        replyBuf
	d          dispatcher

	lastActive   time.Time // last read, for the idle timeout
	partialSince time.Time // when an incomplete request was first buffered
	blockedSince time.Time // when a write first could not complete
	sent         int       // bytes of out already written
	outHeld      int64     // out's share of the buffer budget while it waits (holdOut)
	wantOut      bool      // registered for EPOLLOUT instead of EPOLLIN
	quit         bool      // close once out is written
	// busy: a goroutine of its own owns the connection while it waits on
	// the Spender (see handoff); the loop ignores it. Guarded by the
	// loop's mu.
	busy     bool
	protoErr bool
	timedOut bool
}

// eventLoop is one epoll set and the goroutine that waits on it.
type eventLoop struct {
	s    *Server
	epfd int
	wake int // an eventfd: written by stop to end epoll_wait
	// batch, for socket_server hybrid: the ring that reads and writes a
	// wake-up's ready connections (hybrid_linux.go); nil otherwise.
	batch    *batchRing
	batching bool // answer queues replies in batch.sends instead of writing

	mu     sync.Mutex
	conns  map[int]*evConn
	closed bool
}

// outFlushBytes: while answering a batch, replies are written out once
// they reach this size, and a connection whose client does not read them
// stops being read (its requests stay in its read buffer), so the reply
// buffer stays bounded by this plus one reply.
const outFlushBytes = 64 << 10

// startLoops creates the server's event loops (ServerConfig.Loops), each
// with a batch ring for socket_server hybrid unless io_uring cannot be used
// here, in which case it says why and serves with epoll alone. Called with
// s.mu held.
func (s *Server) startLoops() error {
	if s.loops != nil {
		return nil
	}
	n := s.cfg.Loops
	loops := make([]*eventLoop, 0, n)
	for range n {
		epfd, err := unix.EpollCreate1(unix.EPOLL_CLOEXEC)
		if err != nil {
			for _, l := range loops {
				l.release()
			}
			return err
		}
		wake, err := unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK)
		if err != nil {
			unix.Close(epfd)
			for _, l := range loops {
				l.release()
			}
			return err
		}
		ev := unix.EpollEvent{Events: unix.EPOLLIN, Fd: int32(wake)}
		if err := unix.EpollCtl(epfd, unix.EPOLL_CTL_ADD, wake, &ev); err != nil {
			unix.Close(epfd)
			unix.Close(wake)
			for _, l := range loops {
				l.release()
			}
			return err
		}
		loops = append(loops, &eventLoop{s: s, epfd: epfd, wake: wake, conns: make(map[int]*evConn)})
	}
	if s.cfg.Server == Hybrid {
		for _, l := range loops {
			b, err := newBatchRing(epollEvents)
			if err != nil {
				s.log.Warn("socket_server hybrid: io_uring unavailable, serving with epoll alone", zap.Error(err))
				for _, l := range loops {
					if l.batch != nil {
						l.batch.ring.Close()
						l.batch = nil
					}
				}
				break
			}
			l.batch = b
		}
	}
	s.loops = loops
	for _, l := range loops {
		s.handlers.Add(1)
		go l.run()
	}
	return nil
}

// epollEvents is how many events one epoll_wait returns at most, and so
// the most connections a hybrid batch holds.
const epollEvents = 256

func (l *eventLoop) release() {
	unix.Close(l.epfd)
	if l.batch != nil {
		l.batch.ring.Close()
	}
	unix.Close(l.wake)
}

// signalLoops wakes every loop so it sees s.closing and exits. With force,
// it also shuts every connection down at once, so that clients see the
// close even while a loop waits on a slow Spender: shutdown(2) ends the
// connection but keeps the descriptor, which only its loop closes (so the
// number cannot be reused under it).
func (s *Server) signalLoops(force bool) {
	for _, l := range s.loops {
		if force {
			l.mu.Lock()
			for fd := range l.conns {
				unix.Shutdown(fd, unix.SHUT_RDWR)
			}
			l.mu.Unlock()
		}
		unix.Write(l.wake, wakeOne)
	}
}

// wakeOne is what a write to a loop's eventfd adds.
var wakeOne = []byte{1, 0, 0, 0, 0, 0, 0, 0}

// adopt hands an accepted connection to an event loop. The caller has
// counted it in s.evConns; on failure adopt closes it and uncounts it.
func (s *Server) adopt(nc net.Conn, c *evConn) {
	fd, err := detach(nc)
	if err != nil {
		s.log.Warn("cannot take the connection into the event loop", zap.Error(err))
		s.mu.Lock()
		delete(s.evConns, c)
		s.mu.Unlock()
		return
	}
	c.fd = fd
	l := s.loops[s.nextLoop.Add(1)%uint64(len(s.loops))]
	if !l.register(c) {
		unix.Close(fd)
		s.mu.Lock()
		delete(s.evConns, c)
		s.mu.Unlock()
	}
}

// detach returns a non-blocking duplicate of nc's descriptor and closes nc,
// which takes it out of Go's netpoller; the socket stays open through the
// duplicate.
func detach(nc net.Conn) (int, error) {
	defer nc.Close()
	sc, ok := nc.(syscall.Conn)
	if !ok {
		return -1, errors.New("connection has no file descriptor")
	}
	raw, err := sc.SyscallConn()
	if err != nil {
		return -1, err
	}
	fd := -1
	var dupErr error
	if err := raw.Control(func(f uintptr) {
		fd, dupErr = unix.FcntlInt(f, unix.F_DUPFD_CLOEXEC, 0)
	}); err != nil {
		return -1, err
	}
	if dupErr != nil {
		return -1, dupErr
	}
	if err := unix.SetNonblock(fd, true); err != nil {
		unix.Close(fd)
		return -1, err
	}
	return fd, nil
}

func (l *eventLoop) register(c *evConn) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return false
	}
	c.lastActive = time.Now()
	l.conns[c.fd] = c
	ev := unix.EpollEvent{Events: unix.EPOLLIN | unix.EPOLLRDHUP, Fd: int32(c.fd)}
	if err := unix.EpollCtl(l.epfd, unix.EPOLL_CTL_ADD, c.fd, &ev); err != nil {
		delete(l.conns, c.fd)
		l.s.log.Warn("epoll_ctl add failed", zap.Error(err))
		return false
	}
	return true
}

// tick is how often a loop checks its connections' deadlines, or 0 if none
// is set.
func (s *Server) tick() time.Duration {
	var shortest time.Duration
	for _, t := range []time.Duration{s.cfg.IdleTimeout, s.cfg.ReadTimeout, s.cfg.WriteTimeout} {
		if t > 0 && (shortest == 0 || t < shortest) {
			shortest = t
		}
	}
	if shortest == 0 {
		return 0
	}
	return min(max(shortest/8, 5*time.Millisecond), time.Second)
}

func (l *eventLoop) run() {
	defer l.s.handlers.Done()
	defer l.release()
	events := make([]unix.EpollEvent, epollEvents)
	ready := make([]*evConn, 0, epollEvents)
	kinds := make([]uint32, 0, epollEvents)
	tick := l.s.tick()
	wait := -1
	if tick > 0 {
		wait = int(tick / time.Millisecond)
	}
	lastSweep := time.Now()
	yield := loopYield{last: lastSweep, yield: runtime.Gosched}
	for {
		n, err := unix.EpollWait(l.epfd, events, wait)
		if err != nil && !errors.Is(err, unix.EINTR) {
			l.s.log.Error("epoll_wait failed; closing the loop's connections", zap.Error(err))
			l.shutdown()
			return
		}
		if l.s.closing.Load() {
			l.shutdown()
			return
		}
		now := time.Now()
		// Resolve the descriptors under one lock; the connections are
		// then this goroutine's alone.
		ready, kinds = ready[:0], kinds[:0]
		l.mu.Lock()
		for _, ev := range events[:max(n, 0)] {
			if c := l.conns[int(ev.Fd)]; c != nil && !c.busy {
				ready = append(ready, c)
				kinds = append(kinds, ev.Events)
			}
		}
		l.mu.Unlock()
		if l.batch != nil && len(ready) >= hybridMinReady {
			if !l.serveBatch(ready, kinds, now) {
				l.shutdown()
				return
			}
		} else {
			for i, c := range ready {
				if !l.serve(c, kinds[i], now) {
					l.closeConn(c)
				}
			}
		}
		clear(ready)
		if tick > 0 && now.Sub(lastSweep) >= tick {
			lastSweep = now
			l.sweep(now)
		}
		yield.maybe(now)
	}
}

// loopYieldEvery is how often a busy loop yields its P (runtime.Gosched).
// The Go runtime's sysmon thread takes a goroutine that has not been
// rescheduled for 10 ms (forcePreemptNS) for one hogging its P: it
// preempts it (a signal, which also interrupts its wait) and takes the P,
// and after taking one it polls every 20 µs for the next millisecond and
// more before backing off again. A loop goroutine that only ever waits in
// system calls is never rescheduled, so without yielding it keeps sysmon
// awake 7,000-11,000 times a second, 3-4 µs of CPU per request at
// redis-benchmark -c 1 on a 2-core VM, and moves the loop between threads. A yield costs a few hundred nanoseconds
// (two thread switches for a loop locked to its thread).
const loopYieldEvery = 2 * time.Millisecond

// loopYield yields the loop's P at most once per loopYieldEvery.
type loopYield struct {
	last  time.Time
	yield func() // runtime.Gosched, or a test's counter
}

// maybe yields if loopYieldEvery has passed since the last yield.
func (y *loopYield) maybe(now time.Time) {
	if now.Sub(y.last) >= loopYieldEvery {
		y.last = now
		y.yield()
	}
}

// serve handles one readiness event and reports whether to keep c.
func (l *eventLoop) serve(c *evConn, ev uint32, now time.Time) bool {
	if c.wantOut {
		if ev&(unix.EPOLLOUT|unix.EPOLLERR|unix.EPOLLHUP) == 0 {
			return true
		}
		if !l.flush(c, now) {
			return false
		}
		if c.wantOut {
			return true
		}
		if c.quit {
			return false
		}
		// Drained: answer what the client sent meanwhile.
		return l.answer(c, now, nil, false)
	}
	err := c.rd.fill(fdReader(c.fd))
	if err != nil {
		if errors.Is(err, unix.EAGAIN) {
			c.rd.idle()
			return true
		}
		if !errors.Is(err, io.EOF) && !errors.Is(err, unix.ECONNRESET) {
			l.s.log.Debug("connection read failed", zap.Error(err))
		}
		return false
	}
	c.lastActive = now
	return l.answer(c, now, nil, false)
}

// answer decides every complete request in c's buffer (after first, if
// given) and writes the replies; it reports whether to keep c. In the loop
// (helper false) it hands c off at the first request that may block; in a
// helper it answers everything.
func (l *eventLoop) answer(c *evConn, now time.Time, first [][]byte, helper bool) bool {
	c.d.newBatch()
	for {
		args, err := first, error(nil)
		first = nil
		if args == nil {
			args, err = c.rd.next()
		}
		if err != nil {
			var pe *ProtocolError
			if errors.As(err, &pe) {
				c.out.WriteError("ERR " + pe.Error())
				c.protoErr = true
				l.flush(c, now)
				l.s.log.Info("closing connection after protocol error", zap.String("error", pe.Msg))
			}
			return false
		}
		if args == nil {
			break
		}
		c.partialSince = time.Time{}
		if !helper && c.d.mayBlock(args) {
			l.handoff(c, args)
			return true
		}
		errs := c.errors.Load()
		c.d.noWait = !helper
		quit := c.d.serve(&c.out, args)
		if c.d.deferred {
			// A SPEND whose answer would wait (WaitingSpender): nothing was
			// decided or replied; a goroutine answers it and what follows.
			c.d.deferred = false
			c.commands.Add(^uint64(0)) // counted again when answered
			l.handoff(c, args)
			return true
		}
		if quit {
			c.quit = true
			break
		}
		if helper && c.errors.Load() == errs {
			c.d.answered(args)
		}
		if len(c.out.b) >= outFlushBytes {
			if !l.flush(c, now) {
				return false
			}
			if c.wantOut {
				return true // the rest waits for the client to read
			}
		}
	}
	if c.rd.buffered() {
		if c.partialSince.IsZero() {
			c.partialSince = now
		}
	} else {
		c.partialSince = time.Time{}
		c.rd.idle() // every request answered: wait without a buffer
	}
	if !helper && l.batching { // (batching is the loop goroutine's: a helper must not read it)
		// Sent with the rest of the hybrid batch's replies.
		if c.sent < len(c.out.b) {
			l.batch.sends = append(l.batch.sends, c)
			return true
		}
		return !c.quit
	}
	if !l.flush(c, now) {
		return false
	}
	return !c.quit || c.wantOut
}

// flush writes c's pending replies without blocking. If the socket is
// full it switches c to waiting for EPOLLOUT; once everything is written it
// switches back. It reports false if the connection failed.
func (l *eventLoop) flush(c *evConn, now time.Time) bool {
	for c.sent < len(c.out.b) {
		n, err := syscall.Write(c.fd, c.out.b[c.sent:])
		if n > 0 {
			c.sent += n
		}
		if err == syscall.EINTR {
			continue
		}
		if err == syscall.EAGAIN {
			if !l.holdOut(c) {
				return false
			}
			if !c.wantOut {
				c.blockedSince = now
				c.wantOut = true
				if !c.busy {
					l.watch(c, unix.EPOLLOUT)
				}
			}
			return true
		}
		if err != nil {
			return false
		}
	}
	c.out.reset()
	c.sent = 0
	l.s.budget.give(c.outHeld)
	c.outHeld = 0
	if c.wantOut {
		c.wantOut = false
		c.blockedSince = time.Time{}
		c.lastActive = now // the idle timeout starts after the stall
		if !c.busy {
			l.watch(c, unix.EPOLLIN|unix.EPOLLRDHUP)
		}
	}
	return true
}

// holdOut pays from the buffer budget for c's reply buffer beyond
// replyAllowance while its client does not read it; it reports false, and
// logs why, if the budget cannot pay: c is then closed.
func (l *eventLoop) holdOut(c *evConn) bool {
	want := int64(cap(c.out.b) - replyAllowance)
	if want <= c.outHeld {
		return true
	}
	if !l.s.budget.take(want - c.outHeld) {
		l.s.log.Info("closing connection: its replies do not fit the buffer budget", zap.Int64("max_buffered_bytes", l.s.cfg.MaxBufferedBytes))
		return false
	}
	c.outHeld = want
	return true
}

func (l *eventLoop) watch(c *evConn, events uint32) {
	ev := unix.EpollEvent{Events: events, Fd: int32(c.fd)}
	if err := unix.EpollCtl(l.epfd, unix.EPOLL_CTL_MOD, c.fd, &ev); err != nil {
		l.s.log.Warn("epoll_ctl mod failed", zap.Error(err))
	}
}

// sweep closes the connections whose idle, read or write deadline passed.
func (l *eventLoop) sweep(now time.Time) {
	cfg := &l.s.cfg
	var expired []*evConn
	l.mu.Lock()
	for _, c := range l.conns {
		switch {
		case c.busy:
		case c.wantOut:
			if cfg.WriteTimeout > 0 && now.Sub(c.blockedSince) >= cfg.WriteTimeout {
				l.s.log.Info("closing connection: client not reading its replies", zap.Duration("write_timeout", cfg.WriteTimeout))
				expired = append(expired, c)
			}
		case !c.partialSince.IsZero():
			if cfg.ReadTimeout > 0 && now.Sub(c.partialSince) >= cfg.ReadTimeout {
				l.s.log.Info("closing connection: request incomplete after read_timeout", zap.Duration("read_timeout", cfg.ReadTimeout))
				expired = append(expired, c)
			}
		default:
			idleSince := c.lastActive
			if tx := c.d.st.tx; tx != nil {
				// Queued commands are not activity: a MULTI must end
				// within idle_timeout of its start.
				idleSince = tx.opened
			}
			if cfg.IdleTimeout > 0 && now.Sub(idleSince) >= cfg.IdleTimeout {
				l.s.log.Debug("closing idle connection", zap.Duration("idle_timeout", cfg.IdleTimeout))
				expired = append(expired, c)
			}
		}
	}
	l.mu.Unlock()
	for _, c := range expired {
		c.timedOut = true
		l.closeConn(c)
	}
}

// closeConn closes c and moves its counters to the server's totals. The
// slot is freed before the client can see the close, as in handle.
func (l *eventLoop) closeConn(c *evConn) {
	l.mu.Lock()
	delete(l.conns, c.fd)
	l.mu.Unlock()
	s := l.s
	s.mu.Lock()
	delete(s.evConns, c)
	s.doneCommands += c.commands.Load()
	s.doneErrors += c.errors.Load()
	if c.protoErr {
		s.protocolFails++
	}
	if c.timedOut {
		s.timedOut++
	}
	s.mu.Unlock()
	c.rd.release()
	c.d.release()
	s.budget.give(c.outHeld)
	c.outHeld = 0
	unix.Close(c.fd) // also takes it out of the epoll set
}

// shutdown ends the loop: every batch has been answered (a loop never
// stops in the middle of one), so each connection's pending replies get
// one last non-blocking write before it is closed.
func (l *eventLoop) shutdown() {
	l.mu.Lock()
	l.closed = true
	conns := make([]*evConn, 0, len(l.conns))
	for _, c := range l.conns {
		if !c.busy { // a helper closes its connection when it is done
			conns = append(conns, c)
		}
	}
	l.mu.Unlock()
	now := time.Now()
	for _, c := range conns {
		l.flush(c, now)
		l.closeConn(c)
	}
}

// fdReader reads a non-blocking descriptor: EAGAIN when empty, io.EOF at
// the end. Reads and writes go through package syscall, as net's do, so
// that the race detector sees a reply written here happen before the
// client's read of it (x/sys/unix annotates its own, separate, sync point).
type fdReader int

func (f fdReader) Read(p []byte) (int, error) {
	for {
		n, err := syscall.Read(int(f), p)
		if err == syscall.EINTR {
			continue
		}
		if err != nil {
			return 0, err
		}
		if n == 0 && len(p) > 0 {
			return 0, io.EOF
		}
		return n, nil
	}
}

func (s *Server) newEvConn() *evConn {
	c := &evConn{fd: -1, rd: s.newRequestReader()}
	c.d = dispatcher{s: s, c: &c.serverConn}
	return c
}

// handoff gives c to a goroutine that answers args and the rest of c's
// buffer, then gives it back to the loop. Until then the loop neither
// reads it nor checks its deadlines (the goroutine server does not either
// while a request is being answered).
func (l *eventLoop) handoff(c *evConn, args [][]byte) {
	l.mu.Lock()
	c.busy = true
	l.mu.Unlock()
	l.watch(c, 0)
	l.s.handlers.Add(1)
	go l.help(c, args)
}

func (l *eventLoop) help(c *evConn, args [][]byte) {
	defer l.s.handlers.Done()
	now := time.Now()
	keep := l.answer(c, now, args, true)
	l.mu.Lock()
	closed := l.closed
	if keep && !closed {
		c.busy = false
		events := uint32(unix.EPOLLIN | unix.EPOLLRDHUP)
		if c.wantOut {
			events = unix.EPOLLOUT
		}
		// Re-armed under mu: once busy is false the loop may sweep and
		// close c, which must not happen before this.
		l.watch(c, events)
		l.mu.Unlock()
		return
	}
	l.mu.Unlock()
	l.closeConn(c)
}
