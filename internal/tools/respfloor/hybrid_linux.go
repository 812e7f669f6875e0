package main

import (
	"errors"
	"net"
	"runtime"

	"github.com/pacer/pacer/internal/uring"
	"golang.org/x/sys/unix"
)

// The hybrid floor: the epoll floor's loop (waiting in epoll_wait, whose
// wake-ups the kernel may treat as synchronous), but a wake-up that finds
// at least hybridBatch connections ready reads them all with one
// io_uring_enter (a non-blocking recv each) and writes them all back with
// another (a non-blocking send each): three system calls per wake-up
// instead of one plus two per connection. With fewer ready it reads and
// writes as the epoll floor does. The ring only ever holds requests that
// complete inside the enter that submits them, so nothing waits on it.

const hybridBatch = 2

func serveHybrid(ln net.Listener) error {
	loops := make([]int, loopsWanted())
	errs := make(chan error, len(loops))
	for i := range loops {
		epfd, err := unix.EpollCreate1(unix.EPOLL_CLOEXEC)
		if err != nil {
			return err
		}
		loops[i] = epfd
		go hybridLoop(epfd, errs)
	}
	for range loops {
		if err := <-errs; err != nil {
			return err
		}
	}
	return acceptToEpolls(ln, loops)
}

func hybridLoop(epfd int, ready chan<- error) {
	if lockLoops {
		runtime.LockOSThread()
	}
	// No SetupSingleIssuer or SetupDeferTaskrun: both would need the
	// goroutine locked to its thread, and nothing here needs the kernel's
	// deferred work (every request completes inside its own enter).
	ring, err := uring.New(256, 1024, uring.SetupSubmitAll)
	ready <- err
	if err != nil {
		return
	}
	events := make([]unix.EpollEvent, 256)
	h := &hybridRing{ring: ring, bufs: map[int][]byte{}, got: make([]int32, 256), want: make([]int32, 256)}
	buf := make([]byte, 16<<10)
	var yield loopYield
	for {
		yield.maybe()
		n, err := unix.EpollWait(epfd, events, -1)
		if err != nil && !errors.Is(err, unix.EINTR) {
			panic(err)
		}
		if n < hybridBatch {
			for _, ev := range events[:max(n, 0)] {
				if err := echo(int(ev.Fd), buf); err != nil {
					h.drop(int(ev.Fd))
				}
			}
			continue
		}
		h.round(events[:n])
	}
}

// hybridRing echoes a batch of ready connections through io_uring: one
// enter for their receives, one for their sends.
type hybridRing struct {
	ring      *uring.Ring
	bufs      map[int][]byte // a buffer per connection
	got, want []int32        // per event of the batch: a result, a send's length
}

func (h *hybridRing) drop(fd int) {
	unix.Close(fd)
	delete(h.bufs, fd)
}

// round receives from every ready connection, sends back what each sent,
// and finishes with plain writes a send that did not fit, as the epoll
// floor's echo does.
func (h *hybridRing) round(events []unix.EpollEvent) {
	for i, ev := range events {
		b := h.bufs[int(ev.Fd)]
		if b == nil {
			b = make([]byte, 16<<10)
			h.bufs[int(ev.Fd)] = b
		}
		e := h.ring.SQE()
		e.PrepRecv(int(ev.Fd), b, uint64(i))
		e.OpFlags = unix.MSG_DONTWAIT
	}
	hybridReap(h.ring, uint32(len(events)), h.got)
	sends := uint32(0)
	for i, ev := range events {
		fd := int(ev.Fd)
		h.want[i] = 0
		switch {
		case h.got[i] > 0:
			h.want[i] = h.got[i]
			e := h.ring.SQE()
			e.PrepSend(fd, h.bufs[fd][:h.got[i]], unix.MSG_DONTWAIT|unix.MSG_NOSIGNAL, uint64(i))
			sends++
		case h.got[i] == -int32(unix.EAGAIN):
		default:
			h.drop(fd)
		}
	}
	hybridReap(h.ring, sends, h.got)
	for i, ev := range events {
		if h.want[i] == 0 {
			continue
		}
		fd := int(ev.Fd)
		if h.got[i] < 0 && h.got[i] != -int32(unix.EAGAIN) {
			h.drop(fd)
			continue
		}
		for off := max(int(h.got[i]), 0); off < int(h.want[i]); {
			w, err := unix.Write(fd, h.bufs[fd][off:h.want[i]])
			if err == unix.EINTR || err == unix.EAGAIN {
				continue
			}
			if err != nil {
				break
			}
			off += w
		}
	}
}

// hybridReap submits what is queued, waits for n completions (they all
// complete inside the enter) and stores each one's result at its index.
func hybridReap(ring *uring.Ring, n uint32, got []int32) {
	if n == 0 {
		return
	}
	if err := ring.Wait(n, 0); err != nil {
		panic(err)
	}
	c := ring.Completions()
	for i := range c {
		cqe := ring.CQE(i)
		got[cqe.UserData] = cqe.Res
	}
	ring.Consume(c)
}
