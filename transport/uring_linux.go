package transport

import (
	"runtime"
	"time"

	"github.com/pacer/pacer/internal/uring"
	"go.uber.org/zap"
	"golang.org/x/sys/unix"
)

// The io_uring server (socket_server: uring). The epoll loop pays, per
// wake-up, epoll_wait plus a read and a write per ready connection: at
// `redis-benchmark -c 50` that is most of its CPU. Here each loop owns an
// io_uring, and a wake-up is one system call whatever the number of
// connections: one io_uring_enter submits the replies of the last batch
// (a send per connection, MSG_DONTWAIT) and the reads to re-arm (a recv
// per connection, into its request reader's buffer), then sleeps until the
// next completion that is not one of those sends.
//
// Why that wait is exact: a MSG_DONTWAIT send never waits for room in the
// socket, so the kernel completes it inside the io_uring_enter that
// submits it, with what fitted or -EAGAIN; with k sends submitted, the
// loop waits for k+1 completions, so it sleeps until a recv or a wake-up
// arrives. (A send that did not fit makes the connection wait for POLLOUT,
// as the epoll loop waits for EPOLLOUT; it is not read meanwhile.)
//
// The ring is created with SetupSingleIssuer and SetupDeferTaskrun by the
// loop's goroutine, locked to its thread: the kernel then does the ring's
// deferred work (a recv whose data arrived) only inside that goroutine's
// io_uring_enter, never by interrupting it, and nothing else may submit.
// A helper goroutine (handoff) therefore answers with plain writes, as in
// the epoll loop, and gives the connection back through the loop's
// eventfd, whose read is always armed.
//
// Everything else is the epoll loop's: the same evConn, parser, dispatch,
// hand-off of requests that may block, limits and deadline sweep; only
// reading, writing and closing differ. Invariants that keep the buffers
// safe while the kernel holds them:
//   - a recv is armed only into rd.room(), and answer never runs while one
//     is armed (so rd's buffer is neither read nor moved under it);
//   - a send's buffer is c.out.b, which is only appended to (never reset
//     or reallocated away: sendBuf keeps it alive) until its completion;
//   - a connection is closed (its descriptor, its map entry) only once no
//     request of it is in flight: closing shuts the socket down first,
//     which completes a pending recv.

// ringConn is an evConn's io_uring state; only its loop touches it.
type ringConn struct {
	inflight  int    // requests submitted whose completion was not seen
	recvArmed bool   // a recv into rd.room() is in flight
	pollOut   bool   // a POLLOUT poll is in flight
	sending   bool   // a send of sendBuf is in flight
	sendBuf   []byte // keeps the send's buffer alive
	queued    bool   // in the loop's send list
	pending   bool   // rd may hold requests not answered yet
	closed    bool   // shut down; closed once inflight is 0
}

// ringLoop is the io_uring half of an eventLoop.
type ringLoop struct {
	ready   chan error // the ring's creation
	ring    *uring.Ring
	wakeBuf [8]byte // the eventfd read's buffer
	wakeOut bool    // the eventfd read is in flight

	// Guarded by the eventLoop's mu: connections registered, and given
	// back by helpers, that the loop has not armed yet.
	incoming, returned []*evConn

	sends  []*evConn // connections with replies to send this wake-up
	nSends uint32    // sends submitted by the coming enter
	now    time.Time
}

// Request kinds, in the top half of a request's user data; the bottom half
// is the connection's descriptor.
const (
	ringRecv = iota + 1
	ringSend
	ringPollOut
	ringWake
	ringCancel
)

func ringData(kind int, fd int) uint64 { return uint64(kind)<<32 | uint64(uint32(fd)) }

// ringEntries: submission queue entries per loop; the completion queue is
// 8 times larger, so that even with every connection's recv and send
// completing in one wake-up the kernel rarely has to hold completions back
// (it does not lose them when it must: FeatNoDrop).
const ringEntries = 1024

