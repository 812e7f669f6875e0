package main

import (
	"net"
	"runtime"
	"sync"

	"github.com/pacer/pacer/internal/uring"
	"golang.org/x/sys/unix"
)

// The io_uring floor: one ring per loop (as many loops as epoll), each owned by
// a goroutine locked to its thread (SetupSingleIssuer, SetupDeferTaskrun:
// the kernel finishes this ring's work only inside the loop's own
// io_uring_enter, never by interrupting it). A wake-up is one
// io_uring_enter: it submits every send of the last batch (MSG_DONTWAIT,
// so each completes inside that call, with what fitted or -EAGAIN) and
// the recvs to re-arm, then sleeps until one more completion than those
// sends arrives: a recv, or a new connection. So a wake-up costs one
// system call for any number of connections, where the epoll floor pays
// epoll_wait plus a read and a write per ready connection.
//
// multishot: a recv stays armed per connection and takes its bytes from a
// ring of provided buffers; otherwise each recv is one-shot into the
// connection's own buffer and re-armed in the next enter (as pacerd's
// server must, to stop reading a client that does not read its replies).

const (
	opRecv = iota + 1
	opSend
	opPollOut
	opWake
)

func ud(op int, slot int) uint64 { return uint64(op)<<32 | uint64(uint32(slot)) }

type uconn struct {
	fd       int
	in, out  []byte
	sent     int
	inflight int  // SQEs whose completion has not been seen
	dirty    bool // out has bytes to send and no send or poll is queued
	closing  bool
}

type uloop struct {
	multishot bool
	ring      *uring.Ring
	bufs      *uring.BufRing

	mu       sync.Mutex
	incoming []int
	wake     int
	wakeBuf  [8]byte

	conns []*uconn
	free  []int
	dirty []int
}

func serveUring(ln net.Listener, multishot bool) error {
	n := loopsWanted()
	loops := make([]*uloop, n)
	errs := make(chan error, n)
	for i := range loops {
		wake, err := unix.Eventfd(0, unix.EFD_CLOEXEC)
		if err != nil {
			return err
		}
		loops[i] = &uloop{multishot: multishot, wake: wake}
		go loops[i].run(errs)
	}
	for range loops {
		if err := <-errs; err != nil {
			return err
		}
	}
	one := []byte{1, 0, 0, 0, 0, 0, 0, 0}
	for next := 0; ; next++ {
		fd, err := acceptFD(ln)
		if err != nil {
			return err
		}
		l := loops[next%len(loops)]
		l.mu.Lock()
		l.incoming = append(l.incoming, fd)
		l.mu.Unlock()
		unix.Write(l.wake, one)
	}
}

func (l *uloop) sqe() *uring.SQE {
	for {
		if e := l.ring.SQE(); e != nil {
			return e
		}
		if err := l.ring.Submit(); err != nil {
			panic(err)
		}
	}
}

func (l *uloop) run(ready chan<- error) {
	runtime.LockOSThread()
	var err error
	l.ring, err = uring.New(1024, 8192, uring.SetupSubmitAll|uring.SetupSingleIssuer|uring.SetupDeferTaskrun)
	if err == nil && l.multishot {
		l.bufs, err = l.ring.NewBufRing(0, 1024, 4096)
	}
	ready <- err
	if err != nil {
		return
	}
	l.sqe().PrepRead(l.wake, l.wakeBuf[:], ud(opWake, 0))
	sends := uint32(0)
	var yield loopYield
	for {
		yield.maybe()
		if err := l.ring.Wait(sends+1, 0); err != nil {
			panic(err)
		}
		sends = 0
		n := l.ring.Completions()
		for i := range n {
			cqe := l.ring.CQE(i)
			l.complete(&cqe)
		}
		l.ring.Consume(n)
		if l.bufs != nil {
			l.bufs.Publish()
		}
		for _, slot := range l.dirty {
			c := l.conns[slot]
			if c == nil || !c.dirty || c.closing {
				continue
			}
			c.dirty = false
			if len(c.out) == c.sent {
				continue
			}
			l.sqe().PrepSend(c.fd, c.out[c.sent:], unix.MSG_DONTWAIT|unix.MSG_NOSIGNAL, ud(opSend, slot))
			c.inflight++
			sends++
		}
		l.dirty = l.dirty[:0]
	}
}

func (l *uloop) armRecv(slot int, pollFirst bool) {
	c := l.conns[slot]
	e := l.sqe()
	if l.multishot {
		e.PrepRecvMultishot(c.fd, l.bufs.Group(), ud(opRecv, slot))
	} else {
		e.PrepRecv(c.fd, c.in, ud(opRecv, slot))
		if pollFirst {
			e.Ioprio |= uring.RecvSendPollFirst
		}
	}
	c.inflight++
}

func (l *uloop) markDirty(slot int) {
	if c := l.conns[slot]; !c.dirty {
		c.dirty = true
		l.dirty = append(l.dirty, slot)
	}
}

// adopt takes the connections the acceptor handed over, arms a receive
// on each, and re-arms the wake-up read.
func (l *uloop) adopt() {
	l.mu.Lock()
	fds := l.incoming
	l.incoming = nil
	l.mu.Unlock()
	for _, fd := range fds {
		c := &uconn{fd: fd}
		if !l.multishot {
			c.in = make([]byte, 16<<10)
		}
		var s int
		if k := len(l.free); k > 0 {
			s, l.free = l.free[k-1], l.free[:k-1]
			l.conns[s] = c
		} else {
			s = len(l.conns)
			l.conns = append(l.conns, c)
		}
		l.armRecv(s, true)
	}
	l.sqe().PrepRead(l.wake, l.wakeBuf[:], ud(opWake, 0))
}

func (l *uloop) complete(cqe *uring.CQE) {
	op, slot := int(cqe.UserData>>32), int(uint32(cqe.UserData))
	if op == opWake {
		l.adopt()
		return
	}
	c := l.conns[slot]
	c.inflight--
	switch op {
	case opRecv:
		more := cqe.Flags&uring.CQEFMore != 0
		switch {
		case cqe.Res > 0:
			var b []byte
			if id, ok := cqe.Buffer(); ok {
				b = l.bufs.Bytes(id, int(cqe.Res))
				c.out = append(c.out, b...)
				l.bufs.Recycle(id)
			} else {
				c.out = append(c.out, c.in[:cqe.Res]...)
			}
			l.markDirty(slot)
			if l.multishot {
				if more {
					c.inflight++ // still armed
				} else {
					l.armRecv(slot, false)
				}
			} else {
				l.armRecv(slot, cqe.Flags&uring.CQEFSockNonempty == 0)
			}
		case cqe.Res == -int32(unix.ENOBUFS):
			l.armRecv(slot, false)
		default: // EOF or error
			if more {
				c.inflight++
			}
			c.closing = true
		}
	case opSend:
		switch {
		case cqe.Res >= 0:
			c.sent += int(cqe.Res)
			if c.sent == len(c.out) {
				c.out, c.sent = c.out[:0], 0
			} else {
				l.markDirty(slot)
			}
		case cqe.Res == -int32(unix.EAGAIN):
			l.sqe().PrepPollAdd(c.fd, unix.POLLOUT, ud(opPollOut, slot))
			c.inflight++
		default:
			c.closing = true
		}
	case opPollOut:
		l.markDirty(slot)
	}
	if c.closing && c.inflight == 0 {
		unix.Close(c.fd)
		l.conns[slot] = nil
		l.free = append(l.free, slot)
	}
}
