//go:build linux && race

package transport

import "syscall"

// The race detector learns that a reply written by one goroutine happens
// before another's read of it through package syscall's Read and Write (as
// net's reads and writes go), which io_uring's sends and recvs bypass.
// These make the same annotations, at the cost of a failing system call,
// in race-enabled builds only.

// raceReleaseIO: what the loop did happens before the sends it submits.
func raceReleaseIO() { syscall.Write(-1, nil) }

// raceAcquireIO: what a client did before writing happens before its
// request is answered. syscall.Read annotates only a successful read.
func raceAcquireIO() { syscall.Read(devNull, nil) }

var devNull = func() int {
	fd, err := syscall.Open("/dev/null", syscall.O_RDONLY|syscall.O_CLOEXEC, 0)
	if err != nil {
		panic(err)
	}
	return fd
}()