// startRingLoops starts the io_uring loops, each creating its ring
// on its own locked thread; it fails, leaving nothing behind, if any ring
// cannot be created.
func (s *Server) startRingLoops() error {
	n := s.cfg.Loops
	loops := make([]*eventLoop, 0, n)
	var err error
	for range n {
		var wake int
		wake, err = unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK)
		if err != nil {
			break
		}
		l := &eventLoop{s: s, epfd: -1, wake: wake, conns: make(map[int]*evConn),
			ring: &ringLoop{ready: make(chan error, 1)}}
		s.handlers.Add(1)
		go l.run()
		if err = <-l.ring.ready; err != nil {
			break // that loop has ended
		}
		loops = append(loops, l)
	}
	if err != nil {
		for _, l := range loops {
			l.mu.Lock()
			l.closed = true
			l.mu.Unlock()
			unix.Write(l.wake, wakeOne)
		}
		return err
	}
	s.loops = loops
	return nil
}

// run is the loop's goroutine (eventLoop.run hands over to it).
func (r *ringLoop) run(l *eventLoop) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	var err error
	r.ring, err = uring.New(ringEntries, 8*ringEntries,
		uring.SetupSingleIssuer|uring.SetupDeferTaskrun|uring.SetupSubmitAll)
	r.ready <- err
	if err != nil {
		return
	}
	defer r.ring.Close()
	r.armWake(l)
	tick := l.s.tick()
	// The wait is bounded even without deadlines to check: a safety net
	// should a kernel ever complete a MSG_DONTWAIT send outside the enter
	// that submits it (then the loop would sleep past that completion).
	wait := tick
	if wait <= 0 {
		wait = time.Second
	}
	lastSweep := time.Now()
	yield := loopYield{last: lastSweep, yield: runtime.Gosched}
	for {
		if r.nSends > 0 {
			raceReleaseIO() // the replies happen before the clients read them
		}
		if err := r.ring.Wait(r.nSends+1, int64(wait)); err != nil {
			l.s.log.Error("io_uring_enter failed; closing the loop's connections", zap.Error(err))
			l.shutdown()
			return
		}
		r.nSends = 0
		r.now = time.Now()
		if !r.complete(l) {
			l.shutdown()
			return
		}
		r.submitSends(l)
		if tick > 0 && r.now.Sub(lastSweep) >= tick {
			lastSweep = r.now
			l.sweep(r.now)
		}
		// The prepared SQEs wait for the next enter, on this thread
		// (the goroutine is locked to it).
		yield.maybe(r.now)
	}
}

// complete handles every completion that is ready; it reports false when
// the server is closing. Sends are handled first, so that no connection is
// answered while it might still have a send in flight.
func (r *ringLoop) complete(l *eventLoop) bool {
	n := r.ring.Completions()
	if n == 0 {
		return !l.s.closing.Load()
	}
	raceAcquireIO() // the clients' requests happen before their answers
	keep := true
	for pass := range 2 {
		for i := range n {
			cqe := r.ring.CQE(i)
			kind := int(cqe.UserData >> 32)
			if (kind == ringSend) != (pass == 0) {
				continue
			}
			if kind == ringWake {
				r.wakeOut = false
				if !r.woken(l) {
					keep = false
				}
				continue
			}
			if kind == ringCancel {
				continue
			}
			fd := int(uint32(cqe.UserData))
			l.mu.Lock()
			c := l.conns[fd]
			l.mu.Unlock()
			if c == nil {
				continue // unreachable: a connection stays until inflight is 0
			}
			c.ur.inflight--
			r.event(l, c, kind, cqe.Res)
			if c.ur.closed {
				r.release(l, c)
			} else {
				r.kick(l, c)
			}
		}
	}
	r.ring.Consume(n)
	return keep
}

// woken handles the eventfd: new connections, connections helpers gave
// back, or the server closing. It reports false when the loop must end.
func (r *ringLoop) woken(l *eventLoop) bool {
	l.mu.Lock()
	incoming, returned := r.incoming, r.returned
	r.incoming, r.returned = nil, nil
	closed := l.closed
	l.mu.Unlock()
	if closed || l.s.closing.Load() {
		return false
	}
	for _, c := range incoming {
		c.ur.pending = false
		r.kick(l, c)
	}
	for _, c := range returned {
		if c.wantOut {
			r.watch(c, unix.EPOLLOUT)
		}
		r.kick(l, c)
	}
	r.armWake(l)
	return true
}

