package transport

import (
	"sync/atomic"
	"time"

	"github.com/pacer/pacer/internal/uring"
	"go.uber.org/zap"
	"golang.org/x/sys/unix"
)

// The hybrid server (socket_server: hybrid): the epoll loop, which waits in
// epoll_wait, but a wake-up that finds several connections ready reads them
// all with one io_uring_enter and writes all their replies with another.
//
// Why not a loop that waits in io_uring too: at redis-benchmark -c 1 such a
// loop costs ~6 µs a request more than epoll's. About
// half is the thread lock its ring needs (SINGLE_ISSUER and DEFER_TASKRUN
// tie it to one thread; an epoll loop locked to its thread costs as much
// more), the rest its wake-ups (a client's write wakes a loop in
// epoll_wait as a synchronous wake-up, which the scheduler may serve on the
// writer's core; io_uring's do not). And why not the epoll loop alone:
// with many connections ready it pays a read and a write per connection.
//
// So the ring here never waits and never holds a request past the enter
// that submits it: every recv and send is MSG_DONTWAIT, which the kernel
// completes inside that enter (with data, what fitted, or -EAGAIN). It
// therefore needs neither flag nor the thread lock, and any thread the
// loop's goroutine runs on may use it. The recvs go into each request
// reader's room() and are recorded with filled() (FuzzReaderRoomFilled
// checks that path against fill). A send that
// did not fit is finished by flush, which waits for EPOLLOUT as usual.

// hybridMinReady is the fewest ready connections a wake-up batches through
// the ring; below it, two plain system calls per connection cost no more
// than two io_uring_enters.
const hybridMinReady = 2

// batchRing is a hybrid loop's ring and the state of one wake-up's batch.
type batchRing struct {
	ring  *uring.Ring
	reads []*evConn // connections whose recv is in the batch
	sends []*evConn // connections whose replies go out with the batch's
	res   []int32   // each request's result, by its index in reads or sends

	batches atomic.Uint64 // wake-ups served through the ring
}

// newBatchRing creates a ring for batches of up to n requests.
func newBatchRing(n int) (*batchRing, error) {
	r, err := uring.New(uint32(n), uint32(2*n), uring.SetupSubmitAll)
	if err != nil {
		return nil, err
	}
	return &batchRing{ring: r, res: make([]int32, n)}, nil
}

// sqe returns a free submission entry. A batch has at most as many
// requests as the ring has entries, and each batch is reaped before the
// next, so the queue is never full; if it were, submitting makes room.
func (b *batchRing) sqe() *uring.SQE {
	for {
		if e := b.ring.SQE(); e != nil {
			return e
		}
		if err := b.ring.Submit(); err != nil {
			time.Sleep(time.Millisecond) // a broken ring: the reap reports it
		}
	}
}

// reap submits the queued requests and collects the n results, by index.
// They complete inside the submitting enter (MSG_DONTWAIT); the loop still
// waits for all n, so that no buffer is left with the kernel.
func (b *batchRing) reap(n int) ([]int32, error) {
	for got := 0; got < n; {
		if err := b.ring.Wait(uint32(n-got), 0); err != nil {
			return nil, err
		}
		k := b.ring.Completions()
		for i := range k {
			cqe := b.ring.CQE(i)
			b.res[cqe.UserData] = cqe.Res
		}
		b.ring.Consume(k)
		got += int(k)
	}
	return b.res[:n], nil
}

// queueRecvs queues a recv for each ready connection, into its request
// reader's room; a connection waiting to write, or refused a larger
// buffer, is served as the epoll loop serves it.
func (l *eventLoop) queueRecvs(ready []*evConn, kinds []uint32, now time.Time) {
	b := l.batch
	for i, c := range ready {
		if c.wantOut {
			// Waiting for room to write: as the epoll loop.
			if !l.serve(c, kinds[i], now) {
				l.closeConn(c)
			}
			continue
		}
		buf := c.rd.room()
		if c.rd.refused != nil {
			// No room in the buffer budget: refused as the epoll loop does.
			if !l.answer(c, now, nil, false) {
				l.closeConn(c)
			}
			continue
		}
		e := b.sqe()
		e.PrepRecv(c.fd, buf, uint64(len(b.reads)))
		e.OpFlags = unix.MSG_DONTWAIT
		b.reads = append(b.reads, c)
	}
}

// serveBatch serves one wake-up's ready connections through the ring; it
// reports false if the ring failed (the loop then ends, closing its
// connections).
func (l *eventLoop) serveBatch(ready []*evConn, kinds []uint32, now time.Time) bool {
	b := l.batch
	b.batches.Add(1)
	l.queueRecvs(ready, kinds, now)
	res, err := b.reap(len(b.reads))
	if err != nil {
		l.s.log.Error("io_uring_enter failed; closing the loop's connections", zap.Error(err))
		return false
	}
	raceAcquireIO() // the clients' requests happen before their answers
	l.batching = true
	for j, c := range b.reads {
		switch r := res[j]; {
		case r > 0:
			c.rd.filled(int(r))
			c.lastActive = now
			if !l.answer(c, now, nil, false) { // queues c in b.sends
				l.closeConn(c)
			}
		case r == -int32(unix.EAGAIN):
			c.rd.idle()
		case r == 0 || r == -int32(unix.ECONNRESET):
			l.closeConn(c)
		default:
			l.s.log.Debug("connection read failed", zap.Error(unix.Errno(-r)))
			l.closeConn(c)
		}
	}
	l.batching = false
	clear(b.reads)
	b.reads = b.reads[:0]

	for j, c := range b.sends {
		b.sqe().PrepSend(c.fd, c.out.b[c.sent:], unix.MSG_DONTWAIT|unix.MSG_NOSIGNAL, uint64(j))
	}
	if len(b.sends) > 0 {
		raceReleaseIO() // the replies happen before the clients read them
	}
	res, err = b.reap(len(b.sends))
	if err != nil {
		l.s.log.Error("io_uring_enter failed; closing the loop's connections", zap.Error(err))
		return false
	}
	for j, c := range b.sends {
		r := res[j]
		if r > 0 {
			c.sent += int(r)
		} else if r < 0 && r != -int32(unix.EAGAIN) {
			l.closeConn(c)
			continue
		}
		// Done (flush resets the buffer), or the rest with a plain
		// write, or wait for EPOLLOUT.
		if !l.flush(c, now) || (c.quit && !c.wantOut) {
			l.closeConn(c)
		}
	}
	clear(b.sends)
	b.sends = b.sends[:0]
	return true
}
