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
	bufs := map[int][]byte{}
	buf := make([]byte, 16<<10)
	got := make([]int32, 256)
	want := make([]int32, 256)
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
					unix.Close(int(ev.Fd))
					delete(bufs, int(ev.Fd))
				}
			}
			continue
		}
		for i, ev := range events[:n] {
			b := bufs[int(ev.Fd)]
			if b == nil {
				b = make([]byte, 16<<10)
				bufs[int(ev.Fd)] = b
			}
			e := ring.SQE()
			e.PrepRecv(int(ev.Fd), b, uint64(i))
			e.OpFlags = unix.MSG_DONTWAIT
		}
		hybridReap(ring, uint32(n), got)
		sends := uint32(0)
		for i, ev := range events[:n] {
			fd := int(ev.Fd)
			want[i] = 0
			switch {
			case got[i] > 0:
				want[i] = got[i]
				e := ring.SQE()
				e.PrepSend(fd, bufs[fd][:got[i]], unix.MSG_DONTWAIT|unix.MSG_NOSIGNAL, uint64(i))
				sends++
			case got[i] == -int32(unix.EAGAIN):
			default:
				unix.Close(fd)
				delete(bufs, fd)
			}
		}
		hybridReap(ring, sends, got)
		// A send that did not fit is finished with plain writes, as the
		// epoll floor's echo does.
		for i, ev := range events[:n] {
			if want[i] == 0 {
				continue
			}
			fd := int(ev.Fd)
			off := max(int(got[i]), 0)
			if got[i] < 0 && got[i] != -int32(unix.EAGAIN) {
				unix.Close(fd)
				delete(bufs, fd)
				continue
			}
			for off < int(want[i]) {
				w, err := unix.Write(fd, bufs[fd][off:want[i]])
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