func (r *ringLoop) armWake(l *eventLoop) {
	if r.wakeOut {
		return
	}
	r.sqe().PrepRead(l.wake, r.wakeBuf[:], ringData(ringWake, 0))
	r.wakeOut = true
}

// event applies one completion of c's.
func (r *ringLoop) event(l *eventLoop, c *evConn, kind int, res int32) {
	switch kind {
	case ringRecv:
		c.ur.recvArmed = false
		switch {
		case c.ur.closed:
		case res > 0:
			c.rd.filled(int(res))
			c.lastActive = r.now
			c.ur.pending = true
		case res == 0 || res == -int32(unix.ECONNRESET):
			l.closeConn(c)
		default:
			l.s.log.Debug("connection read failed", zap.Error(unix.Errno(-res)))
			l.closeConn(c)
		}
	case ringSend:
		c.ur.sending = false
		c.ur.sendBuf = nil
		switch {
		case c.ur.closed:
		case res >= 0:
			c.sent += int(res)
			if c.sent < len(c.out.b) {
				r.blocked(c)
				return
			}
			c.out.b, c.sent = c.out.b[:0], 0
			if cap(c.out.b) > maxIdleWriteBuffer {
				c.out.b = nil
			}
			if c.quit {
				l.closeConn(c)
			}
		case res == -int32(unix.EAGAIN):
			r.blocked(c)
		default:
			l.closeConn(c)
		}
	case ringPollOut:
		c.ur.pollOut = false
		if c.ur.closed {
			return
		}
		// As the epoll loop on EPOLLOUT: write what is left; once
		// drained, answer what the client sent meanwhile.
		if !l.flush(c, r.now) {
			l.closeConn(c)
			return
		}
		if !c.wantOut {
			if c.quit {
				l.closeConn(c)
				return
			}
			c.ur.pending = true
		}
	}
}

// blocked: the client's socket is full; wait for room, as flush does on
// EAGAIN.
func (r *ringLoop) blocked(c *evConn) {
	if !c.wantOut {
		c.blockedSince = r.now
		c.wantOut = true
	}
	r.watch(c, unix.EPOLLOUT)
}

// kick answers c if it has requests to answer and nothing in flight
// forbids it, then re-arms its recv unless it must not be read now (a
// helper has it, its replies wait for room, it is quitting).
func (r *ringLoop) kick(l *eventLoop, c *evConn) {
	if c.ur.closed || c.busy || c.wantOut || c.ur.recvArmed {
		return
	}
	if c.ur.pending && !c.ur.sending {
		c.ur.pending = false
		if !l.answer(c, r.now, nil, false) {
			l.closeConn(c)
			return
		}
		// A helper may own c now: busy is read under mu, which also
		// orders what the helper did before giving c back.
		l.mu.Lock()
		busy := c.busy
		l.mu.Unlock()
		if busy || c.wantOut || c.ur.closed {
			return
		}
	}
	if c.quit || c.ur.pending {
		return
	}
	room := c.rd.room()
	e := r.sqe()
	e.PrepRecv(c.fd, room, ringData(ringRecv, c.fd))
	if !c.rd.buffered() {
		// Its last bytes were just read: poll before trying.
		e.Ioprio |= uring.RecvSendPollFirst
	}
	c.ur.recvArmed = true
	c.ur.inflight++
}

// watch is eventLoop.watch for the ring: only waiting for room in the
// socket needs a request; reading is re-armed by kick.
func (r *ringLoop) watch(c *evConn, events uint32) {
	if events&unix.EPOLLOUT == 0 || c.ur.pollOut || c.ur.closed {
		return
	}
	r.sqe().PrepPollAdd(c.fd, unix.POLLOUT, ringData(ringPollOut, c.fd))
	c.ur.pollOut = true
	c.ur.inflight++
}

// queueSend puts c's replies in this wake-up's sends.
func (r *ringLoop) queueSend(c *evConn) {
	if !c.ur.queued && c.sent < len(c.out.b) {
		c.ur.queued = true
		r.sends = append(r.sends, c)
	}
}

