// Command respfloor is the floor pacerd's socket server is measured
// against (scripts/bench-resp.sh): a bare echo server on a Unix socket that
// writes back every byte it reads, built the same ways as pacerd's
// servers, so that the difference is pacerd's own work. An echoed RESP
// request is a valid RESP reply (an array of bulk strings), so
// redis-benchmark and the load generator can drive it like any server.
//
//	respfloor -socket /tmp/floor.sock -server epoll|goroutines|uring|uring-multishot|hybrid [-loops N] [-lock]
//
// goroutines: a goroutine per connection, read then write, through Go's
// netpoller. epoll: as many loops as pacerd runs (-loops, default
// transport.DefaultLoops), each on its own epoll set; a wake-up reads each
// ready connection once and writes back what it read. uring: the same
// loops on io_uring (uring_linux.go). hybrid: the epoll loops, reading and
// writing back many ready connections with one io_uring_enter each
// (hybrid_linux.go).
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"os/signal"
	"runtime"
	"syscall"
	"time"

	"github.com/pacer/pacer/transport"
	"golang.org/x/sys/unix"
)

func main() {
	sock := flag.String("socket", "", "Unix socket path to listen on")
	kind := flag.String("server", "epoll", "epoll, goroutines, uring, uring-multishot or hybrid")
	flag.IntVar(&loopCount, "loops", 0, "event loops (0: as pacerd, transport.DefaultLoops)")
	flag.BoolVar(&lockLoops, "lock", false, "lock the epoll and hybrid loops' goroutines to their threads, as the io_uring loops must be")
	flag.Parse()
	if *sock == "" {
		fmt.Fprintln(os.Stderr, "respfloor: -socket is required")
		os.Exit(2)
	}
	os.Remove(*sock)
	ln, err := net.Listen("unix", *sock)
	if err != nil {
		fmt.Fprintln(os.Stderr, "respfloor:", err)
		os.Exit(1)
	}
	go func() {
		c := make(chan os.Signal, 1)
		signal.Notify(c, syscall.SIGINT, syscall.SIGTERM)
		<-c
		ln.Close()
		os.Exit(0)
	}()
	switch *kind {
	case "goroutines":
		err = serveGoroutines(ln)
	case "epoll":
		err = serveEpoll(ln)
	case "uring":
		err = serveUring(ln, false)
	case "hybrid":
		err = serveHybrid(ln)
	case "uring-multishot":
		err = serveUring(ln, true)
	default:
		err = fmt.Errorf("unknown -server %q", *kind)
	}
	fmt.Fprintln(os.Stderr, "respfloor:", err)
	os.Exit(1)
}

func serveGoroutines(ln net.Listener) error {
	for {
		c, err := ln.Accept()
		if err != nil {
			return err
		}
		go func() {
			defer c.Close()
			buf := make([]byte, 16<<10)
			for {
				n, err := c.Read(buf)
				if n > 0 {
					if _, werr := c.Write(buf[:n]); werr != nil {
						return
					}
				}
				if err != nil {
					return
				}
			}
		}()
	}
}

// lockLoops is -lock: an experiment showing that a loop locked to its
// thread costs more per request at -c 1, whatever it waits in (the runs
// are in the git history of docs/BENCHMARKS.md).
var lockLoops bool

// loopCount is -loops: how many event loops the epoll and uring servers run.
var loopCount int

func loopsWanted() int {
	if loopCount > 0 {
		return loopCount
	}
	return transport.DefaultLoops()
}

func serveEpoll(ln net.Listener) error {
	loops := make([]int, loopsWanted())
	for i := range loops {
		epfd, err := unix.EpollCreate1(unix.EPOLL_CLOEXEC)
		if err != nil {
			return err
		}
		loops[i] = epfd
		go loop(epfd)
	}
	return acceptToEpolls(ln, loops)
}

// acceptToEpolls accepts connections for ever, registering each with the
// next of the loops' epoll descriptors in turn.
func acceptToEpolls(ln net.Listener, loops []int) error {
	for next := 0; ; next++ {
		fd, err := acceptFD(ln)
		if err != nil {
			return err
		}
		ev := unix.EpollEvent{Events: unix.EPOLLIN | unix.EPOLLRDHUP, Fd: int32(fd)}
		if err := unix.EpollCtl(loops[next%len(loops)], unix.EPOLL_CTL_ADD, fd, &ev); err != nil {
			return err
		}
	}
}

// acceptFD accepts a connection and returns its descriptor, duplicated out
// of Go's netpoller for a loop of ours to serve.
func acceptFD(ln net.Listener) (int, error) {
	c, err := ln.Accept()
	if err != nil {
		return -1, err
	}
	raw, err := c.(*net.UnixConn).SyscallConn()
	if err != nil {
		c.Close()
		return -1, err
	}
	fd := -1
	if cerr := raw.Control(func(f uintptr) { fd, err = unix.FcntlInt(f, unix.F_DUPFD_CLOEXEC, 0) }); cerr != nil {
		err = cerr
	}
	c.Close()
	return fd, err
}

func loop(epfd int) {
	if lockLoops {
		runtime.LockOSThread()
	}
	events := make([]unix.EpollEvent, 256)
	buf := make([]byte, 16<<10)
	var yield loopYield
	for {
		yield.maybe()
		n, err := unix.EpollWait(epfd, events, -1)
		if err != nil && !errors.Is(err, unix.EINTR) {
			panic(err)
		}
		for _, ev := range events[:max(n, 0)] {
			fd := int(ev.Fd)
			if err := echo(fd, buf); err != nil {
				unix.Close(fd)
			}
		}
	}
}

// echo reads once and writes back all of it. The descriptor is
// non-blocking; a full socket is retried at once (spinning), which the
// benchmark's clients, which read their replies, never cause for long.
func echo(fd int, buf []byte) error {
	n, err := unix.Read(fd, buf)
	if err == unix.EAGAIN {
		return nil
	}
	if err != nil {
		return err
	}
	if n == 0 {
		return io.EOF
	}
	for off := 0; off < n; {
		w, err := unix.Write(fd, buf[off:n])
		if err == unix.EINTR || err == unix.EAGAIN {
			continue
		}
		if err != nil {
			return err
		}
		off += w
	}
	return nil
}

// loopYield makes a loop yield its P every 2 ms, as pacerd's loops do
// (transport's loopYieldEvery): a goroutine that only waits in system calls
// is never rescheduled, and the runtime's sysmon then preempts it every
// 10 ms and polls every 20 µs for a while after, which at redis-benchmark
// -c 1 cost 3-4 µs a request. The floors pay what pacerd pays.
type loopYield struct{ last time.Time }

func (y *loopYield) maybe() {
	if now := time.Now(); now.Sub(y.last) >= 2*time.Millisecond {
		y.last = now
		runtime.Gosched()
	}
}