// submitSends prepares the wake-up's sends, which the next enter submits.
func (r *ringLoop) submitSends(l *eventLoop) {
	if len(r.sends) == 0 {
		return
	}
	// A connection handed to a helper after its replies were queued is
	// the helper's (it writes them); busy is read under mu.
	l.mu.Lock()
	for i, c := range r.sends {
		if c.busy {
			r.sends[i] = nil
			c.ur.queued = false // (only the loop touches queued)
		}
	}
	l.mu.Unlock()
	for i, c := range r.sends {
		if c == nil {
			continue
		}
		r.sends[i] = nil
		c.ur.queued = false
		if c.ur.closed || c.wantOut || c.ur.sending || c.sent >= len(c.out.b) {
			continue
		}
		c.ur.sendBuf = c.out.b[c.sent:]
		r.sqe().PrepSend(c.fd, c.ur.sendBuf, unix.MSG_DONTWAIT|unix.MSG_NOSIGNAL, ringData(ringSend, c.fd))
		c.ur.sending = true
		c.ur.inflight++
		r.nSends++
	}
	r.sends = r.sends[:0]
}

// sqe returns a free submission entry, submitting the queued ones first
// if the queue is full.
func (r *ringLoop) sqe() *uring.SQE {
	for {
		if e := r.ring.SQE(); e != nil {
			return e
		}
		if r.nSends > 0 {
			raceReleaseIO()
		}
		if err := r.ring.Submit(); err != nil {
			// Submitting only fails for a bad ring; the next Wait
			// reports it and ends the loop.
			time.Sleep(time.Millisecond)
		}
	}
}

// close is closeConn for the ring: the counters are already moved. The
// socket is shut down at once, so the client sees the close and a pending
// recv completes; the descriptor is closed once nothing is in flight.
func (r *ringLoop) close(l *eventLoop, c *evConn) {
	c.ur.closed = true
	c.ur.pending = false
	unix.Shutdown(c.fd, unix.SHUT_RDWR)
	if c.ur.pollOut {
		r.sqe().PrepCancel(ringData(ringPollOut, c.fd), ringData(ringCancel, c.fd))
	}
	r.release(l, c)
}

// release closes c's descriptor once the last of its requests completed.
// (A helper's connection has none in flight.)
func (r *ringLoop) release(l *eventLoop, c *evConn) {
	if c.ur.inflight != 0 {
		return
	}
	l.mu.Lock()
	if l.conns[c.fd] == c {
		delete(l.conns, c.fd)
	}
	l.mu.Unlock()
	unix.Close(c.fd)
	c.ur.inflight = -1 // released
}

// drain ends the loop: every connection has been closed (shut down); wait
// for their requests and the eventfd read to complete, so that the kernel
// holds none of the loop's buffers when the ring is closed.
func (r *ringLoop) drain(l *eventLoop) {
	if r.wakeOut {
		r.sqe().PrepCancel(ringData(ringWake, 0), ringData(ringCancel, 0))
	}
	deadline := time.Now().Add(time.Second)
	for time.Now().Before(deadline) {
		l.mu.Lock()
		left := 0
		for _, c := range l.conns {
			if !c.busy && c.ur.inflight > 0 {
				left++
			}
		}
		l.mu.Unlock()
		if left == 0 && !r.wakeOut {
			return
		}
		if err := r.ring.Wait(1, int64(10*time.Millisecond)); err != nil {
			return
		}
		n := r.ring.Completions()
		for i := range n {
			cqe := r.ring.CQE(i)
			kind, fd := int(cqe.UserData>>32), int(uint32(cqe.UserData))
			switch kind {
			case ringWake:
				r.wakeOut = false
			case ringCancel:
			default:
				l.mu.Lock()
				c := l.conns[fd]
				l.mu.Unlock()
				if c != nil {
					c.ur.inflight--
					r.release(l, c)
				}
			}
		}
		r.ring.Consume(n)
	}
	l.s.log.Warn("io_uring loop: requests still in flight at shutdown; closing the ring anyway")
}
